"""An index build stopped by Ctrl-C or SIGTERM: it stops within seconds, keeps the embedding
shards it finished, and the same command goes on from them to the result of an uninterrupted
build. A fake encoder stands in for the model; the store has 2500 passages, embedded in shards of
1024, 1024 and 452 (float32 storage, so the result equals the fake's embeddings exactly)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from framework.retrieval.corpus import build_corpus, open_corpus
from framework.retrieval.dense import compute_embeddings
from framework.retrieval.encoder import EncoderConfig
from tests.unit.retrieval.corpus_fixtures import FakeEncoder, corpus_cfg, embed, write_jsonl

REPO = Path(__file__).resolve().parents[3]
DOCS = [
    (f"p{i}", f"Item {i}", f"amber basalt n{i} {'cobalt' if i % 3 else 'dune'}")
    for i in range(2500)
]
TEXTS = [f"{title}\n{text}" for _, title, text in DOCS]
SHARDS = EncoderConfig(shard_rows=1024, store_dtype="float32")


@pytest.fixture
def store(tmp_path: Path):
    store = open_corpus(corpus_cfg(write_jsonl(tmp_path / "big.jsonl", DOCS)), tmp_path / "cache")
    yield store
    store.close()


class CtrlC(FakeEncoder):
    """Raises KeyboardInterrupt (what Ctrl-C raises) on the batch after ``after`` finished ones."""

    def __init__(self, after: int) -> None:
        super().__init__(SHARDS)
        self.after = after

    def encode_passages(self, passages, *, progress=False):
        if self.passage_calls == self.after:
            raise KeyboardInterrupt
        return super().encode_passages(passages, progress=progress)


def test_ctrl_c_keeps_finished_batches_and_the_rerun_equals_an_uninterrupted_build(tmp_path, store):
    path = tmp_path / "emb" / "run.npy"
    with pytest.raises(KeyboardInterrupt):
        compute_embeddings(store, CtrlC(after=2), path, progress=False)
    assert not path.exists()
    record = json.loads(path.with_suffix(".done.json").read_text())
    # two finished shards are kept
    assert record == {"shape": [2500, 64], "dtype": "float32", "shard_rows": 1024, "done": [0, 1]}

    rerun = FakeEncoder(SHARDS)
    emb = compute_embeddings(store, rerun, path, progress=False)
    assert rerun.passages_encoded == 452  # only the batch that was cut short
    assert np.array_equal(np.asarray(emb), embed(TEXTS))  # = an uninterrupted build
    assert sorted(p.name for p in path.parent.iterdir()) == ["run.npy"]


def test_an_unreadable_progress_record_starts_over_instead_of_failing(tmp_path, store):
    path = tmp_path / "emb" / "run.npy"
    with pytest.raises(KeyboardInterrupt):
        compute_embeddings(store, CtrlC(after=1), path, progress=False)
    path.with_suffix(".done.json").write_text('{"shape": [2500')  # cut by a kill (older code)
    rerun = FakeEncoder(SHARDS)
    emb = compute_embeddings(store, rerun, path, progress=False)
    assert rerun.passages_encoded == 2500
    assert np.array_equal(np.asarray(emb), embed(TEXTS))


def test_a_store_build_removes_temp_files_of_killed_builds_only(tmp_path):
    target = tmp_path / "out" / "corpus.sqlite"
    target.parent.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs, as after a SIGKILL mid-build
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        orphan = target.with_name(f"corpus.sqlite.tmp-{dead.pid}")
        running = target.with_name(f"corpus.sqlite.tmp-{alive.pid}")
        orphan.write_bytes(b"half a store")
        running.write_bytes(b"another process is building")
        corpus = write_jsonl(tmp_path / "c.jsonl", DOCS[:5])
        assert build_corpus(corpus_cfg(corpus), target, progress=False) == 5
        assert sorted(p.name for p in target.parent.iterdir()) == [
            "corpus.sqlite",
            running.name,
        ]
    finally:
        alive.kill()
        alive.wait()


class Slow(FakeEncoder):
    def encode_passages(self, passages, *, progress=False):
        time.sleep(0.4)
        return super().encode_passages(passages, progress=progress)


def test_embedding_progress_shows_in_a_log(tmp_path, store, capsys):
    # under capsys stdout is not a terminal: plain lines, as in a log file
    compute_embeddings(store, Slow(EncoderConfig()), tmp_path / "run.npy", progress=True)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("[embed] passage 2500/2500  ")
    assert out[0].endswith("passage/s  ETA 0.0 min")


DRIVER = """
import atexit, os, sys, time
import framework.retrieval.dense as dense
from tests.unit.retrieval.corpus_fixtures import FakeEncoder

made = []


class SlowAfterFirstBatch(FakeEncoder):
    def encode_passages(self, passages, *, progress=False):
        if self.passage_calls >= 1 and not os.environ.get("FAST"):
            print("encoding batch 2", flush=True)
            time.sleep(120)  # SIGTERM arrives here
        return super().encode_passages(passages, progress=progress)


def encoder(cfg):
    made.append(SlowAfterFirstBatch(cfg))
    return made[-1]


dense.SentenceEncoder = encoder
atexit.register(lambda: print(f"encoded {sum(e.passages_encoded for e in made)}", flush=True))
from framework.cli.index import main

main()
"""


@pytest.mark.slow
def test_sigterm_during_the_index_build_stops_in_seconds_and_the_rerun_resumes(tmp_path):
    corpus = write_jsonl(tmp_path / "big.jsonl", DOCS)
    cache = tmp_path / "cache"
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    args = [
        "retriever.corpus.source=jsonl",
        f"retriever.corpus.path={corpus}",
        f"retriever.cache_dir={cache}",
        "smoke_query=null",
        "retriever.encoder.shard_rows=1024",
        "retriever.encoder.store_dtype=float32",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, str(driver), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        for line in proc.stdout:  # Hydra's log lines come first
            if line.strip() == "encoding batch 2":
                break
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        stopped_s = time.monotonic() - sent
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert stopped_s < 5.0
    assert "[index] interrupted; the passage embeddings computed so far are kept" in err
    assert "encoded 1024" in out
    [record] = (cache / "embeddings").glob("*.done.json")
    assert json.loads(record.read_text())["done"] == [0]  # the first shard, 1024 rows
    assert not list(cache.glob("index/*/manifest.json"))  # no index claims to be built
    assert not list(cache.glob("corpus/*/*.tmp-*"))  # the finished passage store is kept as is

    again = subprocess.run(
        cmd, capture_output=True, text=True, env={**env, "FAST": "1"}, timeout=120
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "encoded 1476" in again.stdout  # 2500 - 1024: only what was left
    [emb] = (cache / "embeddings").glob("*.npy")
    assert np.array_equal(np.load(emb), embed(TEXTS))  # = an uninterrupted build
    assert len(list(cache.glob("index/*/manifest.json"))) == 1
    print(
        f"\nSIGTERM during embedding: exit 130 after {stopped_s:.2f} s; rerun encoded 1476 of 2500"
    )
