"""The LightningModule of group-relative RL for search agents.

A training step is :func:`framework.rl.step.rl_step` (roll out, score, advantages, policy
epochs over micro-batches, weight refresh), called once per step in plain torch; this module only
wires it to Lightning: optimisers and schedule, logging, validation, checkpoints and data
parallelism.
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import lightning as L
import torch
from lightning.pytorch.utilities.types import OptimizerLRSchedulerConfig
from torch import Tensor
from torch.optim.lr_scheduler import LRScheduler

from framework.data.schema import QAItem
from framework.lightning.callbacks import end_fit_after_this_step
from framework.lightning.strategy import FSDP
from framework.lightning.trainer import apply_gradient_checkpointing
from framework.memory import peak_rss_bytes
from framework.progress import Progress
from framework.registry import RETRIEVERS
from framework.registry.protocols import CountsCalls, GroupFilter, RolloutBackend
from framework.rl.config import TrainConfig
from framework.rl.data import QuestionDataModule, StepBatch
from framework.rl.step import StepParts, StepResult, rl_step, validation_figures
from framework.rollout.backend import build_backend
from framework.rollout.engine import AgentLoop
from framework.rollout.policy import load_policy, policy_source
from framework.rollout.records import render_record
from framework.training.lora import apply_lora
from framework.training.rng import random_state, set_random_state
from framework.training.schedule import optimizer_and_schedule
from framework.training.sharding import GatheredRollouts, full_state_dict, shard_policy


class CheckpointMismatch(RuntimeError):
    """A checkpoint written for a different policy than the configured one."""


@runtime_checkable
class HistogramWriter(Protocol):
    """A logger experiment that takes histograms and text (TensorBoard's ``SummaryWriter``)."""

    def add_histogram(self, tag: str, values: Tensor, global_step: int) -> None: ...

    def add_text(self, tag: str, text_string: str, global_step: int) -> None: ...


class SearchAgentRL(L.LightningModule):
    """Owns the policy (full or LoRA), the rollout loop and the objective of one training run.

    Args:
        cfg: the validated train config (``TrainConfig``).
        train_items: training questions (the data module indexes into them).
        val_items: validation questions.
    """

    def __init__(
        self, cfg: TrainConfig, train_items: list[QAItem], val_items: list[QAItem]
    ) -> None:
        super().__init__()

        self.automatic_optimization = False
        self.cfg = cfg
        self.train_items = train_items
        self.val_items = val_items
        model, self.tokenizer = load_policy(replace(cfg.rollout.policy, device="cpu"))
        if cfg.lora.enabled:
            model = apply_lora(model, cfg.lora)
        self.policy = model
        apply_gradient_checkpointing(model, cfg.trainer)
        # plain objects, not modules: the reference (only for a KL term) gets no gradient, no
        # checkpoint, no DDP bucket; the loop and its backend are built in setup()
        self.parts = StepParts.of(cfg, model, None, self.tokenizer.pad_token_id)
        self.backend: RolloutBackend | None = None  # built in setup()
        self.rl_step = 0
        self._restored_calls: int | None = None
        #: the largest resident set of the launches before this one, as far as their last
        #: checkpoint saw (None for a run trained from its start): a resumed run's summary holds
        #: it, since a killed launch writes none of its own
        self.earlier_peak_bytes: int | None = None
        self.last_rollout: dict[str, float] = {}
        self.last_figures: dict[str, float] = {}  # every figure of the last step (health monitors)

    # -- setup ------------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        if self.parts.loop is not None:
            return
        cfg = self.cfg
        sampling = replace(cfg.rollout.sampling, seed=cfg.seed * 1009 + self.global_rank)
        policy = replace(cfg.rollout.policy, device=self._rollout_device())
        rollout_cfg = replace(cfg.rollout, sampling=sampling, policy=policy)
        if self.sharded:
            # rollouts never run on the sharded policy (each rank generates its own rollouts, and
            # every forward of a sharded unit is a collective): the backend gets a plain copy,
            # made here before configure_model shards the policy, and its weights are gathered
            # whole at every sync
            plain = copy.deepcopy(self.policy).requires_grad_(False).eval()
            backend = build_backend(rollout_cfg, plain, self.tokenizer, owns_model=True)
            self.backend = GatheredRollouts(backend, plain)
            self.parts.scorer = plain
        else:
            self.backend = build_backend(rollout_cfg, self.policy, self.tokenizer)
        self.parts.loop = AgentLoop(self.backend, RETRIEVERS.bind(cfg.retriever)(), cfg.agent)

    @property
    def sharded(self) -> bool:
        """Whether the policy trains sharded (``trainer.strategy=fsdp``)."""
        return self.cfg.trainer.strategy == FSDP

    def configure_model(self) -> None:
        """``trainer.strategy=fsdp``: shard the policy with FSDP2 over the strategy's device mesh
        (:func:`~framework.training.sharding.shard_policy`), after ``setup`` and before the
        optimiser is built on its (sharded) parameters."""
        if self.sharded:
            mesh = self.device_mesh
            assert mesh is not None  # the strategy sets it before this hook
            shard_policy(self.policy, self.cfg.trainer.fsdp, mesh["data_parallel"])

    def export_weights(self) -> dict[str, Tensor] | None:
        """The sharded policy's whole state dict on rank 0 (an empty one elsewhere; every rank
        calls it), for the export; None when the policy is not sharded (the export reads it)."""
        return full_state_dict(self.policy, rank0_only=True) if self.sharded else None

    def _rollout_device(self) -> str:
        """``rollout.policy.device``, with a bare ``cuda`` made this process's GPU (under DDP each
        rank rolls out on its own card, not all on ``cuda:0``)."""
        device = self.cfg.rollout.policy.device
        trainer = self._trainer
        root = trainer.strategy.root_device if trainer is not None else None
        if root is None or root.type != "cuda":
            return device
        if device == "cuda":
            return str(root)
        if device == "cpu" and self.global_rank == 0:  # the default: say what it costs
            print(
                f"seekrl-train: [rollout.policy.device] got cpu while the policy trains on {root}; "
                "rollouts run on the CPU and every weight sync copies the policy off the card. "
                "Fix: set rollout.policy.device=cuda for rollouts on the GPU.",
                file=sys.stderr,
                flush=True,
            )
        return device

    def on_train_start(self) -> None:
        # a resumed run's weights are restored after setup() (and under trainer.strategy=fsdp,
        # with the rest of the checkpoint, after on_fit_start): the backend's rollout copy and
        # its call count, which seeds its sampling, follow here
        assert self.backend is not None  # setup() built it
        self.backend.update_weights(self.policy)
        if self._restored_calls is not None and isinstance(self.backend, CountsCalls):
            self.backend.calls = self._restored_calls

    def on_validation_start(self) -> None:
        assert self.backend is not None  # setup() built it
        self.backend.update_weights(self.policy)

    def teardown(self, stage: str) -> None:
        if stage == "fit" and self.parts.loop is not None and self.cfg.trainer.val_at_end:
            return  # the final validation still needs it; closed by close()
        self.close()

    def close(self) -> None:
        if isinstance(self.parts.loop, AgentLoop):  # what setup() builds
            self.parts.loop.retriever.close()
        self.parts.loop = None

    def on_fit_start(self) -> None:
        if isinstance(self.parts.reference, torch.nn.Module):
            self.parts.reference.to(self.device)

    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        total = self.cfg.trainer.max_steps * self.cfg.optim.policy_epochs
        opt, sched = optimizer_and_schedule(self.policy, self.cfg.optim, total)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def transfer_batch_to_device(
        self, batch: object, device: torch.device, dataloader_idx: int
    ) -> object:
        return batch  # question indices, not tensors: nothing to move

    # -- one training step --------------------------------------------------------------------------
    def training_step(self, batch: StepBatch, batch_idx: int) -> None:
        sampler = self.data.sampler
        optimizer, scheduler = self.optimizers(), self.lr_schedulers()
        # configure_optimizers returns one of each
        assert not isinstance(optimizer, list) and isinstance(scheduler, LRScheduler)
        result = rl_step(
            self.parts,
            batch.groups,
            self.train_items,
            optimizer,
            scheduler,
            keep=sampler.keep_group if isinstance(sampler, GroupFilter) else None,
            backward=self.manual_backward,
            pad_passes=self._missing_passes,
            progress=self.rl_step / max(self.cfg.trainer.max_steps, 1),
        )
        self.data.observe(self.rl_step, result, self.cfg.reward)
        self.data.mark_trained(batch)
        self.rl_step += 1
        figures = dict(result.figures, **{"train/step": float(self.rl_step)})
        if self.device.type == "cuda":  # the run's peak so far (tools/gpu_check.sh reads it)
            figures["memory/peak_gpu_gb"] = torch.cuda.max_memory_allocated(self.device) / 1024**3
        n = max(len(result.trajectories), 1)  # 0 when dynamic sampling kept no group
        distributed = self.trainer.world_size > 1
        self.log_dict(figures, on_step=True, on_epoch=False, batch_size=n, sync_dist=distributed)
        rollout = {k[8:]: v for k, v in figures.items() if k.startswith("rollout/")}  # unprefixed
        for name, key in (("reward", "reward"), ("acc", "accuracy")):
            self.log(name, rollout[key], prog_bar=True, logger=False, batch_size=n)
        self.last_rollout = rollout
        self.last_figures = figures
        self.record(result)
        if self.rl_step >= self.cfg.trainer.max_steps:
            # Lightning's own limit counts optimiser steps, of which a step may make several;
            # fit() then validates once if the run asks for it
            end_fit_after_this_step(self.trainer)

    @property
    def data(self) -> QuestionDataModule:
        """The run's data module (the step stream and its sampler)."""
        return self.trainer.datamodule  # type: ignore[attr-defined]  # set by Trainer.fit

    def _missing_passes(self, mine: int) -> int:
        """Backward passes this process must add so that every process runs as many as the
        busiest one (data parallel: each backward synchronises gradients)."""
        import torch.distributed as dist

        if self.trainer.world_size == 1 or not dist.is_available() or not dist.is_initialized():
            return 0
        n = torch.tensor([mine], device=self.device)
        dist.all_reduce(n, op=dist.ReduceOp.MAX)
        return int(n.item()) - mine

    # -- logging ------------------------------------------------------------------------------------
    def record(self, result: StepResult) -> None:
        """Trajectory JSONL dump, text samples and reward / advantage histograms of this step."""
        records, log, step = result.records(self.rl_step), self.cfg.logging, self.rl_step
        if log.dump_trajectories:
            folder = Path(self.cfg.run_dir) / "trajectories"
            folder.mkdir(parents=True, exist_ok=True)
            suffix = "" if self.global_rank == 0 else f".rank{self.global_rank}"
            with (folder / f"step-{step:06d}{suffix}.jsonl").open("w") as fh:
                fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        experiments: list[object] = [getattr(lg, "experiment", None) for lg in self.loggers]
        for exp in experiments if self.global_rank == 0 else []:
            if not isinstance(exp, HistogramWriter) or not result.trajectories:
                continue
            exp.add_histogram("rollout/rewards", result.scores.total.float(), step)
            exp.add_histogram("rollout/advantages", result.advantage_values(), step)
            every = log.text_every_n_steps
            if every and (step % every == 0 or step == 1):
                samples = records[: log.text_samples]
                text = "\n\n".join("```\n" + render_record(r) + "\n```" for r in samples)
                exp.add_text("rollout/samples", text, step)

    # -- validation ---------------------------------------------------------------------------------
    def validation_step(self, rows: list[int], batch_idx: int) -> None:
        rows = rows[self.global_rank :: self.trainer.world_size]
        items = [self.val_items[r] for r in rows]
        if not items:
            return
        # plain lines for a log; on a terminal Lightning's validation bar is shown
        plain = self.trainer.is_global_zero and not sys.stdout.isatty()
        with Progress("rl validation", unit="rollout", enabled=plain) as bar:
            size = self.cfg.trainer.val_samples
            metrics, n = validation_figures(self.parts, items, size, rows, progress=bar)
        self.log_dict(
            {f"val/{k}": v for k, v in metrics.items()},
            on_step=False,
            on_epoch=True,
            batch_size=n,
            sync_dist=self.trainer.world_size > 1,
        )

    # -- checkpoints --------------------------------------------------------------------------------
    def policy_identity(self) -> dict[str, object]:
        p = self.cfg.rollout.policy
        ident: dict[str, object] = {
            "source": p.source,
            "path": p.path,
            "lora": bool(self.cfg.lora.enabled),
        }
        return ident | policy_source(p).identity(p)  # a random model's dimensions

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["seekrl"] = {
            "rl_step": self.rl_step,
            "backend_calls": self.backend.calls if isinstance(self.backend, CountsCalls) else 0,
            "policy": self.policy_identity(),
            "rng": random_state(),
            # this process's peak so far, and the earlier launches' (see earlier_peak_bytes)
            "peak_bytes": max(self.earlier_peak_bytes or 0, peak_rss_bytes()),
        }
        if self.parts.augmenter is not None:
            checkpoint["seekrl"]["augmenter"] = self.parts.augmenter.state_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("seekrl")
        if state is None:
            raise CheckpointMismatch(
                "[resume] the checkpoint was not written by seekrl-train (no 'seekrl' state). "
                "Fix: resume from a checkpoints/step-*.ckpt file of a seekrl-train run."
            )
        if state["policy"] != self.policy_identity():
            raise CheckpointMismatch(
                f"[resume] got a checkpoint of policy {state['policy']}; expected "
                f"{self.policy_identity()} (the configured rollout.policy and lora). Fix: resume "
                "with the configuration the checkpoint was trained with."
            )
        self.rl_step = int(state["rl_step"])
        if self.parts.augmenter is not None and "augmenter" in state:
            self.parts.augmenter.load_state_dict(state["augmenter"])
        self._restored_calls = int(state["backend_calls"])
        if "peak_bytes" in state:  # absent from checkpoints written before it was kept
            self.earlier_peak_bytes = int(state["peak_bytes"])
        set_random_state(state["rng"])
