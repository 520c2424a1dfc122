"""tools/bench/train_step.py: its prompts go round a split smaller than the steps need (the GPU
session's ``--dataset synth_small --questions 8 --steps 2`` asked for 24 of 10), and a report is
written after each policy, so a run stopped by a time limit keeps what it measured."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]


def load_bench():
    spec = importlib.util.spec_from_file_location(
        "bench_train_step", ROOT / "tools/bench/train_step.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_prompts_go_round_a_small_split(monkeypatch):
    bench = load_bench()
    split = [SimpleNamespace(question=f"q{i}") for i in range(10)]
    monkeypatch.setattr(bench, "bench_items", lambda dataset: split)
    got = bench.first_items(24, "synth_small")
    assert [it.question for it in got] == [f"q{i % 10}" for i in range(24)]
    assert bench.prompts(3, "synth_small") == [f"Answer briefly. q{i}" for i in range(3)]


def test_the_report_is_written_where_asked(tmp_path, monkeypatch):
    bench = load_bench()
    monkeypatch.setattr(bench, "render", lambda report: f"# {sorted(report['policies'])}\n")
    out = tmp_path / "part.md"
    args = argparse.Namespace(out=str(out), json=None)
    bench.write_report({"policies": {"shape:smollm2-135m": {"ratio_samples": 1.1}}}, args)
    assert out.read_text() == "# ['shape:smollm2-135m']\n"
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["policies"]["shape:smollm2-135m"]["ratio_samples"] == 1.1


def test_a_report_without_the_ceiling_says_so():
    # tools/gpu_check.sh runs the comparison with --no-ceiling (it measures decoding on its own)
    bench = load_bench()
    side = {
        "samples_per_s": 2.0,
        "rollout_tokens_per_s": 500.0,
        "total": 16.0,
        "generation": 15.0,
        "peak_rss_gb": 3.0,
        "peak_gpu_gb": 12.0,
    }
    report = {
        "argv": "--no-ceiling",
        "machine": "m",
        "date": "d",
        "torch": "t",
        "transformers": "x",
        "trl": "y",
        "questions": 8,
        "group": 4,
        "completion": 256,
        "device": "cuda",
        "precision": "bf16",
        "steps": 1,
        "rounds": 1,
        "policies": {"shape:qwen2.5-1.5b": {"ours": side, "trl": side, "ratio_samples": 1.0}},
        "backends": {},
    }
    text = bench.render(report)
    assert "- ceiling not measured (--no-ceiling)" in text
    assert "- seekrl / TRL peak GPU memory: **1.00x**" in text
