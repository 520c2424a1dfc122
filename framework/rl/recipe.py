"""The train job, top to bottom: from a validated config to a trained, exported and compared policy.

:func:`run` is the whole of ``seekrl-train`` (:mod:`framework.cli.train`) after a dry run's check:

1. the retrieval index and the questions (:mod:`framework.rl.stages`), each a stage line of its
   own counting down from the recorded-rate plan (:func:`framework.rl.plan.job_stages`); questions
   that exist already (user files, cached splits) are read and checked before the index is built;
2. the SFT warm start (:func:`framework.sft.warm_start.warm_start`), cached and shared by every arm;
3. RL: :func:`build` and :func:`fit` below, resumed from ``cfg.resume`` when it names a checkpoint;
4. the exported policy (:func:`export_run_policy`: ``policy/`` in ``export.dtype``, also when the
   run was interrupted or stopped by a health monitor), then the final comparison of the warm
   start and the trained policy (:func:`framework.rl.final.final_evaluation`);
5. ``summary.json``, the sweep table's row and the console report (:mod:`framework.rl.summary`).

What one RL step does is :func:`framework.rl.step.rl_step`; the pieces, in the order a step meets
them:

1. the sampler draws the step's groups of questions (``SAMPLERS``; :mod:`framework.rl.data` turns
   its draws into Lightning's batches and restores its position on resume);
2. :class:`~framework.rl.module.SearchAgentRL`, the LightningModule wrapping the policy and the
   loss, calls :func:`~framework.rl.step.rl_step` once per step: roll out
   (:class:`~framework.rollout.engine.AgentLoop`), score (``REWARDS``), build one
   :class:`~framework.rl.batch.RolloutBatch`, compute the inputs components declare
   (:mod:`framework.rl.inputs`), estimate advantages (``ADVANTAGES``) and update the policy over
   micro-batches (:mod:`framework.rl.update`: ``POLICY_LOSSES``, ``KL_ESTIMATORS``);
3. callbacks: the health monitors (``trainer.health``), step checkpoints, plain progress lines;
4. one Lightning ``Trainer`` built from the ``trainer`` section
   (:func:`~framework.lightning.trainer.build_trainer`, the same factory SFT uses).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L

from framework.data.schema import DatasetError, QAItem
from framework.eval.sweep import sweep_job
from framework.health.config import build_monitors
from framework.lightning.callbacks import StepCheckpoint
from framework.lightning.health import HEALTH_STOPPED, HealthCallback
from framework.lightning.run_info import save_run_info
from framework.lightning.trainer import (
    INTERRUPTED,
    announce_precision,
    apply_threads,
    build_trainer,
    log_progress,
    quiet_lightning,
)
from framework.registry import SAMPLERS
from framework.retrieval.types import RetrievalError
from framework.rl.config import TrainConfig
from framework.rl.data import QuestionDataModule
from framework.rl.final import final_evaluation
from framework.rl.module import CheckpointMismatch, SearchAgentRL
from framework.rl.plan import job_stages
from framework.rl.stages import build_index, data_ready, load_training_data
from framework.rl.summary import record_sweep_job, report, run_summary
from framework.rollout.policy import PolicyError
from framework.sft.warm_start import warm_start
from framework.training.checkpoints import (
    CheckpointLoadError,
    CheckpointWriteError,
    checkpoint_step,
    holds_training_state,
    latest_checkpoint,
    newest_checkpoint,
    policy_weights,
    weights_only_error,
)
from framework.training.export import ExportError, ExportRecord, export_policy
from framework.training.sharding import ShardingError

#: figures on the plain progress lines of an RL run
RL_PROGRESS_KEYS = ("rollout/reward", "rollout/accuracy", "rollout/format_valid", "loss/entropy")
#: a validation pass is one batch: the module's validation_step rolls out all its questions
VAL_BATCHES = 1


def run(cfg: TrainConfig) -> float | None:
    """The train job; returns ``cfg.optimized_metric`` (for Hydra sweepers), or None when not
    measured.

    Raises:
        SystemExit: status 2 with the message for what a user can fix (data, retriever, policy,
            checkpoint, sharding); ``INTERRUPTED`` after SIGINT / SIGTERM, once the step checkpoint is saved;
            ``HEALTH_STOPPED`` when a health monitor stopped a single run.
    """
    clock = time.perf_counter()
    quiet_lightning()
    threads = apply_threads(cfg.trainer)
    run_dir = Path(cfg.run_dir)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    announce_precision(cfg.trainer)
    job = job_stages(cfg)
    with _user_errors(DatasetError, RetrievalError):
        # data that exists is read and checked first: what the run refuses, it refuses in seconds,
        # not after building an index
        splits = load_training_data(cfg) if data_ready(cfg) else None
        with job.stage("index"):
            build_index(cfg)
        with job.stage("questions"):
            splits = load_training_data(cfg) if splits is None else splits
    with job.stage("warm start (SFT)"):
        cfg = warm_start(cfg)
    job.begin("RL")  # ended before the final comparison, or by the summary
    train_items, val_items = splits["train"], splits.get("validation", [])
    with _user_errors(DatasetError, PolicyError, ValueError):
        rl = build(cfg, train_items, val_items, run_dir)
    module, trainer, checkpoints, health = rl.module, rl.trainer, rl.checkpoints, rl.health
    if trainer.is_global_zero:
        save_run_info(cfg, run_dir)
    ckpt = str(latest_checkpoint(cfg.resume)) if cfg.resume else None
    if ckpt is not None and not holds_training_state(ckpt):
        print(weights_only_error(ckpt), file=sys.stderr)
        raise SystemExit(2)
    # ShardingError: a trainer.fsdp.wrap class the policy does not have
    fit_errors = (CheckpointMismatch, CheckpointWriteError, RetrievalError, PolicyError)
    try:
        with _user_errors(*fit_errors, ShardingError):
            metrics = fit(rl, cfg, ckpt)
    except SystemExit:
        if checkpoints.aborted and trainer.is_global_zero:  # Lightning's exit after a Ctrl-C
            export_run_policy(cfg, rl, run_dir, resumed=ckpt)
        raise
    # a sharded policy is gathered whole on rank 0 first (every rank takes part)
    weights = module.export_weights() if cfg.trainer.export_policy else None
    if trainer.is_global_zero:
        final = None
        exported = export_run_policy(cfg, rl, run_dir, resumed=ckpt, weights=weights)
        if exported is not None and not checkpoints.interrupted and health.stopped is None:
            job.end()
            if cfg.final_eval.enabled and val_items:
                with job.stage("final comparison"):
                    # the trained weights whole: a sharded policy's gathered rollout copy
                    trained = module.parts.scoring_model
                    final = final_evaluation(cfg, run_dir, trained=(trained, module.tokenizer))
        job.end()
        seconds = time.perf_counter() - clock
        summary = run_summary(
            cfg,
            run_dir,
            rl,
            seconds=seconds,
            threads=threads,
            final=final,
            stages=job.summary(),
            exported=exported,
        )
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        record_sweep_job(cfg, run_dir, summary)
        report(cfg, run_dir, module, metrics, checkpoints, health.stopped, final, exported)
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


def export_run_policy(
    cfg: TrainConfig,
    rl: RLRun,
    run_dir: Path,
    resumed: str | None,
    weights: dict[str, Any] | None = None,
) -> ExportRecord | None:
    """Write the run's ``policy/`` in ``export.dtype`` (unless ``trainer.export_policy`` is off),
    however training ended; returns what was written, or None.

    A run that finished, was interrupted after a step (one Ctrl-C, SIGTERM) or was stopped by a
    health monitor exports the weights in memory: they are its last step's, whole. A run that a
    KeyboardInterrupt aborted mid-step (a second Ctrl-C) may hold half-updated weights, so it
    exports its newest checkpoint (this run's, else the one it resumed from), or nothing if it
    has none. ``weights``: a sharded policy's state dict, gathered whole on this process (None:
    the policy's own).
    """
    if not cfg.trainer.export_policy:
        return None
    module, checkpoints, health = rl.module, rl.checkpoints, rl.health
    if checkpoints.aborted:
        ckpt = newest_checkpoint(run_dir / "checkpoints") or (Path(resumed) if resumed else None)
        if ckpt is None:
            print(
                "seekrl-train: no policy exported: the run was aborted before its first checkpoint",
                file=sys.stderr,
                flush=True,
            )
            return None
        with _user_errors(CheckpointLoadError):
            module.policy.load_state_dict(policy_weights(ckpt))
        weights = None  # the checkpoint's, now in the policy
        step, source = checkpoint_step(ckpt), f"checkpoint {ckpt} (the run was aborted mid-step)"
    else:
        step = module.rl_step
        source = "the run's weights after its last step"
        if checkpoints.interrupted:
            source += " (interrupted)"
        elif health.stopped is not None:
            source += f" (stopped by health monitor {health.stopped.monitor})"
    folder = run_dir / "policy"
    record = ExportRecord(path=str(folder), step=step, dtype=cfg.export.dtype, source=source)
    with _user_errors(ExportError):  # float16 that cannot hold a weight: the checkpoints can
        export_policy(module.policy, module.tokenizer, folder, cfg.export.dtype, record, weights)
    print(
        f"seekrl-train: exported the policy from step {step} ({cfg.export.dtype}) to {folder}: "
        f"{source}",
        file=sys.stderr if checkpoints.aborted else sys.stdout,
        flush=True,
    )
    return record


@contextmanager
def _user_errors(*errors: type[BaseException]) -> Iterator[None]:
    """Inside the block, ``errors`` (what a user can fix) end the job with their message and
    status 2."""
    try:
        yield
    except errors as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None


@dataclass
class RLRun:
    """The RL stage of a run, built and ready to fit.

    Attributes:
        module: the LightningModule (policy, loss, rollout loop).
        data: the step stream and the validation questions.
        trainer: the Lightning trainer.
        checkpoints: the step checkpoint callback (``interrupted`` after SIGINT / SIGTERM).
        health: the health callback (``stopped`` holds the alarm that stopped the run).
        metrics: the trainer's last logged figures, after :func:`fit`.
    """

    module: SearchAgentRL
    data: QuestionDataModule
    trainer: L.Trainer
    checkpoints: StepCheckpoint
    health: HealthCallback
    metrics: dict[str, float] = field(default_factory=dict)


def build(
    cfg: TrainConfig, train_items: list[QAItem], val_items: list[QAItem], run_dir: Path
) -> RLRun:
    """Sampler, module, data module, callbacks and trainer of the RL stage.

    Raises:
        DatasetError, PolicyError, ValueError: the data or the policy cannot be used as configured.
    """
    sampler = SAMPLERS.bind(cfg.sampler)(train_items, cfg.seed)
    module = SearchAgentRL(cfg, train_items, val_items)
    t = cfg.trainer
    data = QuestionDataModule(
        train_items,
        val_items,
        sampler,
        max_steps=t.max_steps,
        val_questions=t.val_questions,
        seed=cfg.seed,
    )
    checkpoints = StepCheckpoint(
        run_dir / "checkpoints",
        t.checkpoint_every_n_steps,
        t.keep_checkpoints,
        t.max_steps,
        final=t.checkpoint_at_end,
        weights_only=t.checkpoint_weights_only,
    )
    # before the checkpoint callback: a checkpoint holds the monitors' state after its step
    health = HealthCallback(build_monitors(cfg.health), checkpoints, run_facts(cfg))
    trainer = build_trainer(
        t,
        cfg.logger,
        run_dir,
        # Lightning counts optimiser steps: policy_epochs per step (times the mini-batches), or
        # up to one per model turn for a loss that trains turn by turn; the module ends the fit
        # after t.max_steps RL steps itself, so this is only a bound
        max_steps=t.max_steps * optimizer_steps_bound(cfg),
        callbacks=[health, checkpoints, *log_progress("rl", t.max_steps, RL_PROGRESS_KEYS)],
        val_check_interval=t.val_every_n_steps or 10**9,
        limit_val_batches=VAL_BATCHES,
    )
    return RLRun(module, data, trainer, checkpoints, health)


#: most PPO mini-batches one RL step can make (each holds at least one group), for Lightning's bound
MINI_BATCHES_BOUND = 4096


def optimizer_steps_bound(cfg: TrainConfig) -> int:
    """The most optimiser steps one RL step can make: one per model turn for a loss that trains
    turn by turn, else ``policy_epochs`` times the mini-batches (bounded by
    :data:`MINI_BATCHES_BOUND` when the batch is split)."""
    if cfg.loss.stages_per_turn:
        return int(cfg.agent.max_turns)
    minis = MINI_BATCHES_BOUND if cfg.optim.mini_batch_size > 0 else 1
    return int(cfg.optim.policy_epochs) * minis


def fit(run: RLRun, cfg: TrainConfig, ckpt: str | None) -> dict[str, float]:
    """Train from ``ckpt`` (a checkpoint path, or None to start fresh), then validate once if the
    run asks for it (``val_at_end``, or a periodic validation due at the last step, which the fit
    itself skips: :func:`~framework.lightning.callbacks.end_fit_after_this_step`) and it was not
    interrupted or stopped by a monitor; return the trainer's last figures. The module's rollout
    resources are closed whatever happens.

    Raises:
        CheckpointMismatch, CheckpointWriteError, RetrievalError, PolicyError, ShardingError:
            what a user can fix.
    """
    module, trainer = run.module, run.trainer
    try:
        trainer.fit(module, datamodule=run.data, ckpt_path=ckpt, weights_only=True)
        t = cfg.trainer
        due = bool(t.val_every_n_steps) and module.rl_step % t.val_every_n_steps == 0
        stopped = run.checkpoints.interrupted or run.health.stopped is not None
        if (t.val_at_end or due) and run.data.val_rows and not stopped:
            trainer.limit_val_batches = VAL_BATCHES  # the last step turned the fit's validation off
            trainer.validate(module, datamodule=run.data, verbose=False)
    finally:
        module.close()
    run.metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    return run.metrics


def run_facts(cfg: TrainConfig) -> dict[str, str]:
    """What the health monitors' alarms name: the retriever (and its server, if it has one)."""
    r = cfg.retriever
    url = getattr(r, "url", None)  # a served index's address
    where = f" at {url}" if isinstance(url, str) else ""
    return {"retriever": f"'{r.name}'{where}", "algorithm": str(cfg.algorithm)}
