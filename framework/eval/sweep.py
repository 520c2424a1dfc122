"""The sweep table: one row per job of a multirun, in the sweep directory, so results find each other.

Every job of ``seekrl-train -m ...`` (any launcher: basic, joblib, submitit; any sweeper: basic,
Optuna) appends its summary to ``<sweep dir>/sweep.jsonl`` and re-renders ``sweep.md`` and
``sweep.csv`` from it. Jobs running at the same time (joblib workers, SLURM array tasks on a shared
file system) take an exclusive POSIX lock (``fcntl.lockf``, which NFS honours) on ``.sweep.lock``
for the append and the render, so no line is torn and every render sees every finished job.

A row (JSON)::

    {"app": "train", "job": 0, "overrides": ["seed=0", ...], "status": "finished", "steps": 2,
     "seconds": 9.1, "threads": 1, "optimized_metric": "val/accuracy", "value": 0.25,
     "metrics": {"val/accuracy": 0.25, ...}, "run_dir": ".../0", "summary": ".../0/summary.json",
     "finished_at": "2026-11-22T19:51:59"}

A job that runs again (a requeued SLURM job, a rerun sweep) appends a new row; the table keeps the
last row per job number.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, cast

try:  # POSIX; elsewhere the table is written without a lock
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

TABLE = "sweep.jsonl"
MARKDOWN = "sweep.md"
CSV = "sweep.csv"
LOCK = ".sweep.lock"

#: metrics shown in sweep.md beside the optimized one, when a job measured them (sweep.csv has all)
HEADLINE = ("val/accuracy", "val/reward", "val/format_valid", "rollout/reward", "rollout/accuracy")


class SweepRow(TypedDict, total=False):
    """One job's line of ``sweep.jsonl`` (the example above); the rows of a table read back, of
    which a job may lack any field (an older or killed job's)."""

    app: str
    job: int
    overrides: list[str]
    status: str
    steps: int
    seconds: float
    threads: int
    optimized_metric: str | None
    value: float | None
    metrics: dict[str, float | int | str | None]
    run_dir: str
    summary: str
    finished_at: str
    #: the label of the sweep a row comes from, where several are compared side by side
    sweep: str


@dataclass(frozen=True)
class SweepJob:
    """The multirun job a process runs: its sweep directory, job number and job overrides."""

    sweep_dir: Path
    num: int
    overrides: tuple[str, ...]


def sweep_job() -> SweepJob | None:
    """The multirun job this process runs (sweep directory, job number, job overrides), or None
    outside a Hydra multirun (a single run, a composed config, Hydra not initialised)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN or OmegaConf.is_missing(hc.job, "num"):
        return None
    overrides = tuple(str(o) for o in (hc.overrides.task or ()))
    return SweepJob(Path(str(hc.sweep.dir)), int(hc.job.num), overrides)


@contextlib.contextmanager
def locked(sweep_dir: Path) -> Iterator[None]:
    """Hold the sweep directory's exclusive lock (blocks until the other jobs let go)."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with (sweep_dir / LOCK).open("a") as fh:
        if fcntl is not None:
            fcntl.lockf(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.lockf(fh, fcntl.LOCK_UN)


def append(sweep_dir: Path, row: Mapping[str, object]) -> list[SweepRow]:
    """Add ``row`` to the sweep table and re-render ``sweep.md`` and ``sweep.csv``; returns the
    table (one row per job, by job number)."""
    sweep_dir = Path(sweep_dir)
    line = json.dumps(row, sort_keys=False) + "\n"
    with locked(sweep_dir):
        with (sweep_dir / TABLE).open("a") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        rows = read(sweep_dir)
        _replace(sweep_dir / MARKDOWN, render_markdown(rows, title=f"Sweep {sweep_dir}"))
        _replace(sweep_dir / CSV, render_csv(rows))
    return rows


def read(sweep_dir: Path) -> list[SweepRow]:
    """The rows of ``sweep.jsonl`` (the last per job number, sorted by it); [] when there is none.
    A line that does not parse (a job killed mid-write without the lock) is skipped."""
    path = Path(sweep_dir) / TABLE
    if not path.is_file():
        return []
    by_job: dict[object, SweepRow] = {}
    for text in path.read_text().splitlines():
        try:
            row = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):  # a JSON object of the job's summary: taken as what it says
            by_job[row.get("job")] = cast(SweepRow, row)
    return sorted(by_job.values(), key=lambda r: (r.get("job") is None, r.get("job") or 0))


def varying(overrides: Sequence[Sequence[str]]) -> tuple[list[str], list[list[str]]]:
    """``(common, per_job)``: the overrides every job shares, and each job's others (in order).

    With one job nothing varies yet: all its overrides are its own.
    """
    if len(overrides) < 2:
        return [], [list(o) for o in overrides]
    common = [o for o in overrides[0] if all(o in other for other in overrides[1:])]
    return common, [[o for o in job if o not in common] for job in overrides]


def metric_columns(rows: Sequence[SweepRow]) -> list[str]:
    """Every metric any row has, the optimized metrics first, then the rest sorted."""
    optimized = list(dict.fromkeys(m for r in rows if (m := r.get("optimized_metric"))))
    rest = sorted({k for r in rows for k in r.get("metrics", {})} - set(optimized))
    return optimized + rest


def render_markdown(rows: Sequence[SweepRow], title: str = "Sweep", level: int = 1) -> str:
    """The table as markdown under a heading of ``level``: job, the overrides that differ between
    jobs, status, steps, the optimized metric and the headline metrics, time and run directory."""
    common, own = varying([r.get("overrides", []) for r in rows])
    all_metrics = metric_columns(rows)
    optimized = [m for m in all_metrics if any(r.get("optimized_metric") == m for r in rows)]
    shown = optimized + [m for m in HEADLINE if m in all_metrics and m not in optimized]
    lines = ["#" * level + f" {title}", ""]
    lines.append(f"{len(rows)} job(s) finished; every metric is in {CSV}, every row in {TABLE}.")
    if common:
        lines += ["", "Overrides of every job: `" + " ".join(common) + "`"]
    header = ["job", "overrides", "status", "steps", *shown, "seconds", "run dir"]
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row, mine in zip(rows, own):
        metrics = row.get("metrics", {})
        cells = [
            str(row.get("job", "")),
            "`" + " ".join(mine) + "`" if mine else "",
            str(row.get("status", "")),
            str(row.get("steps", "")),
            *(_number(metrics.get(m)) for m in shown),
            str(row.get("seconds", "")),
            str(row.get("run_dir", "")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_csv(rows: Sequence[SweepRow], lead: Sequence[str] = ()) -> str:
    """The table as CSV: one column per field and per metric (empty where a job lacks it); the
    row keys in ``lead`` first."""
    metrics = metric_columns(rows)
    fixed = [*lead, "job", "status", "steps", "seconds", "threads", "optimized_metric", "value"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*fixed, "overrides", *metrics, "run_dir", "summary"])
    for r in rows:
        m = r.get("metrics", {})
        w.writerow(
            [
                *(r.get(k) if r.get(k) is not None else "" for k in fixed),
                " ".join(r.get("overrides", [])),
                *(m.get(k, "") if m.get(k) is not None else "" for k in metrics),
                r.get("run_dir", ""),
                r.get("summary", ""),
            ]
        )
    return buf.getvalue()


def job_dirs(sweep_dir: Path) -> list[Path]:
    """The numbered job directories of a sweep directory, by number (``.submitit`` etc. left out)."""
    found = [p for p in Path(sweep_dir).iterdir() if p.is_dir() and p.name.isdigit()]
    return sorted(found, key=lambda p: int(p.name))


def job_overrides(job_dir: Path) -> list[str]:
    """The overrides Hydra saved for a job (``.hydra/overrides.yaml``), or [] without them."""
    path = Path(job_dir) / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return []
    from omegaconf import OmegaConf

    return [str(o) for o in OmegaConf.load(path)]


def _number(v: object) -> str:
    if v is None:
        return ""
    return f"{v:.4f}" if isinstance(v, float) else str(v)


def _replace(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, so a reader never sees half of it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
