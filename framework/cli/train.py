"""``seekrl-train``: group-relative RL of a search agent (E-GRPO by default), end to end.

seekrl-train                                   # demo-sized E-GRPO run on this machine's CPU
seekrl-train algorithm=grpo seed=1             # the GRPO arm of the paper
seekrl-train trainer=gpu scale=paper           # the paper's batch and step counts on one GPU
seekrl-train -m experiment=alpha_sweep         # alpha 0, 0.1, 0.3, 0.5, one job directory each
seekrl-train resume=runs/train/<run>           # continue from the newest checkpoint of a run

It builds or reuses the retrieval index, synthesizes or reuses the data, trains, validates, saves
checkpoints and the final policy, and writes TensorBoard logs under ``<run_dir>/tensorboard``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from framework.cli.app import run_app, sweep_job
from framework.lightning.run_info import save_run_info
from framework.lightning.trainer import (
    INTERRUPTED,
    announce_precision,
    apply_threads,
    quiet_lightning,
)
from framework.rl.config import TrainConfig
from framework.sft.warm_start import warm_start


def load_training_data(cfg: TrainConfig) -> dict[str, Any]:
    """The train and validation splits (synthesized first if needed), checked against the reward.

    Raises:
        DatasetError: a malformed or empty split, or one without entities for an entity reward.
    """
    from framework.data.schema import require_entities
    from framework.registry import DATASETS

    load = DATASETS.bind(cfg.dataset)
    splits = {"train": load("train")}
    if getattr(cfg.dataset, "validation", "") is not None:  # user files may have no validation
        splits["validation"] = load("validation")
    if getattr(type(cfg.reward), "needs_entities", False):
        for split, items in splits.items():
            why = f"reward={cfg.reward.name} needs ground-truth entities"
            require_entities(items, _source(cfg.dataset, split), why=why)
    return splits


def _source(dataset: Any, split: str) -> str:
    """The file a split was read from, for messages."""
    if hasattr(dataset, "directory"):  # synthesized data
        return str(dataset.directory() / f"{split}.jsonl")
    return str(getattr(dataset, split, None) or f"dataset={dataset.name} ({split})")


def dry_run(cfg: TrainConfig) -> None:
    """Bind every configured component, say what the run would build (from the cache, building
    nothing: no index, no data, no model loaded), check the data when it exists, then stop."""
    from framework.cli import plan
    from framework.cli.components import describe, render
    from framework.data.schema import DatasetError
    from framework.registry import ALL
    from framework.retrieval.types import RetrievalError

    print(f"seekrl-train: configuration valid (algorithm={cfg.algorithm}, seed={cfg.seed})")
    choice = cfg.trainer.precision_choice()  # reads the CPU's flags only
    print(f"  precision  {choice.precision} ({choice.reason})")
    schema = {f.name for f in dataclasses.fields(cfg)}
    for section in [group for group in ALL if group in schema]:  # the registries it selects from
        component = getattr(cfg, section)
        entry = ALL[section].get(component.name)
        ALL[section].bind(component)  # fails here, not mid-run, if a target cannot take its config
        values = {k: v for k, v in vars(component).items() if k != "name"}
        print(f"  {section:<10} {component.name:<22} [{entry.source}] {values}")
    try:
        stages = plan.train_plan(cfg)
    except RetrievalError as exc:  # a corpus source that is not there
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    print("\nwhat it builds before the first RL step:")
    print(plan.render(stages))
    print(f"  RL                 {plan.rl_estimate(cfg)}")
    f = cfg.final_eval
    if f.enabled:
        print(
            f"  final comparison   the warm start and the trained policy on {f.questions or 'all'} "
            f"validation questions x {f.samples_per_question} samples, paired"
        )
    print()
    print(plan.render_estimates(plan.job_estimates(cfg, stages)))
    if all(s.ready for s in stages if s.name == "questions"):
        try:  # the data exists: check its schema and the reward's needs now
            splits = load_training_data(cfg)
        except DatasetError as exc:
            print(exc, file=sys.stderr)
            raise SystemExit(2) from None
        sizes = ", ".join(f"{k} {len(v)}" for k, v in splits.items())
        print(f"  data               {sizes} questions, checked")
    print()
    print(render(describe()))
    print("\nseekrl-train: dry run; drop dry_run=true to train.")


def train(cfg: TrainConfig) -> float | None:
    """Train; returns ``cfg.optimized_metric`` (for Hydra sweepers), or None when not measured."""
    if cfg.dry_run:  # before importing Lightning: a dry run builds and trains nothing
        dry_run(cfg)
        return None
    import lightning as L

    from framework.data.schema import DatasetError
    from framework.lightning.health import HEALTH_STOPPED
    from framework.retrieval.types import RetrievalError
    from framework.rl import recipe
    from framework.rl.module import CheckpointMismatch
    from framework.rollout.policy import PolicyError
    from framework.training.checkpoints import (
        CheckpointWriteError,
        holds_training_state,
        latest_checkpoint,
        weights_only_error,
    )
    from framework.training.lora import export_policy

    clock = time.perf_counter()
    quiet_lightning()
    threads = apply_threads(cfg.trainer)
    run_dir = Path(cfg.run_dir)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    announce_precision(cfg.trainer)
    job = job_stages(cfg)
    try:
        with job.stage("index"):
            build_index(cfg)
        with job.stage("questions"):
            splits = load_training_data(cfg)
    except (DatasetError, RetrievalError) as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    with job.stage("warm start (SFT)"):
        cfg = warm_start(cfg)
    job.begin("RL")  # ended before the final comparison, or by the summary
    train_items, val_items = splits["train"], splits.get("validation", [])
    try:
        rl = recipe.build(cfg, train_items, val_items, run_dir)
    except (DatasetError, PolicyError, ValueError) as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    module, trainer, checkpoints, health = rl.module, rl.trainer, rl.checkpoints, rl.health
    if trainer.is_global_zero:
        save_run_info(cfg, run_dir)
    ckpt = str(latest_checkpoint(cfg.resume)) if cfg.resume else None
    if ckpt is not None and not holds_training_state(ckpt):
        print(weights_only_error(ckpt), file=sys.stderr)
        raise SystemExit(2)
    try:
        metrics = recipe.fit(rl, cfg, ckpt)
    except (CheckpointMismatch, CheckpointWriteError, RetrievalError, PolicyError) as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    if trainer.is_global_zero:
        final = None
        if cfg.trainer.export_policy and not checkpoints.interrupted and health.stopped is None:
            export_policy(module.policy, module.tokenizer, run_dir / "policy")
            job.end()
            if cfg.final_eval.enabled and val_items:
                with job.stage("final comparison"):
                    final = final_evaluation(cfg, run_dir)
        job.end()
        summary = {
            "algorithm": cfg.algorithm,
            "seed": cfg.seed,
            "steps": module.rl_step,
            "seconds": round(time.perf_counter() - clock, 1),
            "interrupted": checkpoints.interrupted,
            "stopped_by": None if health.stopped is None else vars(health.stopped),
            "threads": threads,
            "last_checkpoint": str(run_dir / "checkpoints"),
            "last_step": {f"rollout/{k}": v for k, v in module.last_rollout.items()},
            "metrics": metrics,
            "final": final,
            "stages": job.summary(),
            # a run resumed from a checkpoint: the peak of the launches before this one (up to
            # their last checkpoint); the stages' peaks are this launch's only
            "earlier_launches_peak_gb": None
            if module.earlier_peak_bytes is None
            else round(module.earlier_peak_bytes / 1e9, 2),
        }
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        record_sweep_job(cfg, run_dir, summary)
        report(cfg, run_dir, module, metrics, checkpoints, health.stopped, final)
    if checkpoints.interrupted:
        raise SystemExit(INTERRUPTED)
    if health.stopped is not None and sweep_job() is None:
        # a single run fails loudly; in a sweep the job's row says "stopped" and the others go on
        raise SystemExit(HEALTH_STOPPED)
    value = metrics.get(cfg.optimized_metric)
    if value is None and trainer.is_global_zero:
        print(
            f"seekrl-train: optimized_metric {cfg.optimized_metric!r} was not measured "
            f"(measured: {sorted(metrics)}); returning None to the sweeper.",
            file=sys.stderr,
        )
    return value


def job_stages(cfg: TrainConfig) -> Any:
    """The job's stage lines (:class:`~framework.progress.JobStages`), counting down from the
    recorded-rate plan of what this run still has to build."""
    from framework.cli import plan
    from framework.progress import JobStages
    from framework.retrieval.types import RetrievalError

    try:
        estimates = plan.job_estimates(cfg)
    except (RetrievalError, OSError):  # a missing corpus: the index stage reports it
        estimates = [(name, 0.0, 0.0) for name in plan.JOB_STAGES]
    return JobStages("seekrl-train", [(name, seconds) for name, seconds, _ in estimates])


def build_index(cfg: TrainConfig) -> None:
    """Build (or find cached) the retriever's index now, as a stage of its own; a remote
    retriever has nothing to build."""
    from framework.registry import RETRIEVERS

    retriever = RETRIEVERS.bind(cfg.retriever)()
    close = getattr(retriever, "close", None)
    if close is not None:
        close()


def final_evaluation(cfg: TrainConfig, run_dir: Path) -> dict[str, Any]:
    """Evaluate the warm start and the trained policy on the same validation questions with the
    same sampling (``final_eval``), in ``<run_dir>/final_eval/{start,trained}``; returns the paired
    comparison (:func:`framework.eval.final.final_comparison`) with where things are. An
    evaluation finished by an earlier, interrupted attempt is read back, not redone."""
    from framework.cli.evaluate import eval_config_for, evaluate
    from framework.eval.final import final_comparison
    from framework.eval.records import RECORDS, read_records

    print("\nseekrl-train: final comparison: the warm start and the trained policy", flush=True)
    records = {}
    for label, checkpoint in (("start", None), ("trained", run_dir)):
        out = run_dir / "final_eval" / label
        if not (out / RECORDS).is_file():
            evaluate(eval_config_for(cfg, checkpoint, out, cfg.final_eval.settings()))
        records[label] = read_records(out / RECORDS)
    block = final_comparison(records["start"], records["trained"], n_boot=cfg.final_eval.bootstrap)
    block["where"] = {
        "policy": str(run_dir / "policy"),
        "evaluations": str(run_dir / "final_eval"),
        "summary": str(run_dir / "summary.json"),
    }
    if "TensorBoard" in str((cfg.logger or {}).get("_target_", "")):
        block["where"]["TensorBoard"] = f"tensorboard --logdir {run_dir / 'tensorboard'}"
    return block


def record_sweep_job(cfg: TrainConfig, run_dir: Path, summary: dict[str, Any]) -> None:
    """In a multirun, add this job's row to the sweep table (``<sweep dir>/sweep.jsonl``, ``.md``,
    ``.csv``); a single run has none."""
    from framework.eval.sweep import append

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
    module: Any,
    metrics: dict[str, float],
    ckpt: Any,
    stopped: Any = None,
    final: dict[str, Any] | None = None,
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
    if cfg.trainer.export_policy and not ckpt.interrupted and stopped is None:
        print(
            f"  policy:      {run_dir / 'policy'}  (rollout.policy.source=path "
            f"rollout.policy.path={run_dir / 'policy'})"
        )
    if cfg.logging.dump_trajectories:
        print(f"  rollouts:    {run_dir / 'trajectories'}")
    logger = cfg.logger or {}
    if "TensorBoard" in str(logger.get("_target_", "")):
        print(f"  TensorBoard: tensorboard --logdir {run_dir / 'tensorboard'}")
    if final is not None:
        from framework.eval.final import final_lines

        print("\n" + "\n".join(final_lines(final, final["where"])))


def main() -> None:
    import importlib.util

    import __main__
    from framework.cli.interrupt import stop_with_parent

    stop_with_parent()  # started by a study: stop (checkpointed) when it ends, however it ends

    # Lightning's DDP launcher re-runs `python -m <__main__.__spec__.name> <argv>` for each
    # extra process; point it at this module whichever way the app was started.
    __main__.__spec__ = importlib.util.find_spec("framework.cli.train")
    run_app("train", train)


if __name__ == "__main__":
    main()
