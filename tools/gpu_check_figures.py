"""What the GPU check reads: the machine it runs on, and the figures each phase wrote.

``tools/gpu_check_report.py`` records them in the check's JSON (``phase --figures kind:path``
names a reader of :data:`FIGURES`); a reader raises ``OSError``, ``ValueError`` or ``KeyError`` on
files that are missing, cut short or not what the phase writes.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import statistics
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from framework.training.precision import cpu_name


def pytest_figures(junit: Path) -> dict[str, Any]:
    """Counts of a pytest JUnit XML report, and the reasons tests were skipped."""
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in suites:
        for key in counts:
            counts[key] += int(suite.get(key, 0))
    reasons = sorted({s.get("message", "") for s in root.iter("skipped")} - {""})
    failed = counts["failures"] + counts["errors"]
    return {
        "passed": counts["tests"] - failed - counts["skipped"],
        "failed": failed,
        "skipped": counts["skipped"],
        "skip_reasons": reasons,
    }


def train_figures(run_dir: Path) -> dict[str, Any]:
    """A train run's figures: per-step rows of ``csv/metrics.csv`` (``logger=csv``), the RL stage
    of ``summary.json``. Step time is the median over the steps after the first (which warms the
    kernels up), or the one step there is."""
    with (run_dir / "csv" / "metrics.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("timing/step")]
    if not rows:
        raise ValueError(f"{run_dir}/csv/metrics.csv has no step rows")
    steps = [float(r["timing/step"]) for r in rows]
    step_s = statistics.median(steps[1:] or steps)
    rollouts = float(rows[-1]["train/rollouts"])
    peaks = [float(r["memory/peak_gpu_gb"]) for r in rows if r.get("memory/peak_gpu_gb")]
    out: dict[str, Any] = {
        "steps": len(rows),
        "step_s": round(step_s, 3),
        "steps_per_s": round(1 / step_s, 4),
        "rollouts_per_step": rollouts,
        "samples_per_s": round(rollouts / step_s, 3),
        "optimizer_steps_per_step": float(rows[-1]["train/optimizer_steps"]),
        "rollout_tokens_per_s": round(float(rows[-1]["timing/rollout_tokens_per_s"]), 1),
        "peak_gpu_gb": round(max(peaks), 2) if peaks else None,
    }
    summary = run_dir / "summary.json"
    if summary.is_file():
        stages = {s["stage"]: s for s in json.loads(summary.read_text())["stages"]}
        if "RL" in stages:
            out["rl_stage_s"] = stages["RL"]["seconds"]
            out["peak_rss_gb"] = stages["RL"]["peak_gb"]
    return out


def decode_figures(path: Path) -> dict[str, Any]:
    """``tools/bench/decode_graphs.py``'s JSON, as it wrote it."""
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def trl_figures(path: Path) -> dict[str, Any]:
    """``tools/bench/train_step.py``'s raw figures for its one policy: both sides' samples/s and
    peak GPU memory."""
    policies = json.loads(path.read_text())["policies"]
    if len(policies) != 1:
        raise ValueError(f"{path} holds {len(policies)} policies; expected one")
    ((name, r),) = policies.items()
    ours, trl = r["ours"], r["trl"]
    return {
        "policy": name,
        "seekrl_samples_per_s": ours["samples_per_s"],
        "trl_samples_per_s": trl["samples_per_s"],
        "ratio_samples": r["ratio_samples"],
        "seekrl_peak_gpu_gb": ours.get("peak_gpu_gb"),
        "trl_peak_gpu_gb": trl.get("peak_gpu_gb"),
        "report": str(path.with_suffix(".md")),
    }


FIGURES = {
    "pytest": pytest_figures,
    "train": train_figures,
    "decode": decode_figures,
    "trl": trl_figures,
}


def _run(cmd: list[str]) -> str | None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def _version(name: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_record() -> dict[str, Any]:
    """This machine: its GPU (nvidia-smi), CPU, the versions that matter and the commit."""
    gpu = _run(
        ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
    )
    first = [x.strip() for x in gpu.splitlines()[0].split(",")] if gpu else []
    try:
        import torch

        cuda = torch.version.cuda
    except ImportError:
        cuda = None
    commit = os.environ.get("SEEKRL_COMMIT") or _run(["git", "rev-parse", "--short", "HEAD"])
    return {
        "gpu": first[0] if first else None,
        "gpu_memory": first[1] if len(first) > 1 else None,
        "driver": first[2] if len(first) > 2 else None,
        "cpu": cpu_name(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "cuda": cuda,
        "transformers": _version("transformers"),
        "lightning": _version("lightning"),
        "trl": _version("trl"),
        "commit": commit or "unknown (no git checkout; set SEEKRL_COMMIT)",
    }
