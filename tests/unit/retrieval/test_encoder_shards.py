"""Passage embeddings in recorded shards: a run stopped mid-way resumes with only the unfinished
shards, the record names only flushed shards, float16 storage halves the file, and a FAISS index
builds and searches over float16 embeddings. A fake encoder (hashed bag of words) stands in for
the model; no real model is loaded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from framework.retrieval.corpus import open_corpus
from framework.retrieval.dense import FaissRetriever, compute_embeddings
from framework.retrieval.embeddings import (
    Layout,
    embeddings_path,
    read_done,
    shard_bounds,
    write_done,
)
from framework.retrieval.encoder import EncoderConfig
from tests.unit.retrieval.corpus_fixtures import (
    DIM,
    FakeEncoder,
    corpus_cfg,
    embed,
    faiss_cfg,
    passage_texts,
    write_jsonl,
)
from tests.unit.retrieval.corpus_fixtures import DOCS as SMALL_DOCS

#: 32 passages in 4 shards of 8 rows; each shard is one encoder call (store reads of 1024 rows)
DOCS = [
    (f"p{i}", f"Item {i}", f"amber basalt n{i} {'cobalt' if i % 3 else 'dune'}") for i in range(32)
]
TEXTS = [f"{title}\n{text}" for _, title, text in DOCS]
SHARD_ROWS = 8


@pytest.fixture
def store(tmp_path: Path):
    store = open_corpus(corpus_cfg(write_jsonl(tmp_path / "c.jsonl", DOCS)), tmp_path / "cache")
    yield store
    store.close()


class ShardCounter(FakeEncoder):
    """Records which shard each encoder call encodes (from its first passage's row) and raises
    KeyboardInterrupt, as a kill would stop the run, on the call for shard ``stop_at``."""

    def __init__(self, cfg: EncoderConfig, stop_at: int | None = None) -> None:
        super().__init__(cfg)
        self.stop_at = stop_at
        self.shards: list[int] = []

    def encode_passages(self, passages, *, progress=False):
        shard = TEXTS.index(passages[0]) // SHARD_ROWS
        if shard == self.stop_at:
            raise KeyboardInterrupt
        self.shards.append(shard)
        return super().encode_passages(passages, progress=progress)


def test_shard_bounds_cover_every_row_once():
    assert shard_bounds(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert shard_bounds(8, 4) == [(0, 4), (4, 8)]
    assert shard_bounds(3, 65536) == [(0, 3)]
    assert shard_bounds(0, 4) == []


def test_a_killed_run_resumes_with_only_the_unfinished_shards(tmp_path, store):
    cfg = EncoderConfig(shard_rows=SHARD_ROWS, store_dtype="float32")
    path = tmp_path / "emb" / "run.npy"
    first = ShardCounter(cfg, stop_at=2)  # shards 1 and 2 of 4 finish, the third is cut
    with pytest.raises(KeyboardInterrupt):
        compute_embeddings(store, first, path, progress=False)
    assert first.shards == [0, 1]
    assert not path.exists()
    record = json.loads(path.with_suffix(".done.json").read_text())
    assert record == {"shape": [32, DIM], "dtype": "float32", "shard_rows": 8, "done": [0, 1]}

    rerun = ShardCounter(cfg)
    emb = compute_embeddings(store, rerun, path, progress=False)
    assert rerun.shards == [2, 3]  # only shards 3 and 4 are encoded again
    one_shot = compute_embeddings(
        store, ShardCounter(cfg), tmp_path / "one" / "run.npy", progress=False
    )
    assert np.array_equal(np.asarray(emb), np.asarray(one_shot))
    assert np.array_equal(np.asarray(emb), embed(TEXTS))
    assert sorted(p.name for p in path.parent.iterdir()) == ["run.npy"]  # no partial, no record

    again = ShardCounter(cfg)
    compute_embeddings(store, again, path, progress=False)
    assert again.shards == []


def test_a_record_of_another_layout_or_a_lost_partial_starts_over(tmp_path, store):
    cfg = EncoderConfig(shard_rows=SHARD_ROWS, store_dtype="float32")
    path = tmp_path / "emb" / "run.npy"
    with pytest.raises(KeyboardInterrupt):
        compute_embeddings(store, ShardCounter(cfg, stop_at=2), path, progress=False)
    # the same partial file, resumed with another shard size: its record does not apply
    # (16-row shards start at rows 0 and 16, which ShardCounter numbers 0 and 2 by 8 rows)
    other = ShardCounter(EncoderConfig(shard_rows=16, store_dtype="float32"), stop_at=2)
    with pytest.raises(KeyboardInterrupt):
        compute_embeddings(store, other, path, progress=False)
    assert other.shards == [0]  # rows 0-15 again: the 8-row record was not trusted

    path.with_suffix(".partial.npy").unlink()  # record left, rows gone: nothing to trust
    rerun = ShardCounter(EncoderConfig(shard_rows=16, store_dtype="float32"))
    emb = compute_embeddings(store, rerun, path, progress=False)
    assert rerun.shards == [0, 2]
    assert np.array_equal(np.asarray(emb), embed(TEXTS))


def test_read_done_refuses_records_that_do_not_match(tmp_path):
    layout = Layout(rows=10, dim=4, dtype="float16", shard_rows=4)
    record = tmp_path / "r.json"
    assert read_done(record, layout) == set()  # missing
    write_done(record, layout, {0, 2})
    assert read_done(record, layout) == {0, 2}
    assert not list(tmp_path.glob("*.tmp"))  # replaced atomically, nothing left beside it
    assert read_done(record, Layout(10, 4, "float32", 4)) == set()  # another dtype
    assert read_done(record, Layout(10, 4, "float16", 5)) == set()  # another shard size
    record.write_text(json.dumps({**layout.header(), "done": [3]}))  # 10 rows by 4: shards 0-2
    assert read_done(record, layout) == set()
    record.write_text('{"shape": [10, 4], "dty')  # cut by a kill of older code
    assert read_done(record, layout) == set()


def test_float16_storage_is_within_half_precision_and_half_the_size(tmp_path, store):
    half = compute_embeddings(
        store, FakeEncoder(EncoderConfig()), tmp_path / "16" / "e.npy", progress=False
    )
    full = compute_embeddings(
        store,
        FakeEncoder(EncoderConfig(store_dtype="float32")),
        tmp_path / "32" / "e.npy",
        progress=False,
    )
    assert half.dtype == np.float16 and full.dtype == np.float32
    exact = embed(TEXTS)
    assert np.array_equal(np.asarray(full), exact)
    # unit vectors: |x| <= 1, so rounding to fp16 (11 significant bits) moves each by <= 2^-12
    np.testing.assert_allclose(np.asarray(half, dtype=np.float32), exact, rtol=0, atol=2**-12)
    assert np.array_equal(np.asarray(half), exact.astype(np.float16))
    size16 = (tmp_path / "16" / "e.npy").stat().st_size
    size32 = (tmp_path / "32" / "e.npy").stat().st_size
    assert size32 - size16 == 32 * DIM * 2  # same header, 2 bytes a value instead of 4


def test_the_cache_keeps_float16_and_float32_embeddings_apart(corpus_path, cache):
    half = faiss_cfg(corpus_path, cache, encoder=EncoderConfig())
    full = faiss_cfg(corpus_path, cache, encoder=EncoderConfig(store_dtype="float32"))
    assert embeddings_path(half, "c") != embeddings_path(full, "c")
    # batch size, shard size and worker devices do not change the embeddings: same file
    other = faiss_cfg(
        corpus_path,
        cache,
        encoder=EncoderConfig(batch_size=3, shard_rows=5, devices=["cpu", "cpu"]),
    )
    assert embeddings_path(other, "c") == embeddings_path(half, "c")


def test_a_faiss_index_builds_and_searches_over_float16_embeddings(corpus_path, cache):
    cfg = faiss_cfg(corpus_path, cache, encoder=EncoderConfig())  # float16, the default
    retriever = FaissRetriever(cfg=cfg, encoder=FakeEncoder(cfg.encoder))
    with retriever:
        assert retriever.manifest["encoder"]["store_dtype"] == "float16"
        emb = np.load(retriever._embeddings_path(), mmap_mode="r")
        assert emb.dtype == np.float16
        query = "saturn rings planet"
        hits = retriever.search([query], 3)[0]
    scores = embed(passage_texts()) @ embed([query])[0]
    order = np.argsort(-scores)[:3]
    assert [h.passage_id for h in hits] == [SMALL_DOCS[i][0] for i in order]
    # fp16 rounds each value by <= 2^-11 of itself: |sum q_i e_i d_i| <= 2^-11 |q| |e| = 2^-11
    np.testing.assert_allclose([h.score for h in hits], scores[order], rtol=0, atol=2**-11 + 1e-6)
