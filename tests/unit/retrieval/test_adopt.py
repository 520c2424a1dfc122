"""Adopting a prebuilt FAISS index: an IndexFlatIP (and an IVF-PQ) written by plain FAISS over the
packaged MiniLM's embeddings of a 30-passage JSONL, encoded the way Search-R1 encodes (the raw
``"Title"\\ntext`` contents), is checked, linked and loaded through FaissRetriever; an index of
another size, dimension or row order is refused."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import faiss
import numpy as np
import pytest

from framework.cli.app import load_config
from framework.cli.index import index as index_app
from framework.config import ConfigError
from framework.retrieval.adopt import adopt_index, sample_rows
from framework.retrieval.corpus import chunk_words
from framework.retrieval.dense import DenseIndexConfig, FaissRetriever, FaissRetrieverConfig
from framework.retrieval.encoder import EncoderConfig, SentenceEncoder, minilm_path
from framework.retrieval.types import RetrievalError
from tests.unit.retrieval.corpus_fixtures import DOCS, LIMITS, contents, corpus_cfg, write_jsonl

#: wiki-18's layout at small scale: each document cut into passages of 10 words, every passage a
#: JSONL row carrying its document's title (30 rows from the 10 documents).
PASSAGES = [
    (f"{doc_id}-{j}", title, chunk)
    for doc_id, title, text in DOCS
    for j, chunk in enumerate(chunk_words(text, 10, 0)[:3])
]


# faiss's OpenMP threads spin while they wait (conftest.py's one_faiss_thread)
pytestmark = pytest.mark.usefixtures("one_faiss_thread")


@pytest.fixture(scope="module")
def encoder() -> SentenceEncoder:
    return SentenceEncoder(EncoderConfig())


@pytest.fixture(scope="module")
def search_r1_vectors() -> np.ndarray:
    """What Search-R1's index holds: the raw contents encoded by its own fp32 model, normalised."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(minilm_path()), device="cpu", local_files_only=True)
    texts = [contents(title, text) for _, title, text in PASSAGES]
    return model.encode(texts, normalize_embeddings=True, convert_to_numpy=True).astype(np.float32)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "wiki.jsonl", PASSAGES)


def write_flat(path: Path, vectors: np.ndarray) -> Path:
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    faiss.write_index(index, str(path))
    return path


def cfg_for(corpus: Path, tmp_path: Path, **index) -> FaissRetrieverConfig:
    return FaissRetrieverConfig(
        name="faiss",
        limits=LIMITS,
        corpus=corpus_cfg(corpus),
        cache_dir=str(tmp_path / "cache"),
        progress=False,
        index=DenseIndexConfig(**index),
    )


def test_sample_rows_are_spread_with_first_and_last() -> None:
    assert sample_rows(30, 16) == [0, 2, 4, 6, 8, 10, 12, 14, 15, 17, 19, 21, 23, 25, 27, 29]
    assert sample_rows(3, 16) == [0, 1, 2]


def test_adopted_flat_index_loads_through_index_path_and_searches(
    tmp_path, corpus, encoder, search_r1_vectors
) -> None:
    source = write_flat(tmp_path / "e5_Flat.index", search_r1_vectors)
    target = tmp_path / "adopted"
    cfg = cfg_for(corpus, tmp_path, path=str(target))
    adopted = adopt_index(cfg, source, encoder=encoder)
    assert adopted["directory"] == str(target)
    # linked, not copied
    assert (target / "index.faiss").is_symlink()
    assert (target / "index.faiss").resolve() == source.resolve()
    check = adopted["check"]
    assert check["method"] == "cosine" and len(check["rows"]) == 16
    # '"Title"\ntext' stored against 'Title\ntext' encoded now (and bf16 against fp32 weights):
    # the quotes cost little; a row that is another passage scores far lower (see shuffled)
    assert min(check["cosines"]) >= 0.8
    manifest = json.loads((target / "manifest.json").read_text())
    assert manifest["adopted"]["found"] == {"type": "flat"}
    assert manifest["corpus"]["passages"] == 30 and manifest["dim"] == 384

    retriever = FaissRetriever(cfg=cfg, encoder=encoder)
    with retriever:
        assert retriever.build_seconds is None and retriever.directory == target
        assert retriever.describe()["adopted"]["source"] == str(source.resolve())
        hits = retriever.search(["Which planet has a prominent ring system?"], 3)[0]
        assert hits[0].title == "Saturn"
        assert hits[0].passage_id.startswith("d10-")


def test_adopting_into_the_cache_is_loaded_without_a_path(
    tmp_path, corpus, encoder, search_r1_vectors
) -> None:
    source = write_flat(tmp_path / "flat.index", search_r1_vectors)
    cfg = cfg_for(corpus, tmp_path)
    adopted = adopt_index(cfg, source, encoder=encoder)
    assert Path(adopted["directory"]).is_relative_to(tmp_path / "cache" / "index")
    with FaissRetriever(cfg=cfg, encoder=encoder) as retriever:
        assert retriever.build_seconds is None  # loaded, nothing embedded or built
        assert retriever.search(["espresso coffee"], 1)[0][0].title == "Espresso"
    # adopting the same file again re-checks and keeps the same link
    assert adopt_index(cfg, source, encoder=encoder)["directory"] == adopted["directory"]


@pytest.mark.parametrize(
    ("vectors", "match"),
    [
        (lambda v: v[:29], r"holds 29 vectors; expected 30, one per passage"),
        (lambda v: np.ones((30, 32), np.float32), r"dim 32; expected 384"),
        # row i holds passage 29 - i's vector: another document for every sampled row
        (lambda v: v[::-1].copy(), r"16 of 16 sampled rows do not match"),
    ],
    ids=["wrong-count", "wrong-dim", "shuffled"],
)
def test_mismatched_index_is_refused_and_nothing_written(
    tmp_path, corpus, encoder, search_r1_vectors, vectors, match
) -> None:
    source = write_flat(tmp_path / "bad.index", vectors(search_r1_vectors))
    target = tmp_path / "adopted"
    with pytest.raises(RetrievalError, match=match) as info:
        adopt_index(cfg_for(corpus, tmp_path, path=str(target)), source, encoder=encoder)
    assert str(info.value).startswith("[adopt]") and "Fix:" in str(info.value)
    assert not target.exists()


def test_shuffled_rows_show_their_cosines(tmp_path, corpus, encoder, search_r1_vectors) -> None:
    source = write_flat(tmp_path / "bad.index", search_r1_vectors[::-1].copy())
    with pytest.raises(RetrievalError) as info:
        adopt_index(cfg_for(corpus, tmp_path), source, encoder=encoder)
    cos = [float(x) for x in re.findall(r"cosine (-?[0-9.]+)", str(info.value))]
    assert len(cos) == 16 and max(cos) < 0.8
    assert "row 0 ('Jaws (film)'): cosine" in str(info.value)


def test_sample_zero_skips_the_check_with_a_warning(
    tmp_path, corpus, encoder, search_r1_vectors, caplog
) -> None:
    source = write_flat(tmp_path / "synthetic.index", search_r1_vectors[::-1].copy())
    with caplog.at_level(logging.WARNING, logger="framework.retrieval.adopt"):
        adopted = adopt_index(cfg_for(corpus, tmp_path), source, sample=0, encoder=encoder)
    assert adopted["check"] == {"rows": [], "skipped": True}
    assert "NOT checked" in caplog.text


def test_ivfpq_index_is_checked_by_search_and_its_type_must_be_configured(
    tmp_path, corpus, encoder, search_r1_vectors
) -> None:
    ivfpq = faiss.IndexIVFPQ(faiss.IndexFlatIP(384), 384, 2, 48, 4, faiss.METRIC_INNER_PRODUCT)
    ivfpq.train(search_r1_vectors)
    ivfpq.add(search_r1_vectors)
    source = tmp_path / "ivfpq.index"
    faiss.write_index(ivfpq, str(source))
    with pytest.raises(RetrievalError, match=r"expected the configured \{'type': 'flat'\}") as info:
        adopt_index(cfg_for(corpus, tmp_path), source, encoder=encoder)
    assert (
        "Fix: add retriever.index.type=ivfpq retriever.index.nlist=2 retriever.index.pq_m=48 "
        "retriever.index.pq_bits=4 retriever.index.opq=false" in str(info.value)
    )
    # auto nlist / pq_m accept what the file has; PQ codes are approximate: checked by search
    cfg = cfg_for(corpus, tmp_path, type="ivfpq", pq_bits=4, nprobe=2)
    adopted = adopt_index(cfg, source, encoder=encoder)
    assert adopted["check"]["method"] == "row in its own top 10"
    assert all(adopted["check"]["found"])
    with FaissRetriever(cfg=cfg, encoder=encoder) as retriever:
        assert retriever.search(["espresso coffee"], 1)[0][0].title == "Espresso"


def test_a_link_whose_file_went_away_is_reported(
    tmp_path, corpus, encoder, search_r1_vectors
) -> None:
    source = write_flat(tmp_path / "moved.index", search_r1_vectors)
    cfg = cfg_for(corpus, tmp_path, path=str(tmp_path / "adopted"))
    adopt_index(cfg, source, encoder=encoder)
    source.unlink()
    with pytest.raises(RetrievalError, match=r"links to .*moved.index, which is missing"):
        FaissRetriever(cfg=cfg, encoder=encoder)


def test_seekrl_index_adopt_command(tmp_path, corpus, search_r1_vectors, capsys) -> None:
    source = write_flat(tmp_path / "e5_Flat.index", search_r1_vectors)
    common = [
        "retriever.corpus.source=jsonl",
        f"retriever.corpus.path={corpus}",
        f"retriever.cache_dir={tmp_path / 'cache'}",
        "retriever.progress=false",
    ]
    with pytest.raises(ConfigError, match=r"\[adopt\] got .*expected an existing FAISS index"):
        load_config("index", [f"adopt={tmp_path / 'none.index'}", *common])
    with pytest.raises(ConfigError, match=r"retriever=faiss"):
        load_config("index", [f"adopt={source}", "retriever=bm25", *common[:3]])
    target = tmp_path / "adopted"
    cfg = load_config(
        "index",
        [f"adopt={source}", f"retriever.index.path={target}", "smoke_query=Saturn rings", *common],
    )
    summary = index_app(cfg)
    out = capsys.readouterr().out
    assert f"adopted {source.resolve()} into {target} (linked, not copied)" in out
    assert summary["adopted"]["check"]["method"] == "cosine"
    assert "Saturn" in out.split("query 'Saturn rings':")[1].splitlines()[1]


@pytest.mark.parametrize(
    ("kind", "make", "index_cfg"),
    [
        ("hnsw", lambda: faiss.IndexHNSWFlat(384, 16, faiss.METRIC_INNER_PRODUCT), {"hnsw_m": 16}),
        (
            "ivf",
            lambda: faiss.IndexIVFFlat(faiss.IndexFlatIP(384), 384, 2, faiss.METRIC_INNER_PRODUCT),
            {"nprobe": 2},
        ),
    ],
)
def test_hnsw_and_ivf_indexes_are_checked_by_their_stored_vectors(
    tmp_path, corpus, encoder, search_r1_vectors, kind, make, index_cfg
) -> None:
    built = make()
    built.train(search_r1_vectors)
    built.add(search_r1_vectors)
    source = tmp_path / f"{kind}.index"
    faiss.write_index(built, str(source))
    cfg = cfg_for(corpus, tmp_path, type=kind, **index_cfg)
    adopted = adopt_index(cfg, source, encoder=encoder)
    # both keep the vectors exactly (IVF through a direct map): compared by cosine
    assert adopted["check"]["method"] == "cosine" and min(adopted["check"]["cosines"]) >= 0.8
    with FaissRetriever(cfg=cfg, encoder=encoder) as retriever:
        assert retriever.search(["espresso coffee"], 1)[0][0].title == "Espresso"
