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
