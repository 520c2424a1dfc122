"""BM25 over the tiny corpus, the fusion rules, and the hybrid backend with a fake dense encoder."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from framework.registry.protocols import Retriever
from framework.retrieval import dense as dense_mod
from framework.retrieval.bm25 import BM25Retriever
from framework.retrieval.dense import DenseIndexConfig
from framework.retrieval.encoder import EncoderConfig
from framework.retrieval.hybrid import HybridRetriever, HybridRetrieverConfig, fuse
from framework.retrieval.types import QueryError, RetrievalError
from framework.types import Hit
from tests.unit.retrieval.corpus_fixtures import (
    DOCS,
    LIMITS,
    ROW,
    FakeEncoder,
    bm25_cfg,
    corpus_cfg,
    embed,
    passage_texts,
    write_jsonl,
)


@pytest.fixture(scope="module")
def bm25(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("bm25")
    retriever = BM25Retriever(cfg=bm25_cfg(write_jsonl(root / "c.jsonl"), root / "cache"))
    yield retriever
    retriever.close()


def ids(hits: list[Hit]) -> list[str]:
    return [h.passage_id for h in hits]


# --------------------------------------------------------------------------- BM25 ranking


@pytest.mark.parametrize(
    ("query", "doc_id"),
    [
        ("tardigrades", "d7"),
        ("Espresso", "d9"),
        ("HANSEATIC", "d8"),
        ("Spielberg", "d1"),
        ("Queensland coral", "d5"),
        ("saturn zzyzx", "d10"),  # an unknown word next to a known one does no harm
        ("1950s", "d6"),  # an exact token with digits
    ],
)
def test_distinctive_word_finds_its_document_first(bm25, query: str, doc_id: str) -> None:
    hits = bm25.search([query], 3)[0]
    assert hits[0].passage_id == doc_id
    assert hits[0].score > 0
    assert (hits[0].doc_id, hits[0].title, hits[0].text) == DOCS[ROW[doc_id]]


def test_only_matching_passages_are_returned(bm25) -> None:
    # independently: the passages whose title or text contains the word "water"
    expected = {d for d, t, x in DOCS if "water" in re.findall(r"\w+", f"{t} {x}".lower())}
    assert expected == {"d7", "d9"}
    hits = bm25.search(["water"], 5)[0]
    assert set(ids(hits)) == expected
    assert all(h.score > 0 for h in hits)


@pytest.mark.parametrize("query", ["zzyzx qwertyuiop", "the of and", "!!!"])
def test_query_without_known_terms_returns_nothing(bm25, query: str) -> None:
    assert bm25.search([query], 5) == [[]]


def test_k_larger_than_the_corpus(bm25) -> None:
    every_title = " ".join(t for _, t, _ in DOCS)  # every passage contains its title
    hits = bm25.search([every_title], 50)[0]
    assert sorted(ids(hits)) == sorted(ROW)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)


def test_batch_equals_single_queries(bm25) -> None:
    queries = ["tardigrades", "zzyzx", "coffee beans", "water"]
    assert bm25.search(queries, 3) == [bm25.search([q], 3)[0] for q in queries]


@pytest.mark.parametrize(
    ("queries", "k"),
    [([], 3), ([" "], 3), (["ok"], 0), (["ok"], 51), (["ok"] * 5, 3), ("ok", 3), (["x" * 201], 3)],
)
def test_bm25_bad_requests(bm25, queries, k) -> None:
    with pytest.raises(QueryError):
        bm25.search(queries, k)


def test_bm25_documents_and_protocol(bm25) -> None:
    assert isinstance(bm25, Retriever)
    assert bm25.document(title="saturn").doc_id == "d10"
    assert bm25.describe()["passages"] == len(DOCS)


def test_bm25_scores_match_hand_computation(tmp_path: Path, cache: Path) -> None:
    docs = [
        ("a", "Alpha", "apple apple banana"),  # tokens: alpha apple apple banana (4)
        ("b", "Beta", "banana cherry"),  # beta banana cherry (3)
        ("c", "Gamma", "cherry date elder fig"),  # gamma cherry date elder fig (5)
    ]
    path = write_jsonl(tmp_path / "abc.jsonl", docs)
    retriever = BM25Retriever(cfg=bm25_cfg(path, cache, stopwords="none"))
    with retriever:
        # Lucene BM25: idf = ln(1 + (N - df + 0.5) / (df + 0.5)),
        # tf part = tf / (tf + k1 * (1 - b + b * dl / avgdl)); N = 3, avgdl = 12 / 3 = 4
        k1, b = 1.5, 0.75
        idf_apple = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))  # ln(8/3) = 0.980829
        apple_a = idf_apple * 2 / (2 + k1 * (1 - b + b * 4 / 4))  # 0.560474
        hits = retriever.search(["apple"], 3)[0]
        assert ids(hits) == ["a"]
        assert hits[0].score == pytest.approx(apple_a, rel=1e-5)
        assert apple_a == pytest.approx(0.560474, abs=1e-6)

        idf_cherry = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))  # ln(1.6) = 0.470004
        cherry_b = idf_cherry * 1 / (1 + k1 * (1 - b + b * 3 / 4))  # dl 3: 0.470004 / 2.3125
        cherry_c = idf_cherry * 1 / (1 + k1 * (1 - b + b * 5 / 4))  # dl 5: 0.470004 / 2.78125
        hits = retriever.search(["cherry"], 3)[0]
        assert ids(hits) == ["b", "c"]
        assert [h.score for h in hits] == pytest.approx([cherry_b, cherry_c], rel=1e-5)

        # the title is indexed too
        assert ids(retriever.search(["gamma"], 3)[0]) == ["c"]


# --------------------------------------------------------------------------- BM25 cache


def test_bm25_cache_reuse_and_params_key(corpus_path: Path, cache: Path) -> None:
    first = BM25Retriever(cfg=bm25_cfg(corpus_path, cache))
    with first:
        assert first.build_seconds is not None
        expected = first.search(["coffee water"], 3)
    second = BM25Retriever(cfg=bm25_cfg(corpus_path, cache))
    with second:
        assert second.build_seconds is None
        assert second.directory == first.directory
        assert second.search(["coffee water"], 3) == expected
    third = BM25Retriever(cfg=bm25_cfg(corpus_path, cache, k1=0.9, b=0.4))
    with third:
        assert third.build_seconds is not None  # other parameters: another index
        assert third.directory != first.directory
        assert [h.score for h in third.search(["coffee water"], 3)[0]] != [
            h.score for h in expected[0]
        ]


def test_bm25_build_if_missing_false(corpus_path: Path, cache: Path) -> None:
    from framework.retrieval.corpus import open_corpus

    open_corpus(corpus_cfg(corpus_path), cache, progress=False).close()
    with pytest.raises(RetrievalError, match="no BM25 index"):
        BM25Retriever(cfg=bm25_cfg(corpus_path, cache, build_if_missing=False))


def test_bm25_tampered_manifest_is_refused(corpus_path: Path, cache: Path) -> None:
    built = BM25Retriever(cfg=bm25_cfg(corpus_path, cache))
    built.close()
    manifest_file = built.directory / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["corpus"]["fingerprint"] = "0" * 32
    manifest_file.write_text(json.dumps(manifest))
    with pytest.raises(RetrievalError, match="does not match") as info:
        BM25Retriever(cfg=bm25_cfg(corpus_path, cache))
    assert "corpus: configured" in str(info.value) and "0" * 32 in str(info.value)

    manifest_file.write_text("{ not json")
    with pytest.raises(RetrievalError, match="corrupt"):
        BM25Retriever(cfg=bm25_cfg(corpus_path, cache))


@pytest.mark.parametrize("damage", ["junk", "truncated", "deleted"])
@pytest.mark.parametrize(
    "name",
    ["data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy", "vocab.index.json"],
)
def test_bm25_damaged_files(corpus_path: Path, cache: Path, name: str, damage: str) -> None:
    built = BM25Retriever(cfg=bm25_cfg(corpus_path, cache))
    built.close()
    target = built.directory / name
    assert target.is_file()
    data = target.read_bytes()
    if damage == "deleted":
        target.unlink()
    else:
        target.write_bytes(b"junk" * 10 if damage == "junk" else data[: len(data) // 2])
    with pytest.raises(RetrievalError, match="unreadable") as info:
        BM25Retriever(cfg=bm25_cfg(corpus_path, cache))
    assert "rebuild" in str(info.value)


# --------------------------------------------------------------------------- fuse


def hit(pid: str, score: float, tag: str = "") -> Hit:
    return Hit(
        passage_id=pid, doc_id=pid.split("#")[0], title=pid.upper() + tag, text=tag, score=score
    )


def scores(hits: list[Hit]) -> list[tuple[str, float]]:
    return [(h.passage_id, h.score) for h in hits]


def test_rrf_rank_one_in_both_lists() -> None:
    dense = [hit("a", 0.9), hit("b", 0.8), hit("c", 0.1)]
    sparse = [hit("a", 12.0), hit("d", 7.0), hit("b", 3.0)]
    out = fuse(dense, sparse, 4, fusion="rrf", dense_weight=0.5, rrf_k=60)
    # a: 1/61 + 1/61; b: 1/62 + 1/63; d: 1/62; c: 1/63
    assert ids(out) == ["a", "b", "d", "c"]
    assert out[0].score == pytest.approx(2 / 61) == pytest.approx(0.032787, abs=1e-6)
    assert [h.score for h in out] == pytest.approx([2 / 61, 1 / 62 + 1 / 63, 1 / 62, 1 / 63])


def test_rrf_ties_are_broken_by_passage_id() -> None:
    dense = [hit("a", 3.0), hit("b", 2.0), hit("c", 1.0)]
    sparse = [hit("c", 9.0), hit("d", 8.0), hit("a", 7.0)]
    out = fuse(dense, sparse, 10, fusion="rrf", dense_weight=0.5, rrf_k=60)
    # a: ranks 1 and 3, c: ranks 3 and 1 -> both 1/61 + 1/63; b and d: 1/62 each
    assert scores(out) == [
        ("a", pytest.approx(1 / 61 + 1 / 63)),
        ("c", pytest.approx(1 / 61 + 1 / 63)),
        ("b", pytest.approx(1 / 62)),
        ("d", pytest.approx(1 / 62)),
    ]
    assert out[0].score == pytest.approx(0.032266, abs=1e-6)


def test_rrf_ignores_scores_and_weights_and_honours_k() -> None:
    dense = [hit("x", -5.0), hit("y", -6.0)]
    out = fuse(dense, [], 1, fusion="rrf", dense_weight=0.0, rrf_k=0)
    assert scores(out) == [("x", 1.0)]  # 1 / (0 + 1)
    out = fuse([], dense, 5, fusion="rrf", dense_weight=1.0, rrf_k=0)
    assert scores(out) == [("x", 1.0), ("y", 0.5)]
    assert fuse([], [], 5, fusion="rrf", dense_weight=0.5, rrf_k=60) == []


def test_weighted_fusion_min_max_scales_each_list() -> None:
    dense = [hit("a", 0.9), hit("b", 0.5), hit("c", 0.1)]
    sparse = [hit("b", 12.0), hit("d", 6.0), hit("a", 3.0)]
    out = fuse(dense, sparse, 10, fusion="weighted", dense_weight=0.7, rrf_k=60)
    # dense scaled over [0.1, 0.9]: a 1, b 0.5, c 0; sparse over [3, 12]: b 1, d 1/3, a 0
    # a = 0.7 * 1 + 0.3 * 0 = 0.7; b = 0.7 * 0.5 + 0.3 * 1 = 0.65; d = 0.3 / 3 = 0.1; c = 0
    assert ids(out) == ["a", "b", "d", "c"]
    assert [h.score for h in out] == pytest.approx([0.7, 0.65, 0.1, 0.0])
    top2 = fuse(dense, sparse, 2, fusion="weighted", dense_weight=0.7, rrf_k=60)
    assert ids(top2) == ["a", "b"]


def test_weighted_fusion_flat_lists_and_ties() -> None:
    # all-equal scores scale to 1; equal fused scores come out in passage-id order
    dense = [hit("b", 0.4), hit("a", 0.4)]
    out = fuse(dense, [], 5, fusion="weighted", dense_weight=0.7, rrf_k=60)
    assert scores(out) == [("a", pytest.approx(0.7)), ("b", pytest.approx(0.7))]
    out = fuse([hit("z", 2.0)], [hit("y", 5.0)], 5, fusion="weighted", dense_weight=0.5, rrf_k=60)
    assert scores(out) == [("y", pytest.approx(0.5)), ("z", pytest.approx(0.5))]


def test_fused_hits_keep_the_passage_fields() -> None:
    dense = [hit("a#1", 0.9, tag="dense")]
    sparse = [hit("a#1", 4.0, tag="sparse"), hit("b", 2.0, tag="sparse")]
    out = fuse(dense, sparse, 5, fusion="rrf", dense_weight=0.5, rrf_k=60)
    assert out[0].passage_id == "a#1" and out[0].doc_id == "a" and out[0].text == "dense"
    assert out[1].text == "sparse" and out[1].title == "Bsparse"


# --------------------------------------------------------------------------- hybrid backend


@pytest.fixture
def fake_sentence_encoder(monkeypatch: pytest.MonkeyPatch) -> list[FakeEncoder]:
    """framework.retrieval.dense.SentenceEncoder replaced by the fake; returns those made."""
    made: list[FakeEncoder] = []

    def make(cfg: EncoderConfig) -> FakeEncoder:
        made.append(FakeEncoder(cfg))
        return made[-1]

    monkeypatch.setattr(dense_mod, "SentenceEncoder", make)
    return made


def hybrid_cfg(corpus_path: Path, cache: Path, **kw) -> HybridRetrieverConfig:
    return HybridRetrieverConfig(
        name="hybrid",
        limits=LIMITS,
        corpus=corpus_cfg(corpus_path),
        cache_dir=str(cache),
        progress=False,
        encoder=EncoderConfig(store_dtype="float32"),  # scores compared with float32 numpy
        index=DenseIndexConfig(),
        **kw,
    )


def test_hybrid_finds_what_only_one_backend_finds(
    corpus_path: Path, cache: Path, fake_sentence_encoder: list[FakeEncoder]
) -> None:
    retriever = HybridRetriever(cfg=hybrid_cfg(corpus_path, cache, candidates=3))
    with retriever:
        assert isinstance(retriever, Retriever)
        assert len(fake_sentence_encoder) == 1

        # "cinema" is not in the corpus: BM25 has nothing; the fake dense encoder maps it to "film"
        assert retriever.sparse.search(["cinema"], 3) == [[]]
        bf = embed(passage_texts()) @ embed(["cinema"])[0]
        assert DOCS[int(bf.argmax())][0] == "d1"
        fused = retriever.search(["cinema"], 3)[0]
        assert ids(fused)[0] == "d1"
        assert fused[0].score == pytest.approx(1 / 61)  # rank 1 in the dense list only

        # "1950s" is invisible to the fake dense encoder (digits); BM25 finds the bossa nova page
        assert "d6" not in ids(retriever.dense.search(["1950s"], 3)[0])
        assert ids(retriever.sparse.search(["1950s"], 3)[0]) == ["d6"]
        fused = retriever.search(["1950s"], 3)[0]
        assert "d6" in ids(fused)
        assert dict(scores(fused))["d6"] == pytest.approx(1 / 61)

        # both agree: rank 1 in both lists
        both = retriever.search(["movie shark"], 3)[0]
        assert both[0].passage_id == "d1" and both[0].score == pytest.approx(2 / 61)

        assert retriever.document(title="Bossa nova").doc_id == "d6"
        assert retriever.describe()["backend"] == "hybrid"
        with pytest.raises(QueryError):
            retriever.search(["ok"], 51)
        with pytest.raises(QueryError):
            retriever.search("cinema", 3)


def test_hybrid_weighted_and_cached(
    corpus_path: Path, cache: Path, fake_sentence_encoder: list[FakeEncoder]
) -> None:
    cfg = hybrid_cfg(corpus_path, cache, fusion="weighted", dense_weight=0.7, candidates=10)
    first = HybridRetriever(cfg=cfg)
    with first:
        assert first.dense.build_seconds is not None
        assert first.sparse.build_seconds is not None
        query = "tardigrades water"
        # independently: candidates (10) cover the corpus, so the dense list is every passage,
        # scored by numpy; the BM25 list comes from the BM25 backend alone
        dense_bf = embed(passage_texts()) @ embed([query])[0]
        lo, hi = float(dense_bf.min()), float(dense_bf.max())
        expected_scores = {d: 0.7 * (float(dense_bf[ROW[d]]) - lo) / (hi - lo) for d in ROW}
        sparse = first.sparse.search([query], 10)[0]
        assert set(ids(sparse)) == {"d7", "d9"}
        s_lo, s_hi = min(h.score for h in sparse), max(h.score for h in sparse)
        for h in sparse:
            expected_scores[h.passage_id] += 0.3 * (h.score - s_lo) / (s_hi - s_lo)
        ranked = sorted(expected_scores, key=lambda d: (-expected_scores[d], d))[:3]
        hits = first.search([query], 3)[0]
        assert ids(hits) == ranked and ranked[0] == "d7"
        assert [h.score for h in hits] == pytest.approx([expected_scores[d] for d in ranked])
        expected = first.search(["tardigrades water", "cinema"], 3)
    second = HybridRetriever(cfg=cfg)
    with second:
        assert second.dense.build_seconds is None and second.sparse.build_seconds is None
        assert fake_sentence_encoder[-1].passage_calls == 0
        assert second.search(["tardigrades water", "cinema"], 3) == expected


def test_hybrid_asks_each_backend_for_candidates(
    corpus_path: Path, cache: Path, fake_sentence_encoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    retriever = HybridRetriever(cfg=hybrid_cfg(corpus_path, cache, candidates=40))
    asked: list[int] = []
    for backend in (retriever.dense, retriever.sparse):
        real = backend.search
        monkeypatch.setattr(
            backend, "search", lambda q, k, real=real: asked.append(k) or real(q, k)
        )
    with retriever:
        retriever.search(["coffee"], 2)  # max(2, 40) candidates
        retriever.search(["coffee"], 45)  # max(45, 40)
        assert asked == [40, 40, 45, 45]
        retriever.cfg.candidates = 500
        retriever.search(["coffee"], 2)  # capped at max_k = 50
        assert asked[-2:] == [50, 50]
