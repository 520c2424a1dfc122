"""One RL training step in plain torch: roll out, score, estimate advantages, update the policy.

:func:`rl_step` is the step ``seekrl-train`` runs (the Lightning module calls it once per step and
adds logging, checkpoints and distributed glue) and the step ``tools/bench/train_step.py`` times.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from framework.config import ComponentConfig
from framework.data.schema import QAItem
from framework.rollout.scoring import Scores, score
from framework.rollout.types import Trajectory
from framework.training.batch import advantage_inputs, check_advantages, per_rollout
from framework.training.metrics import rollout_metrics, zero_variance_fraction
from framework.training.update import LossSpec, policy_update
from framework.types import AdvantageInputs, GroupRequest


@dataclass
class StepParts:
    """What every step of a run works with.

    Attributes:
        policy: the causal LM being trained (full or LoRA).
        loop: rolls groups out: :class:`~framework.rollout.engine.AgentLoop`, or any object with
            its ``run(questions, group_sizes, *, question_ids, progress)``, ``timings`` (seconds of
            the last run by phase) and ``backend`` (whose weights follow the policy).
        reward: the reward config (scored through ``REWARDS``).
        advantage: the advantage config (estimated through ``ADVANTAGES``).
        spec: the bound objective (:func:`~framework.training.update.loss_spec`).
        optim: the ``optim`` config section (epochs, micro-batches, clipping).
        pad_id: the tokenizer's padding id.
        reference: the frozen reference policy of a KL term, else ``None``.
    """

    policy: Any
    loop: Any
    reward: ComponentConfig
    advantage: ComponentConfig
    spec: LossSpec
    optim: Any
    pad_id: int
    reference: Any = None


@dataclass
class StepResult:
    """What one step did.

    Attributes:
        trajectories: the ``N`` rollouts, grouped (``items[t.group]`` is a rollout's question).
        items: the question of each group.
        scores: total reward and each component, ``[N]`` each.
        inputs: the batch the advantage estimator saw (token mask, turns, dataset columns).
        advantages: ``[N]``, or ``[N, L]`` in the layout of ``inputs.token_mask``.
        figures: ``rollout/...``, ``loss/...``, ``timing/...``, ``train/lr`` and ``train/rollouts``.
    """

    trajectories: list[Trajectory]
    items: list[QAItem]
    scores: Scores
    inputs: AdvantageInputs
    advantages: Tensor
    figures: dict[str, float]

    def rollout_advantages(self) -> Tensor:
        """``[N]`` one advantage per rollout (a token-level one: its mean over generated tokens)."""
        return per_rollout(self.advantages, self.inputs.token_mask)

    def records(self, step: int) -> list[dict[str, Any]]:
        """One JSON-ready dict per rollout (:func:`~framework.rollout.records.trajectory_records`)
        with its advantage and the step."""
        from framework.rollout.records import trajectory_records

        records = trajectory_records(self.trajectories, self.items, self.scores)
        for r, a in zip(records, self.rollout_advantages().tolist(), strict=True):
            r["advantage"] = a
            r["step"] = step
        return records

    def advantage_values(self) -> Tensor:
        """Every advantage the loss sees: ``[N]``, or those of generated tokens for ``[N, L]``."""
        adv = self.advantages
        return adv if adv.dim() == 1 else adv[self.inputs.token_mask]


def rollouts(
    parts: StepParts,
    items: Sequence[QAItem],
    group_sizes: Sequence[int],
    question_ids: Sequence[int],
    progress: Callable[[int, int], None] | None = None,
) -> list[Trajectory]:
    """``group_sizes[g]`` rollouts of question ``items[g]`` with the current policy, no gradients
    (``progress``: see :meth:`~framework.rollout.engine.AgentLoop.run`)."""
    parts.policy.eval()
    with torch.no_grad():
        return parts.loop.run(
            [it.question for it in items],
            list(group_sizes),
            question_ids=list(question_ids),
            progress=progress,
        )


def validation_figures(
    parts: StepParts,
    items: Sequence[QAItem],
    group_size: int,
    question_ids: Sequence[int],
    progress: Callable[[int, int], None] | None = None,
) -> tuple[dict[str, float], int]:
    """``(rollout metrics, rollouts)`` of ``group_size`` rollouts of each question in ``items``."""
    trajs = rollouts(parts, items, [group_size] * len(items), question_ids, progress)
    scores = score(trajs, items, parts.reward)
    metrics = rollout_metrics(trajs, items, scores, reward_cfg=parts.reward)
    return {k: float(v) for k, v in metrics.items()}, len(trajs)


def rl_step(
    parts: StepParts,
    groups: Sequence[GroupRequest],
    dataset: Sequence[QAItem],
    optimizer: Any,
    scheduler: Any,
    *,
    backward: Callable[[Tensor], None] = Tensor.backward,
    pad_passes: Callable[[int], int] | None = None,
) -> StepResult:
    """One RL step: roll every group out, score once, estimate advantages, train the policy.

    Rollouts (no gradients) -> rewards (``REWARDS``, each component once) -> advantages
    (``ADVANTAGES`` on :class:`~framework.types.AdvantageInputs` with the token and turn structure
    and the dataset columns) -> ``optim.policy_epochs`` optimiser steps over micro-batches
    (:func:`~framework.training.update.policy_update`) -> the rollout backend's weights refreshed.

    Args:
        parts: the run's policy, loop and bound components.
        groups: this process's groups of the step, each with its own size.
        dataset: the training questions (``groups[g].question`` indexes them).
        optimizer: steps the policy's parameters (``zero_grad``, ``step``).
        scheduler: the learning-rate schedule (``step``, ``get_last_lr``).
        backward: runs the backward pass of a loss (Lightning's ``manual_backward``).
        pad_passes: data parallelism: zero-loss backward passes to add for a process with fewer
            micro-batches (see :func:`~framework.training.update.policy_update`).

    Returns:
        The rollouts, their scores and advantages, and the step's figures under the names the
        trainer logs.
    """
    from framework.registry import ADVANTAGES

    clock = time.perf_counter()
    items = [dataset[g.question] for g in groups]
    trajs = rollouts(parts, items, [g.size for g in groups], [g.question for g in groups])
    timings = {f"timing/{k}": v for k, v in parts.loop.timings.items() if k != "total"}
    timings["timing/rollout"] = time.perf_counter() - clock

    mark = time.perf_counter()
    scores = score(trajs, items, parts.reward)
    inputs = advantage_inputs(trajs, items, scores.total)
    raw = ADVANTAGES.bind(parts.advantage)(inputs)
    advantages = check_advantages(raw, inputs, parts.advantage.name)
    timings["timing/scoring"] = time.perf_counter() - mark

    mark = time.perf_counter()
    losses = policy_update(
        parts.policy,
        trajs,
        advantages,
        inputs.sample_mask,
        parts.spec,
        optimizer,
        scheduler,
        parts.optim,
        pad_id=parts.pad_id,
        backward=backward,
        reference=parts.reference,
        pad_passes=pad_passes,
    )
    timings["timing/update"] = time.perf_counter() - mark
    mark = time.perf_counter()
    parts.loop.backend.update_weights(parts.policy)
    timings["timing/weight_sync"] = time.perf_counter() - mark

    step_seconds = time.perf_counter() - clock
    timings["timing/step"] = step_seconds
    generated = sum(t.stats.get("generated_tokens", 0) for t in trajs)
    timings["timing/rollout_tokens_per_s"] = generated / max(timings["timing/rollout"], 1e-9)
    timings["timing/samples_per_s"] = len(trajs) / max(step_seconds, 1e-9)

    rollout = rollout_metrics(trajs, items, scores, reward_cfg=parts.reward)
    rollout["zero_variance_groups"] = zero_variance_fraction(scores.total, inputs.group_index)
    figures = {f"rollout/{k}": v for k, v in rollout.items()}
    figures.update({f"loss/{k}": v for k, v in losses.items()})
    figures.update(timings)
    figures["train/lr"] = scheduler.get_last_lr()[0]
    figures["train/rollouts"] = len(trajs)
    figures = {k: float(v) for k, v in figures.items()}
    return StepResult(trajs, items, scores, inputs, advantages, figures)
