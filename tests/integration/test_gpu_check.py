"""tools/gpu_check.sh --cpu end to end: every phase recorded in one JSON with a status, the CPU-sized
phases passed with their figures, the GPU-only ones skipped with a reason, and a phase over its
budget stopped and recorded as timed out while the check goes on to the next."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import gpu_check_report as report  # noqa: E402

PHASES = ["gpu_tests", "train_135m", "train_1p5b", "decode_graphs", "trl_135m", "trl_1p5b"]


@pytest.mark.slow
def test_the_cpu_check_runs_every_phase_within_its_budget(tmp_path):
    out = tmp_path / "gc"
    # the gpu tests (which all skip themselves without CUDA) get 1 s: pytest alone takes longer
    env = {**os.environ, "GPU_CHECK_BUDGET_gpu_tests": "1"}
    env.pop("OUT", None)
    start = time.perf_counter()
    done = subprocess.run(
        ["bash", "tools/gpu_check.sh", "--cpu", "--out", str(out), "--budget", "150"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
    )
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-3000:]
    data = report.read(out / "gpu_check.json")  # valid: report.validate found nothing
    phases = {p["name"]: p for p in data["phases"]}
    assert list(phases) == PHASES and data["mode"] == "cpu"
    assert data["machine"]["cpus"] == os.cpu_count() and data["machine"]["torch"]

    late = phases["gpu_tests"]
    assert late["status"] == "timed_out" and late["budget_s"] == 1
    assert late["reason"] == "stopped by its budget of 1 s (exit 124)"
    assert late["seconds"] < 1 + 5 + 2  # TERM at 1 s, KILL 5 s later at the latest

    train = phases["train_135m"]
    assert train["status"] == "passed", train
    assert train["figures"]["steps"] == 1 and train["figures"]["optimizer_steps_per_step"] == 2
    assert train["figures"]["samples_per_s"] > 0 and train["figures"]["peak_gpu_gb"] is None
    decode = phases["decode_graphs"]
    assert decode["status"] == "passed", decode
    variants = decode["figures"]["variants"]
    assert variants["generate"]["ratio_to_generate"] == 1.0
    assert variants["loop"]["status"] == "measured" and 0 < variants["loop"]["tokens"] <= 8 * 16
    assert variants["graphs"] == {"status": "skipped", "reason": "no CUDA: CUDA graphs need a GPU"}

    for name in ("train_1p5b", "trl_135m", "trl_1p5b"):
        assert phases[name]["status"] == "skipped"
        assert phases[name]["reason"].startswith("no CUDA (--cpu)")
    assert sum(p["seconds"] for p in data["phases"]) <= 150
    assert (out / "train_135m.log").is_file() and (out / "decode_graphs.log").is_file()
    # the check ends with its table
    assert "| decode_graphs | passed |" in done.stdout
    assert "| gpu_tests | timed out | " in done.stdout
    print(f"gpu_check.sh --cpu: {seconds:.1f} s")
