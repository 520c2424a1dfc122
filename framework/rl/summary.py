"""What a train run ends with: ``summary.json``, its row in a sweep's table, and the console report."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypedDict

from framework.eval.final import final_lines
from framework.eval.sweep import append, sweep_job
from framework.rl.config import TrainConfig
from framework.rl.final import FinalResult
from framework.training.export import ExportRecord

if TYPE_CHECKING:
    from framework.health.monitors import Alarm
    from framework.lightning.callbacks import StepCheckpoint
    from framework.lightning.health import HealthCallback
    from framework.rl.module import SearchAgentRL


class FittedRun(Protocol):
    """What the summary reads of a fitted RL stage (:class:`~framework.rl.recipe.RLRun`, which
    imports this module)."""

    @property
    def module(self) -> SearchAgentRL: ...

    @property
    def checkpoints(self) -> StepCheckpoint: ...

    @property
    def health(self) -> HealthCallback: ...

    @property
    def metrics(self) -> dict[str, float]: ...


class RunSummary(TypedDict):
    """A train run's ``summary.json`` (:func:`run_summary`)."""

    algorithm: str
    seed: int
    steps: int
    seconds: float
    interrupted: bool
    stopped_by: dict[str, object] | None  # the health monitor's alarm, as a dict
    threads: int
    last_checkpoint: str
    last_step: dict[str, float]
    metrics: dict[str, float]
    final: FinalResult | None
    stages: list[dict[str, float | str | None]]
    earlier_launches_peak_gb: float | None
    policy: ExportRecord | None  # the exported policy/: its step, dtype and source


def run_summary(
    cfg: TrainConfig,
    run_dir: Path,
    run: FittedRun,
    *,
    seconds: float,
    threads: int,
    final: FinalResult | None,
    stages: list[dict[str, float | str | None]],
    exported: ExportRecord | None = None,
) -> RunSummary:
    """The run's ``summary.json``: its steps and time, how it ended, the last step's and the last
    logged figures, the final comparison and the stages' times and peaks.

    Args:
        run: the fitted RL stage (:class:`~framework.rl.recipe.RLRun`).
        stages: the job's stage lines' summary (:meth:`~framework.progress.JobStages.summary`).
        exported: the exported ``policy/`` (None: none was written).
    """
    module, health = run.module, run.health
    return {
        "algorithm": cfg.algorithm,
        "seed": cfg.seed,
        "steps": module.rl_step,
        "seconds": round(seconds, 1),
        "interrupted": run.checkpoints.interrupted,
        "stopped_by": None if health.stopped is None else vars(health.stopped),
        "threads": threads,
        "last_checkpoint": str(run_dir / "checkpoints"),
        "last_step": {f"rollout/{k}": v for k, v in module.last_rollout.items()},
        "metrics": run.metrics,
        "final": final,
        "stages": stages,
        # a run resumed from a checkpoint: the peak of the launches before this one (up to
        # their last checkpoint); the stages' peaks are this launch's only
        "earlier_launches_peak_gb": None
        if module.earlier_peak_bytes is None
        else round(module.earlier_peak_bytes / 1e9, 2),
        "policy": exported,
    }


def record_sweep_job(cfg: TrainConfig, run_dir: Path, summary: RunSummary) -> None:
    """In a multirun, add this job's row to the sweep table (``<sweep dir>/sweep.jsonl``, ``.md``,
    ``.csv``); a single run has none."""
    job = sweep_job()
    if job is None:
        return
    metrics = {**summary["last_step"], **summary["metrics"]}
    row = {
        "app": "train",
        "job": job.num,
        "overrides": list(job.overrides),
        "status": "interrupted"
        if summary["interrupted"]
        else ("stopped" if summary.get("stopped_by") else "finished"),
        "steps": summary["steps"],
        "seconds": summary["seconds"],
        "threads": summary["threads"],
        "optimized_metric": cfg.optimized_metric,
        "value": summary["metrics"].get(cfg.optimized_metric),  # what the sweeper received
        "metrics": metrics,
        "run_dir": str(run_dir.resolve()),
        "summary": str((run_dir / "summary.json").resolve()),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    try:
        append(job.sweep_dir, row)
    except OSError as exc:  # the run itself is saved: say so, and let the sweeper have its value
        print(
            f"seekrl-train: job {job.num} could not be added to the sweep table in "
            f"{job.sweep_dir} ({exc}); its summary is {row['summary']}",
            file=sys.stderr,
        )
        return
    print(f"seekrl-train: job {job.num} added to the sweep table {job.sweep_dir / 'sweep.md'}")


def report(
    cfg: TrainConfig,
    run_dir: Path,
    module: SearchAgentRL,
    metrics: dict[str, float],
    ckpt: StepCheckpoint,
    stopped: Alarm | None = None,
    final: FinalResult | None = None,
    exported: ExportRecord | None = None,
) -> None:
    """Where everything is, and the headline figures; a run that ends with its final comparison
    ends with that block."""
    last = module.last_rollout
    verb = "was stopped by a health monitor after" if stopped is not None else "finished"
    print(f"\nseekrl-train: {cfg.algorithm} {verb} {module.rl_step} steps in {run_dir}")
    if stopped is not None:
        print(f"  {stopped}")
        print(f"  resume after a fix with  seekrl-train resume={run_dir}")
    if last:
        print(
            f"  last step: reward {last['reward']:.3f}, accuracy {last['accuracy']:.3f}, "
            f"format valid {last['format_valid']:.3f}, tool calls {last['tool_calls']:.2f}"
        )
    val = {k: v for k, v in metrics.items() if k.startswith("val/")}
    if val:
        keys = ("val/accuracy", "val/reward", "val/format_valid")
        print("  validation: " + ", ".join(f"{k} {val[k]:.3f}" for k in keys if k in val))
    if ckpt.interrupted:
        print(f"  interrupted: resume with  seekrl-train resume={run_dir}")
    print(f"  checkpoints: {run_dir / 'checkpoints'}")
    if exported is not None:
        print(
            f"  policy:      {exported['path']}  (step {exported['step']}, {exported['dtype']}; "
            f"rollout.policy.source=path rollout.policy.path={exported['path']})"
        )
    if cfg.logging.dump_trajectories:
        print(f"  rollouts:    {run_dir / 'trajectories'}")
    logger = cfg.logger or {}
    if "TensorBoard" in str(logger.get("_target_", "")):
        print(f"  TensorBoard: tensorboard --logdir {run_dir / 'tensorboard'}")
    if final is not None:
        print("\n" + "\n".join(final_lines(final, final["where"])))
