"""FAISS retrieval with an injected fake encoder: exactness, index types, caching, resumable
embeddings, manifests, damaged files and request checks. No real model is loaded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import faiss
import numpy as np
import pytest

from framework.registry.protocols import Retriever
from framework.retrieval.corpus import open_corpus
from framework.retrieval.dense import (
    DenseIndexConfig,
    FaissRetriever,
    auto_nlist,
    build_faiss_index,
    compute_embeddings,
)
from framework.retrieval.encoder import EncoderConfig
from framework.retrieval.types import DocumentNotFound, QueryError, RetrievalError
from tests.unit.retrieval.corpus_fixtures import (
    DIM,
    DOCS,
    ROW,
    FakeEncoder,
    corpus_cfg,
    embed,
    faiss_cfg,
    passage_texts,
    write_jsonl,
)

IVF = {"nlist": 2, "nprobe": 2}
IVFPQ = {"nlist": 2, "nprobe": 2, "pq_m": 8, "pq_bits": 2}
INDEXES = {
    "flat": {"type": "flat"},
    "hnsw": {"type": "hnsw"},
    "ivf": {"type": "ivf", **IVF},
    "ivfpq": {"type": "ivfpq", **IVFPQ},
}
#: Queries whose brute-force top-4 has no ties (checked in the test).
QUERIES = ["saturn rings planet", "coffee beans pressure", "shark island film", "jazz samba music"]


def open_faiss(cfg, fake: FakeEncoder | None = None) -> tuple[FaissRetriever, FakeEncoder]:
    fake = fake or FakeEncoder(cfg.encoder)
    return FaissRetriever(cfg=cfg, encoder=fake), fake


def brute_force(query: str) -> np.ndarray:
    """Inner products of the query with every passage, by numpy over the fake's embeddings."""
    return embed(passage_texts()) @ embed([query])[0]


def assert_exact(hits, query: str, k: int) -> None:
    """``hits`` are the brute-force top ``k`` (ids, scores and passage fields)."""
    scores = brute_force(query)
    order = np.argsort(-scores, kind="stable")
    assert len(hits) == k
    np.testing.assert_allclose([h.score for h in hits], scores[order[:k]], rtol=0, atol=1e-5)
    assert [h.passage_id for h in hits] == [DOCS[i][0] for i in order[:k]]
    for h in hits:
        doc_id, title, text = DOCS[ROW[h.passage_id]]
        assert (h.doc_id, h.title, h.text) == (doc_id, title, text)


# --------------------------------------------------------------------------- exactness


def test_test_queries_have_no_ties() -> None:
    for q in QUERIES:
        top = np.sort(brute_force(q))[::-1][:5]
        assert np.all(np.diff(top) < -1e-4), (q, top)  # the ids comparison below is well defined


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_exhaustive_indexes_equal_numpy_brute_force(corpus_path: Path, cache: Path, kind) -> None:
    # hnsw over 10 points with ef_search 64, ivf with nprobe == nlist: both visit everything
    retriever, fake = open_faiss(faiss_cfg(corpus_path, cache, **INDEXES[kind]))
    with retriever:
        assert isinstance(retriever, Retriever)
        results = retriever.search(QUERIES, 4)
        assert fake.query_calls == 1  # one batch for all queries
        for query, hits in zip(QUERIES, results):
            assert_exact(hits, query, 4)


def test_ivfpq_builds_and_returns_k_hits(corpus_path: Path, cache: Path) -> None:
    retriever, _ = open_faiss(faiss_cfg(corpus_path, cache, **INDEXES["ivfpq"]))
    with retriever:
        assert retriever.index.ntotal == len(DOCS)
        for hits in retriever.search(QUERIES, 3):
            assert len(hits) == 3
            assert len({h.passage_id for h in hits}) == 3
            assert all(h.passage_id in ROW for h in hits)
            scores = [h.score for h in hits]
            assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize(
    ("query", "doc_id"),
    [("Saturn", "d10"), ("hanseatic", "d8"), ("Lovelace", "d4"), ("Everest", "d2")],
)
def test_title_word_ranks_its_document_first(corpus_path: Path, cache: Path, query, doc_id):
    retriever, _ = open_faiss(faiss_cfg(corpus_path, cache))
    with retriever:
        assert retriever.search([query], 1)[0][0].passage_id == doc_id


@pytest.mark.parametrize("kind", sorted(INDEXES))
def test_k_larger_than_corpus_returns_every_passage(corpus_path: Path, cache: Path, kind) -> None:
    retriever, _ = open_faiss(faiss_cfg(corpus_path, cache, **INDEXES[kind]))
    with retriever:
        hits = retriever.search(["coffee"], 50)[0]
        assert sorted(h.passage_id for h in hits) == sorted(ROW)
        assert all(np.isfinite(h.score) for h in hits)


def test_search_params_are_applied(corpus_path: Path, cache: Path) -> None:
    hnsw, _ = open_faiss(faiss_cfg(corpus_path, cache, type="hnsw", ef_search=17))
    ivf, _ = open_faiss(faiss_cfg(corpus_path, cache, type="ivf", nlist=2, nprobe=1))
    with hnsw, ivf:
        assert faiss.downcast_index(hnsw.index).hnsw.efSearch == 17
        assert faiss.extract_index_ivf(ivf.index).nprobe == 1


def test_auto_nlist() -> None:
    assert auto_nlist(1) == 1
    assert auto_nlist(10) == 1  # 10 // 39 = 0 -> at least one cell
    assert auto_nlist(10_000) == 256  # min(4 * 100, 10000 // 39 = 256)
    assert auto_nlist(1_000_000) == 4000  # min(4 * 1000, 25641)


# --------------------------------------------------------------------------- caching


def test_second_construction_reuses_the_cached_index(corpus_path: Path, cache: Path) -> None:
    cfg = faiss_cfg(corpus_path, cache)
    first, fake1 = open_faiss(cfg)
    with first:
        assert first.build_seconds is not None and first.build_seconds >= 0
        assert first.describe()["built_now"] is True
        assert fake1.passages_encoded == len(DOCS)
        expected = first.search(QUERIES, 3)
    index_file = first.directory / "index.faiss"
    mtime = index_file.stat().st_mtime_ns
    manifest = json.loads((first.directory / "manifest.json").read_text())
    assert manifest["dim"] == DIM and manifest["index"] == {"type": "flat"}
    assert manifest["corpus"]["passages"] == len(DOCS)

    second, fake2 = open_faiss(
        faiss_cfg(corpus_path, cache, encoder=EncoderConfig(batch_size=7, store_dtype="float32"))
    )
    with second:
        assert second.build_seconds is None
        assert second.describe()["built_now"] is False
        assert fake2.passage_calls == 0
        assert second.directory == first.directory
        assert second.search(QUERIES, 3) == expected
    assert index_file.stat().st_mtime_ns == mtime


def test_search_time_parameters_do_not_rebuild(corpus_path: Path, cache: Path) -> None:
    first, _ = open_faiss(faiss_cfg(corpus_path, cache, type="ivf", nlist=2, nprobe=2))
    first.close()
    second, fake = open_faiss(faiss_cfg(corpus_path, cache, type="ivf", nlist=2, nprobe=1))
    with second:
        assert second.build_seconds is None and fake.passage_calls == 0
        assert second.directory == first.directory


def test_embeddings_are_shared_between_index_types(corpus_path: Path, cache: Path) -> None:
    flat, fake1 = open_faiss(faiss_cfg(corpus_path, cache))
    flat.close()
    assert fake1.passages_encoded == len(DOCS)
    hnsw, fake2 = open_faiss(faiss_cfg(corpus_path, cache, type="hnsw"))
    with hnsw:
        assert hnsw.build_seconds is not None  # a new index ...
        assert fake2.passage_calls == 0  # ... from the cached embeddings
        assert hnsw.directory != flat.directory
        assert_exact(hnsw.search(["saturn rings planet"], 4)[0], "saturn rings planet", 4)
    assert len(list((cache / "embeddings").glob("*.npy"))) == 1

    # a passage prefix changes the embeddings: encoded again, into a second file
    prefixed = EncoderConfig(passage_prefix="passage: ")
    other, fake3 = open_faiss(faiss_cfg(corpus_path, cache, encoder=prefixed))
    other.close()
    assert fake3.passages_encoded == len(DOCS)
    assert len(list((cache / "embeddings").glob("*.npy"))) == 2


# --------------------------------------------------------------------------- resumable embeddings

WORDS = ["amber", "basalt", "cobalt", "dune", "ember", "fjord", "glacier", "harbor", "indigo"]


@pytest.fixture
def big_store(tmp_path: Path, cache: Path):
    """A store of 2500 passages: three embedding batches of 1024, 1024 and 452."""
    docs = [
        (f"p{i}", f"Item {i}", f"{WORDS[i % 9]} {WORDS[i % 7]} {WORDS[(i // 9) % 9]} n{i}")
        for i in range(2500)
    ]
    path = write_jsonl(tmp_path / "big.jsonl", docs)
    store = open_corpus(corpus_cfg(path), cache, progress=False)
    yield store, [f"{t}\n{x}" for _, t, x in docs]
    store.close()


@pytest.mark.parametrize("fail_after", [0, 1, 2])
def test_interrupted_embeddings_resume(tmp_path: Path, big_store, fail_after: int) -> None:
    store, texts = big_store
    # shards of 1024 rows: 1024, 1024 and 452 (one encoder call each: store batches of 1024)
    enc_cfg = EncoderConfig(batch_size=1, shard_rows=1024, store_dtype="float32")
    path = tmp_path / "emb" / "run.npy"
    batches = [1024, 1024, 452]

    broken = FakeEncoder(enc_cfg, fail_after=fail_after)
    with pytest.raises(RuntimeError, match="interrupted"):
        compute_embeddings(store, broken, path, progress=False)
    assert not path.exists()
    assert broken.passages_encoded == sum(batches[:fail_after])

    resumed = FakeEncoder(enc_cfg)
    emb = compute_embeddings(store, resumed, path, progress=False)
    assert resumed.passages_encoded == sum(batches[fail_after:])  # only the remaining rows
    assert resumed.passage_calls == 3 - fail_after
    assert emb.shape == (2500, DIM) and emb.dtype == np.float32
    assert sorted(p.name for p in path.parent.iterdir()) == ["run.npy"]  # no partial, no record

    uninterrupted = compute_embeddings(
        store, FakeEncoder(enc_cfg), tmp_path / "emb2" / "run.npy", progress=False
    )
    assert np.array_equal(np.asarray(emb), np.asarray(uninterrupted))
    assert np.array_equal(np.asarray(emb), embed(texts))  # independent of the store

    again = FakeEncoder(enc_cfg)
    compute_embeddings(store, again, path, progress=False)
    assert again.passage_calls == 0


def test_partial_embeddings_of_another_shape_are_not_resumed(tmp_path: Path, big_store) -> None:
    store, texts = big_store
    enc_cfg = EncoderConfig(batch_size=1, shard_rows=1024, store_dtype="float32")
    path = tmp_path / "emb" / "run.npy"
    with pytest.raises(RuntimeError):
        compute_embeddings(store, FakeEncoder(enc_cfg, fail_after=1), path, progress=False)
    record = path.with_suffix(".done.json")
    state = json.loads(record.read_text())
    assert state == {"shape": [2500, DIM], "dtype": "float32", "shard_rows": 1024, "done": [0]}
    record.write_text(json.dumps({**state, "shape": [2500, DIM + 1]}))  # another encoder
    fresh = FakeEncoder(enc_cfg)
    emb = compute_embeddings(store, fresh, path, progress=False)
    assert fresh.passages_encoded == 2500
    assert np.array_equal(np.asarray(emb), embed(texts))


# --------------------------------------------------------------------------- manifests


def test_manifest_mismatch_lists_the_differing_keys(
    tmp_path: Path, corpus_path: Path, cache: Path
) -> None:
    built, _ = open_faiss(faiss_cfg(corpus_path, cache))
    built.close()
    where = str(built.directory)

    other_encoder = EncoderConfig(query_prefix="query: ")
    with pytest.raises(RetrievalError, match="does not match") as info:
        open_faiss(faiss_cfg(corpus_path, cache, encoder=other_encoder, path=where))
    message = str(info.value)
    assert "encoder: configured" in message and "'query: '" in message
    assert "corpus:" not in message and "Fix:" in message

    with pytest.raises(RetrievalError) as info:
        open_faiss(faiss_cfg(corpus_path, cache, corpus={"limit": 5}, path=where))
    assert "corpus: configured" in str(info.value)
    assert "encoder:" not in str(info.value)

    with pytest.raises(RetrievalError) as info:
        open_faiss(faiss_cfg(corpus_path, cache, type="hnsw", path=where))
    assert "index: configured" in str(info.value)

    with pytest.raises(RetrievalError) as info:
        cfg = faiss_cfg(corpus_path, cache, corpus={"limit": 5}, encoder=other_encoder, path=where)
        open_faiss(cfg)
    assert "corpus: configured" in str(info.value) and "encoder: configured" in str(info.value)

    # the matching configuration loads the same directory without building
    same, fake = open_faiss(faiss_cfg(corpus_path, cache, path=where))
    with same:
        assert same.build_seconds is None and fake.passage_calls == 0


def test_index_path_without_an_index_is_not_built(tmp_path: Path, corpus_path: Path, cache: Path):
    empty = tmp_path / "no-index-here"
    empty.mkdir()
    with pytest.raises(RetrievalError, match="no index"):
        open_faiss(faiss_cfg(corpus_path, cache, path=str(empty)))
    assert list(empty.iterdir()) == []


def test_build_if_missing_false(corpus_path: Path, cache: Path) -> None:
    with pytest.raises(RetrievalError, match="no passage store"):
        open_faiss(faiss_cfg(corpus_path, cache, build_if_missing=False))
    open_corpus(corpus_cfg(corpus_path), cache, progress=False).close()  # store, but no index
    with pytest.raises(RetrievalError, match="no index"):
        open_faiss(faiss_cfg(corpus_path, cache, build_if_missing=False))
    assert not (cache / "index").exists()
    open_faiss(faiss_cfg(corpus_path, cache))[0].close()
    loaded, _ = open_faiss(faiss_cfg(corpus_path, cache, build_if_missing=False))
    loaded.close()
    assert loaded.build_seconds is None


# --------------------------------------------------------------------------- damaged files


@pytest.mark.parametrize("damage", ["junk", "truncated", "empty"])
@pytest.mark.parametrize("kind", sorted(INDEXES))
def test_damaged_index_file_asks_for_a_rebuild(corpus_path: Path, cache: Path, kind, damage):
    cfg = faiss_cfg(corpus_path, cache, **INDEXES[kind])
    built, _ = open_faiss(cfg)
    built.close()
    index_file = built.directory / "index.faiss"
    data = index_file.read_bytes()
    index_file.write_bytes(
        {"junk": b"not a faiss index " * 50, "truncated": data[: len(data) // 2], "empty": b""}[
            damage
        ]
    )
    with pytest.raises(RetrievalError, match="rebuild") as info:
        open_faiss(cfg)
    assert "corrupt or truncated" in str(info.value)


def test_missing_index_file_with_a_manifest_asks_for_a_rebuild(corpus_path: Path, cache: Path):
    cfg = faiss_cfg(corpus_path, cache)
    built, _ = open_faiss(cfg)
    built.close()
    (built.directory / "index.faiss").unlink()
    with pytest.raises(RetrievalError, match="rebuild"):
        open_faiss(cfg)


def test_corrupt_manifest(corpus_path: Path, cache: Path) -> None:
    cfg = faiss_cfg(corpus_path, cache)
    built, _ = open_faiss(cfg)
    built.close()
    (built.directory / "manifest.json").write_text('{"corpus": ')
    with pytest.raises(RetrievalError, match="corrupt"):
        open_faiss(cfg)


def test_index_of_another_size_is_refused(tmp_path: Path, corpus_path: Path, cache: Path) -> None:
    cfg = faiss_cfg(corpus_path, cache)
    built, _ = open_faiss(cfg)
    built.close()
    small = build_faiss_index(embed(passage_texts()[:3]), DenseIndexConfig())
    faiss.write_index(small, str(built.directory / "index.faiss"))
    with pytest.raises(RetrievalError, match="holds 3 vectors"):
        open_faiss(cfg)


# --------------------------------------------------------------------------- build parameters


def test_build_faiss_index_rejects_impossible_parameters() -> None:
    emb = embed(passage_texts())  # 10 x 64
    with pytest.raises(RetrievalError, match=r"pq_m\] got 12") as info:
        build_faiss_index(emb, DenseIndexConfig(type="ivfpq", nlist=2, pq_m=12, pq_bits=2))
    # auto is 64 / 8 = 8; the divisors nearest it by ratio: 8, then 4 and 16, then 32 over 2
    assert "Fix:" in str(info.value) and "(auto: 8) or a divisor such as [4, 8, 16, 32]" in str(
        info.value
    )
    for kind in ("ivf", "ivfpq"):
        with pytest.raises(RetrievalError, match=r"nlist\] got 20 for 10 passages") as info:
            build_faiss_index(emb, DenseIndexConfig(type=kind, nlist=20, pq_m=8, pq_bits=2))
        assert "Fix:" in str(info.value)
    with pytest.raises(RetrievalError, match=r"pq_bits\] got 4") as info:
        build_faiss_index(emb, DenseIndexConfig(type="ivfpq", nlist=2, pq_m=8, pq_bits=4))
    assert "Fix:" in str(info.value)


def test_impossible_build_is_refused_before_embedding(corpus_path: Path, cache: Path) -> None:
    bad = faiss_cfg(corpus_path, cache, type="ivf", nlist=20)
    refused = FakeEncoder(bad.encoder)
    with pytest.raises(RetrievalError, match="nlist"):
        open_faiss(bad, refused)
    assert refused.passage_calls == 0  # the plan is checked before hours of embedding
    assert list(cache.glob("index/*/manifest.json")) == []
    ok, fake = open_faiss(faiss_cfg(corpus_path, cache, type="ivf", nlist=2, nprobe=2))
    with ok:
        assert fake.passages_encoded == len(DOCS)
        assert len(ok.search(["coffee"], 3)[0]) == 3


# --------------------------------------------------------------------------- requests


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("dense")
    retriever, fake = open_faiss(faiss_cfg(write_jsonl(root / "c.jsonl"), root / "cache"))
    yield retriever, fake
    retriever.close()


@pytest.mark.parametrize(
    ("queries", "k", "match"),
    [
        ([], 3, "no queries"),
        ([""], 3, "non-empty"),
        (["   \n\t"], 3, "non-empty"),
        (["ok", ""], 3, "query 1"),
        ([None], 3, "non-empty"),
        (["ok"], 0, "k=0"),
        (["ok"], -1, "k=-1"),
        (["ok"], 51, "k=51"),  # max_k = 50 in these tests
        (["ok"], True, "k=True"),
        (["ok"], 2.0, "k=2.0"),
        (["ok"] * 5, 3, "5 queries"),  # max_queries = 4
        ("saturn", 3, "single string"),
        (["x" * 201], 3, "201 characters"),  # max_query_chars = 200
    ],
)
def test_bad_requests_raise_query_error(shared, queries, k, match) -> None:
    retriever, fake = shared
    before = fake.query_calls
    with pytest.raises(QueryError, match=match):
        retriever.search(queries, k)
    assert fake.query_calls == before  # rejected before encoding


def test_limits_themselves_are_accepted(shared) -> None:
    retriever, _ = shared
    results = retriever.search(["x" * 200, "saturn", "coffee", "film"], 50)
    assert [len(r) for r in results] == [10, 10, 10, 10]


def test_document_lookup_through_the_retriever(shared) -> None:
    retriever, _ = shared
    assert retriever.document(doc_id="d9").title == "Espresso"
    assert retriever.document(title="espresso").doc_id == "d9"
    with pytest.raises(DocumentNotFound):
        retriever.document(doc_id="nope")
    with pytest.raises(QueryError, match="exactly one"):
        retriever.document(doc_id="d9", title="Espresso")
    with pytest.raises(QueryError, match="exactly one"):
        retriever.document()
    with pytest.raises(QueryError, match="non-empty"):
        retriever.document(title="  ")


def test_copying_an_index_directory_keeps_it_usable(tmp_path: Path, corpus_path: Path, cache):
    built, _ = open_faiss(faiss_cfg(corpus_path, cache))
    built.close()
    moved = tmp_path / "moved-index"
    shutil.copytree(built.directory, moved)
    loaded, fake = open_faiss(faiss_cfg(corpus_path, cache, path=str(moved)))
    with loaded:
        assert loaded.build_seconds is None and fake.passage_calls == 0
        assert_exact(loaded.search(["coffee beans pressure"], 4)[0], "coffee beans pressure", 4)
