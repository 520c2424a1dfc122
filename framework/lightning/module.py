"""The LightningModule of group-relative RL for search agents.

A training step: roll out this rank's groups without gradients (agent loop, retriever), score them
(reward registry), compute advantages (advantage registry), then optimise the policy loss (loss and
KL registries) over micro-batches with manual optimisation, clip gradients, step the optimiser and
the schedule, and refresh the rollout backend's weights. All math lives in ``framework/algorithms``
and ``framework/training``; this file only wires it to Lightning.
"""

from __future__ import annotations

import copy
import json
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch

from framework.lightning.data import StepBatch
from framework.rollout.engine import AgentLoop
from framework.rollout.types import Trajectory
from framework.training.lora import AdaptersOff, apply_lora, is_peft
from framework.training.metrics import rollout_metrics, zero_variance_fraction
from framework.training.schedule import adamw, lr_multiplier
from framework.training.update import loss_spec, policy_update
from framework.types import AdvantageInputs


class CheckpointMismatch(RuntimeError):
    """A checkpoint written for a different policy than the configured one."""


class SearchAgentRL(L.LightningModule):
    """Owns the policy (full or LoRA), the rollout loop and the objective of one training run.

    Args:
        cfg: the validated train config (``TrainConfig``).
        train_items: training questions (the data module indexes into them).
        val_items: validation questions.
    """

    def __init__(self, cfg: Any, train_items: list, val_items: list) -> None:
        super().__init__()
        from framework.registry import ADVANTAGES
        from framework.rollout.policy import load_policy

        self.automatic_optimization = False
        self.cfg = cfg
        self.train_items = train_items
        self.val_items = val_items
        model, self.tokenizer = load_policy(replace(cfg.rollout.policy, device="cpu"))
        if cfg.lora.enabled:
            model = apply_lora(model, cfg.lora)
        self.policy = model
        self.pad_id = self.tokenizer.pad_token_id
        self.advantage_fn = ADVANTAGES.bind(cfg.advantage)
        self.spec = loss_spec(cfg.loss, cfg.kl)
        use_kl = self.spec.kl is not None
        # the reference policy is loaded only for a KL term, and kept out of the module's
        # parameters (no gradient, no checkpoint, no DDP bucket)
        reference = None
        if use_kl:
            if is_peft(model):
                reference = AdaptersOff(model)
            else:
                reference = copy.deepcopy(model).eval().requires_grad_(False)
        self.__dict__["reference"] = reference
        self.backend: Any = None  # plain objects below (not modules): built in setup()
        self.retriever: Any = None
        self.loop: AgentLoop | None = None
        self.rl_step = 0
        self._restored_calls: int | None = None
        self.last_rollout: dict[str, float] = {}

    # -- setup --------------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        from framework.registry import RETRIEVERS, ROLLOUT_BACKENDS

        if self.loop is not None:
            return
        cfg = self.cfg
        sampling = replace(cfg.rollout.sampling, seed=cfg.seed * 1009 + self.global_rank)
        rollout_cfg = replace(cfg.rollout, sampling=sampling)
        self.backend = ROLLOUT_BACKENDS.bind(rollout_cfg)(
            model=self.policy, tokenizer=self.tokenizer
        )
        self.retriever = RETRIEVERS.bind(cfg.retriever)()
        self.loop = AgentLoop(self.backend, self.retriever, cfg.agent)

    def teardown(self, stage: str) -> None:
        if stage == "fit" and self.retriever is not None and self.cfg.trainer.val_at_end:
            return  # the final validation still needs it; closed by close()
        self.close()

    def close(self) -> None:
        if self.retriever is not None:
            self.retriever.close()
            self.retriever = None
            self.loop = None

    def on_fit_start(self) -> None:
        ref = self.reference
        if isinstance(ref, torch.nn.Module):
            ref.to(self.device)
        if self._restored_calls is not None and hasattr(self.backend, "calls"):
            self.backend.calls = self._restored_calls

    def configure_optimizers(self) -> Any:
        o = self.cfg.optim
        params = [p for p in self.policy.parameters() if p.requires_grad]
        opt = adamw(
            params,
            fused=o.fused,
            lr=o.lr,
            betas=(o.beta1, o.beta2),
            eps=o.eps,
            weight_decay=o.weight_decay,
        )
        total = self.cfg.trainer.max_steps * o.policy_epochs
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lr_multiplier(o.schedule, o.warmup_steps, total)
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def transfer_batch_to_device(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
        return batch  # question indices, not tensors: nothing to move

    # -- one training step --------------------------------------------------------------------------
    def training_step(self, batch: StepBatch, batch_idx: int) -> None:
        from framework.rollout.scoring import score

        clock = time.perf_counter()
        groups = batch.groups
        items = [self.train_items[g.question] for g in groups]
        trajs = self.rollouts(items, groups[0].size, [g.question for g in groups])
        timings = {f"timing/{k}": v for k, v in self.loop.timings.items() if k != "total"}
        timings["timing/rollout"] = time.perf_counter() - clock

        mark = time.perf_counter()
        scores = score(trajs, items, self.cfg.reward)
        group_index = torch.tensor([t.group for t in trajs], dtype=torch.long)
        advantages = self.advantage_fn(
            AdvantageInputs(rewards=scores.total.float(), group_index=group_index)
        ).float()
        sample_mask = torch.tensor([t.status != "over_budget" for t in trajs])
        timings["timing/scoring"] = time.perf_counter() - mark

        mark = time.perf_counter()
        losses = self.optimise(trajs, advantages, sample_mask)
        timings["timing/update"] = time.perf_counter() - mark
        mark = time.perf_counter()
        self.backend.update_weights(self.policy)
        timings["timing/weight_sync"] = time.perf_counter() - mark
        self.trainer.datamodule.mark_trained(batch)
        self.rl_step += 1

        step_seconds = time.perf_counter() - clock
        timings["timing/step"] = step_seconds
        generated = sum(t.stats.get("generated_tokens", 0) for t in trajs)
        timings["timing/rollout_tokens_per_s"] = generated / max(timings["timing/rollout"], 1e-9)
        timings["timing/samples_per_s"] = len(trajs) / max(step_seconds, 1e-9)

        rollout = rollout_metrics(trajs, items, scores, reward_cfg=self.cfg.reward)
        rollout["zero_variance_groups"] = zero_variance_fraction(scores.total, group_index)
        self.last_rollout = rollout
        logged = {f"rollout/{k}": v for k, v in rollout.items()}
        logged.update({f"loss/{k}": v for k, v in losses.items()})
        logged.update(timings)
        logged["train/lr"] = self.lr_schedulers().get_last_lr()[0]
        logged["train/step"] = float(self.rl_step)
        logged["train/rollouts"] = float(len(trajs))
        distributed = self.trainer.world_size > 1
        self.log_dict(
            {k: float(v) for k, v in logged.items()},
            on_step=True,
            on_epoch=False,
            batch_size=len(trajs),
            sync_dist=distributed,
        )
        self.log("reward", rollout["reward"], prog_bar=True, logger=False, batch_size=len(trajs))
        self.log("acc", rollout["accuracy"], prog_bar=True, logger=False, batch_size=len(trajs))
        self.record(trajs, items, scores, advantages)

    def rollouts(self, items: list, group_size: int, question_ids: list[int]) -> list[Trajectory]:
        """``group_size`` rollouts per question with the current policy, no gradients."""
        self.policy.eval()
        with torch.no_grad():
            return self.loop.run(
                [it.question for it in items], group_size, question_ids=question_ids
            )

    def optimise(
        self, trajs: list[Trajectory], advantages: torch.Tensor, sample_mask: torch.Tensor
    ) -> dict[str, float]:
        """``policy_epochs`` optimiser steps on the batch; returns the loss figures."""
        return policy_update(
            self.policy,
            trajs,
            advantages,
            sample_mask,
            self.spec,
            self.optimizers(),
            self.lr_schedulers(),
            self.cfg.optim,
            pad_id=self.pad_id,
            backward=self.manual_backward,
            reference=self.reference,
            pad_passes=self._missing_passes,
        )

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
    def record(self, trajs: list[Trajectory], items: list, scores: Any, advantages: Any) -> None:
        """Trajectory JSONL dump, text samples and reward / advantage histograms of this step."""
        from framework.rollout.records import render_record, trajectory_records

        records = trajectory_records(trajs, items, scores)
        for r, a in zip(records, advantages.tolist(), strict=True):
            r["advantage"] = a
            r["step"] = self.rl_step
        log = self.cfg.logging
        if log.dump_trajectories:
            folder = Path(self.cfg.run_dir) / "trajectories"
            folder.mkdir(parents=True, exist_ok=True)
            suffix = "" if self.global_rank == 0 else f".rank{self.global_rank}"
            with (folder / f"step-{self.rl_step:06d}{suffix}.jsonl").open("w") as fh:
                for r in records:
                    fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        if self.global_rank != 0:
            return
        for logger in self.loggers:
            exp = getattr(logger, "experiment", None)
            if not hasattr(exp, "add_histogram"):
                continue
            exp.add_histogram("rollout/rewards", scores.total.float(), self.rl_step)
            exp.add_histogram("rollout/advantages", advantages.float(), self.rl_step)
            every = log.text_every_n_steps
            if every and (self.rl_step % every == 0 or self.rl_step == 1):
                text = "\n\n".join(
                    "```\n" + render_record(r) + "\n```" for r in records[: log.text_samples]
                )
                exp.add_text("rollout/samples", text, self.rl_step)

    # -- validation ---------------------------------------------------------------------------------
    def validation_step(self, rows: list[int], batch_idx: int) -> None:
        from framework.rollout.scoring import score

        rows = rows[self.global_rank :: self.trainer.world_size]
        items = [self.val_items[r] for r in rows]
        if not items:
            return
        trajs = self.rollouts(items, self.cfg.trainer.val_samples, rows)
        scores = score(trajs, items, self.cfg.reward)
        metrics = rollout_metrics(trajs, items, scores, reward_cfg=self.cfg.reward)
        self.log_dict(
            {f"val/{k}": float(v) for k, v in metrics.items()},
            on_step=False,
            on_epoch=True,
            batch_size=len(trajs),
            sync_dist=self.trainer.world_size > 1,
        )

    # -- checkpoints --------------------------------------------------------------------------------
    def policy_identity(self) -> dict[str, Any]:
        p = self.cfg.rollout.policy
        ident = {"source": p.source, "path": p.path, "lora": bool(self.cfg.lora.enabled)}
        if p.source == "tiny":
            ident.update(layers=p.tiny_layers, hidden=p.tiny_hidden)
        return ident

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["seekrl"] = {
            "rl_step": self.rl_step,
            "backend_calls": getattr(self.backend, "calls", 0),
            "policy": self.policy_identity(),
            "rng": {
                "torch": torch.get_rng_state(),
                "python": random.getstate(),
                "numpy": _numpy_state_to_plain(np.random.get_state()),
            },
        }

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
        self._restored_calls = int(state["backend_calls"])
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        np.random.set_state(_numpy_state_from_plain(state["rng"]["numpy"]))


def _numpy_state_to_plain(state: tuple) -> list:
    """numpy's RNG state with plain Python types (checkpoints load with ``weights_only=True``)."""
    name, keys, pos, has_gauss, gauss = state
    return [name, [int(k) for k in keys], int(pos), int(has_gauss), float(gauss)]


def _numpy_state_from_plain(state: list) -> tuple:
    name, keys, pos, has_gauss, gauss = state
    return (name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss)
