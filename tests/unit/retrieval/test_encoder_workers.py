"""Passage encoding in worker processes (``retriever.encoder.devices``): two spawned CPU workers
give the embeddings one in-process worker gives (the packaged MiniLM, 40 passages), a worker's
exception ends the run with its message and keeps the shards finished before, and Ctrl-C ends the
worker at once, keeping the finished shards (one spawned worker each, which keeps them short). The fakes below are module-level so that spawned
workers can import them."""

from __future__ import annotations

import _thread
import copy
import json
import multiprocessing
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from framework.retrieval.corpus import open_corpus
from framework.retrieval.embed_workers import cpu_threads, worker_config
from framework.retrieval.embeddings import compute_embeddings
from framework.retrieval.encoder import EncoderConfig, SentenceEncoder, resolved_dtype
from framework.retrieval.types import RetrievalError
from tests.unit.retrieval.corpus_fixtures import FakeEncoder, corpus_cfg, embed, write_jsonl

TOPICS = ["volcano lava", "violin concerto", "glacier ice", "chess opening", "coral reef"]
#: 40 passages in 4 shards of 10
DOCS = [(f"p{i}", f"Topic {i}", f"A note on {TOPICS[i % 5]} number {i}.") for i in range(40)]
TEXTS = [f"{title}\n{text}" for _, title, text in DOCS]
SHARDED = EncoderConfig(shard_rows=10, store_dtype="float32")
#: one worker's and two workers' embeddings differ only by the order of float sums (threads)
TOLERANCE = 1e-3


@pytest.fixture
def store(tmp_path: Path):
    store = open_corpus(corpus_cfg(write_jsonl(tmp_path / "c.jsonl", DOCS)), tmp_path / "cache")
    yield store
    store.close()


class FailsOnShard3(FakeEncoder):
    """Raises on the shard of rows 20-29."""

    def encode_passages(self, passages, *, progress=False):
        if passages[0] == TEXTS[20]:
            raise RuntimeError("no memory left on the fake device")
        return super().encode_passages(passages, progress=progress)


class KilledOnShard2(FakeEncoder):
    """Killed from outside (as by the out-of-memory killer) on the shard of rows 10-19."""

    def encode_passages(self, passages, *, progress=False):
        if passages[0] == TEXTS[10]:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().encode_passages(passages, progress=progress)


class HangsAfterShard1(FakeEncoder):
    """Encodes the first shard at once and hangs on every other (Ctrl-C arrives meanwhile)."""

    def encode_passages(self, passages, *, progress=False):
        if passages[0] != TEXTS[0]:
            time.sleep(120)
        return super().encode_passages(passages, progress=progress)


def test_cpu_workers_share_the_cores():
    assert cpu_threads(["cpu", "cpu"], cores=2) == 1
    assert cpu_threads(["cpu", "cpu", "cpu"], cores=2) == 1  # never 0
    assert cpu_threads(["cpu", "cpu"], cores=16) == 8
    assert cpu_threads(["cpu", "cuda:0"], cores=8) == 8  # the GPU worker needs no CPU threads
    assert cpu_threads(["cuda:0", "cuda:1"], cores=8) is None


def test_a_worker_computes_in_the_dtype_the_fingerprint_names(monkeypatch):
    import framework.training.precision as precision

    monkeypatch.setattr(precision, "native_bf16", lambda: None)  # this CPU: float32
    cfg = EncoderConfig(device="cpu", devices=["cuda:0", "cuda:1"])
    w = worker_config(cfg, "cuda:1")
    assert (w.device, w.devices, w.dtype) == ("cuda:1", [], "float32")
    assert resolved_dtype(w) == resolved_dtype(cfg)


def test_two_spawned_cpu_workers_give_one_workers_embeddings(tmp_path, store):
    encoder = SentenceEncoder(SHARDED)  # the packaged MiniLM
    single = compute_embeddings(store, encoder, tmp_path / "one.npy", progress=False)
    parent = copy.copy(encoder)  # the parent's encoder gives the config and dimension only
    parent.cfg = replace(SHARDED, devices=["cpu", "cpu"])
    started = time.monotonic()
    parallel = compute_embeddings(store, parent, tmp_path / "two.npy", progress=False)
    seconds = time.monotonic() - started
    assert parallel.shape == single.shape == (40, encoder.dim)
    # the same shards through the same model; only the threads (1 a worker) differ
    np.testing.assert_allclose(np.asarray(parallel), np.asarray(single), rtol=0, atol=TOLERANCE)
    assert not multiprocessing.active_children()
    print(f"\n2 spawned CPU workers, 40 passages: {seconds:.1f} s")


def test_a_failing_worker_stops_the_run_with_its_message_and_keeps_finished_shards(tmp_path, store):
    path = tmp_path / "emb.npy"
    cfg = replace(SHARDED, devices=["cpu"])  # one spawned worker: shards 1 and 2 finish, 3 fails
    with pytest.raises(RetrievalError, match="no memory left on the fake device") as info:
        compute_embeddings(store, FakeEncoder(cfg), path, progress=False, factory=FailsOnShard3)
    assert "[retriever.encoder.devices] the embedding worker on cpu failed" in str(info.value)
    assert not multiprocessing.active_children()
    assert json.loads(path.with_suffix(".done.json").read_text())["done"] == [0, 1]

    rerun = FakeEncoder(SHARDED)
    emb = compute_embeddings(store, rerun, path, progress=False)
    assert rerun.passages_encoded == 20  # shards 3 and 4 only
    assert np.array_equal(np.asarray(emb), embed(TEXTS))


def test_a_killed_worker_stops_the_run_with_its_exit_code(tmp_path, store):
    path = tmp_path / "emb.npy"
    cfg = replace(SHARDED, devices=["cpu"])
    with pytest.raises(RetrievalError, match=r"worker on cpu died \(exit code -9;"):
        compute_embeddings(store, FakeEncoder(cfg), path, progress=False, factory=KilledOnShard2)
    # a SIGKILL may take shard 1's report with it (the queue sends from a thread): the record
    # names it or nothing, never the shard the worker died in
    record = path.with_suffix(".done.json")
    done = json.loads(record.read_text())["done"] if record.exists() else []
    assert done in ([], [0])
    rerun = FakeEncoder(SHARDED)
    emb = compute_embeddings(store, rerun, path, progress=False)
    assert rerun.passages_encoded == 40 - 10 * len(done)
    assert np.array_equal(np.asarray(emb), embed(TEXTS))


def test_ctrl_c_ends_the_workers_and_keeps_the_finished_shards(tmp_path, store):
    path = tmp_path / "emb.npy"
    record = path.with_suffix(".done.json")
    cfg = replace(SHARDED, devices=["cpu"])

    def ctrl_c_once_shard_1_is_recorded() -> None:
        while not record.is_file():
            time.sleep(0.05)
        _thread.interrupt_main()  # what Ctrl-C does to the main thread

    threading.Thread(target=ctrl_c_once_shard_1_is_recorded, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        compute_embeddings(store, FakeEncoder(cfg), path, progress=False, factory=HangsAfterShard1)
    assert time.monotonic() - started < 60  # the hanging workers were ended, not waited for
    assert not multiprocessing.active_children()
    assert json.loads(record.read_text())["done"] == [0]
    assert not path.exists()
