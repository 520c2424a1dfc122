"""One RL training step in plain torch: roll out, score, estimate advantages, update the policy.

:func:`rl_step` is the step ``seekrl-train`` runs (the Lightning module calls it once per step and
adds logging, checkpoints and distributed glue) and the step ``tools/bench/train_step.py`` times.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch
from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from framework.config import ComponentConfig
from framework.data.schema import QAItem
from framework.registry import ADVANTAGES, AUGMENTERS
from framework.registry.protocols import Augmenter, BoundAdvantageFn, RolloutBackend
from framework.rl.augment import AugmentContext
from framework.rl.batch import BatchView, PlanOptions, RolloutBatch, per_rollout
from framework.rl.config import OptimConfig, TrainConfig
from framework.rl.drawn import Drawn
from framework.rl.inputs import REQUIRING_SECTIONS, InputContext, provide_inputs
from framework.rl.update import LossSpec, loss_spec, plan_options, policy_update
from framework.rollout.metrics import (
    correct,
    correctness_metric,
    rollout_metrics,
    zero_variance_fraction,
)
from framework.rollout.records import TrajectoryRecord, trajectory_records
from framework.rollout.scoring import Scores, score
from framework.training.lora import reference_policy
from framework.types import GroupRequest, Trajectory

if TYPE_CHECKING:
    from lightning.pytorch.core.optimizer import LightningOptimizer


class RolloutLoop(Protocol):
    """What rolls a step's groups out (:class:`~framework.rollout.engine.AgentLoop`, or a
    benchmark's single-turn loop)."""

    #: the generation backend, whose weights follow the policy (``update_weights``, ``tokenizer``)
    backend: RolloutBackend
    #: seconds of the last run by phase
    timings: dict[str, float]

    def run(
        self,
        questions: list[str],
        group_sizes: list[int],
        *,
        question_ids: list[int] | None = None,
        progress: Callable[[int, int], None] | None = None,
        prompts: list[list[dict[str, str]]] | None = None,
    ) -> list[Trajectory]: ...


@runtime_checkable
class CountsRetrievals(Protocol):
    """A loop that counts its last run's retriever calls by outcome (``queries``, ``empty``,
    ``failed``), as :class:`~framework.rollout.engine.AgentLoop` does."""

    retrieval_counts: dict[str, int]


@dataclass
class StepParts:
    """What every step of a run works with.

    Attributes:
        policy: the causal LM being trained (full or LoRA).
        loop: rolls groups out (:class:`RolloutLoop`); ``None`` until the Lightning module's
            ``setup`` builds it.
        reward: the reward config (scored through ``REWARDS``).
        advantage: the advantage config (estimated through ``ADVANTAGES``).
        spec: the bound objective (:func:`~framework.rl.update.loss_spec`).
        optim: the ``optim`` config section (epochs, micro-batches, clipping).
        pad_id: the tokenizer's padding id.
        reference: the frozen reference policy of a KL term, else ``None``.
        loss: the loss config (bound in ``spec``), whose ``requires`` the step meets too.
        estimator: the advantage estimator, bound once from ``advantage`` through
            ``ADVANTAGES`` (when not given).
        plan: how updates group rows into micro-batches, from ``optim`` and ``spec``
            (:func:`~framework.rl.update.plan_options`; when not given).
        augment: the ``augment`` config (what else the step rolls out), or ``None`` for none.
        augmenter: the augmenter built once from ``augment`` through ``AUGMENTERS`` (when not
            given; ``None`` without an ``augment`` config).
        scorer: the model that input providers and augmenters score rollouts with (no gradient),
            ``None`` for ``policy``. A sharded policy's is the rollout backend's plain copy,
            which holds the same weights: every forward of a sharded policy is a collective, and
            the processes score different numbers of rows.
    """

    policy: torch.nn.Module
    loop: RolloutLoop | None
    reward: ComponentConfig
    advantage: ComponentConfig
    spec: LossSpec
    optim: OptimConfig
    pad_id: int
    reference: torch.nn.Module | None = None
    loss: ComponentConfig | None = None
    estimator: BoundAdvantageFn | None = None
    plan: PlanOptions | None = None
    augment: ComponentConfig | None = None
    augmenter: Augmenter | None = None
    scorer: torch.nn.Module | None = None

    def __post_init__(self) -> None:
        if self.augmenter is None and self.augment is not None and self.augment.name != "none":
            self.augmenter = AUGMENTERS.bind(self.augment)()
        if self.estimator is None:
            self.estimator = ADVANTAGES.bind(self.advantage)
        if self.plan is None:
            self.plan = plan_options(self.optim, self.spec)

    @classmethod
    def of(
        cls,
        cfg: TrainConfig,
        policy: torch.nn.Module,
        loop: RolloutLoop | None,
        pad_id: int,
        *,
        reward: ComponentConfig | None = None,
    ) -> StepParts:
        """The parts of the train config ``cfg`` (``reward``, ``advantage``, ``loss``, ``kl``,
        ``optim``): the objective bound through the registries and, with a KL term, a frozen
        reference of ``policy``. ``reward`` replaces the configured one (a benchmark's)."""
        spec = loss_spec(cfg.loss, cfg.kl)
        reference = reference_policy(policy) if spec.kl is not None else None
        return cls(
            policy,
            loop,
            cfg.reward if reward is None else reward,
            cfg.advantage,
            spec,
            cfg.optim,
            pad_id,
            reference,
            cfg.loss,
            augment=getattr(cfg, "augment", None),
        )

    @property
    def scoring_model(self) -> torch.nn.Module:
        """What providers and augmenters score with: ``scorer``, else ``policy``."""
        return self.policy if self.scorer is None else self.scorer

    def running_loop(self) -> RolloutLoop:
        """The rollout loop (raises before the Lightning module's ``setup`` has built it)."""
        if self.loop is None:
            raise RuntimeError("StepParts.loop is None: build the rollout loop before a step")
        return self.loop


class StepRecord(TrajectoryRecord):
    """One rollout of a step as a JSON record (``trajectories/step-NNNNNN.jsonl``): its
    trajectory record, its advantage (per rollout) and the step."""

    advantage: float
    step: int


@dataclass
class StepResult(BatchView):
    """What one step did.

    Attributes:
        batch: the trained rollouts as one batch (token layouts, masks, turns, rewards, dataset
            columns, the inputs providers computed).
        advantages: ``[N]``, or ``[N, L]`` in the layout of ``batch.token_mask``.
        figures: ``rollout/...``, ``loss/...``, ``timing/...``, ``train/lr`` and ``train/rollouts``.
    """

    batch: RolloutBatch
    advantages: Tensor
    figures: dict[str, float]

    @property
    def scores(self) -> Scores:
        """Total reward and each component, ``[N]`` each."""
        assert self.batch.scores is not None  # the step scores before it builds the batch
        return self.batch.scores

    def rollout_advantages(self) -> Tensor:
        """``[N]`` one advantage per rollout (a token-level one: its mean over generated tokens)."""
        return per_rollout(self.advantages, self.batch.token_mask)

    def records(self, step: int) -> list[StepRecord]:
        """One JSON-ready dict per rollout (:func:`~framework.rollout.records.trajectory_records`)
        with its advantage and the step."""
        records = trajectory_records(self.trajectories, self.items, self.scores)
        advantages = self.rollout_advantages().tolist()
        return [
            StepRecord(**r, advantage=a, step=step)
            for r, a in zip(records, advantages, strict=True)
        ]

    def group_outcomes(
        self, reward_cfg: ComponentConfig | None = None
    ) -> tuple[list[int], list[list[float]], list[list[bool]]]:
        """Per trained group: its question (dataset row), its rollouts' total rewards and whether
        each is correct by the reward's answer metric (what an adaptive sampler observes)."""
        ok = correct(self.trajectories, self.items, correctness_metric(reward_cfg))
        questions: list[int] = [-1] * len(self.items)
        rewards: list[list[float]] = [[] for _ in self.items]
        right: list[list[bool]] = [[] for _ in self.items]
        for t, r, c in zip(self.trajectories, self.scores.total.tolist(), ok, strict=True):
            questions[t.group] = t.question
            rewards[t.group].append(float(r))
            right[t.group].append(bool(c))
        return questions, rewards, right

    def advantage_values(self) -> Tensor:
        """Every advantage the loss sees: ``[N]``, or those of generated tokens for ``[N, L]``."""
        adv = self.advantages
        return adv if adv.dim() == 1 else adv[self.batch.token_mask]


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
        return parts.running_loop().run(
            [it.question for it in items],
            list(group_sizes),
            question_ids=list(question_ids),
            progress=progress,
            prompts=[it.messages() for it in items],
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


def draw_groups(
    parts: StepParts,
    groups: Sequence[GroupRequest],
    dataset: Sequence[QAItem],
    keep: Callable[[Tensor, Tensor], bool] | None = None,
) -> tuple[Drawn, Drawn, dict[str, float]]:
    """Roll out and score the step's groups; with ``keep``, drop the groups it rejects and roll out
    reserve groups (``GroupRequest.reserve``) in their place, round by round, until as many groups
    as the step's non-reserve ones are kept or the reserve is spent.

    Args:
        keep: ``keep(rewards, correct)`` of one group (``[G]`` total rewards, ``[G]`` bool
            correctness by the reward's answer metric) -> train it; None keeps every group and
            rolls out no reserve group.

    Returns:
        ``(kept, drawn, figures)``: the kept groups (what the step trains on), every rollout the
        step generated, and the timings and (with ``keep``) the ``sampler/...`` figures.
    """
    primary = [g for g in groups if not g.reserve]
    reserve = [g for g in groups if g.reserve] if keep is not None else []
    metric = correctness_metric(parts.reward) if keep is not None else ""
    rounds: list[tuple[Drawn, list[bool]]] = []
    timings: dict[str, float] = defaultdict(float)
    pending, kept = primary, 0
    while pending:
        clock = time.perf_counter()
        items = [dataset[g.question] for g in pending]
        trajs = rollouts(parts, items, [g.size for g in pending], [g.question for g in pending])
        for k, v in parts.running_loop().timings.items():
            if k != "total":
                timings[f"timing/{k}"] += v
        loop = parts.loop
        counts: dict[str, int] = loop.retrieval_counts if isinstance(loop, CountsRetrievals) else {}
        for k, n in counts.items():
            timings[f"retrieval/{k}"] += float(n)  # queries, empty, failed (summed over rounds)
        timings["timing/rollout"] += time.perf_counter() - clock
        mark = time.perf_counter()
        batch = Drawn(trajs, items, score(trajs, items, parts.reward))
        timings["timing/scoring"] += time.perf_counter() - mark
        flags = [True] * len(items)
        if keep is not None:
            ok = torch.tensor(correct(trajs, items, metric), dtype=torch.bool)
            group = torch.tensor([t.group for t in trajs], dtype=torch.long)
            flags = [
                bool(keep(batch.scores.total[group == g], ok[group == g]))
                for g in range(len(items))
            ]
        rounds.append((batch, flags))
        kept += sum(flags)
        missing = max(len(primary) - kept, 0)
        pending, reserve = reserve[:missing], reserve[missing:]
    figures = dict(timings)
    if keep is None:
        return rounds[0][0], rounds[0][0], figures  # one round, every group kept
    drawn = Drawn.merge([(b, [True] * len(b.items)) for b, _ in rounds])
    generated = len(drawn.trajectories)
    figures["sampler/drawn_groups"] = float(len(drawn.items))
    figures["sampler/kept_groups"] = float(kept)
    figures["sampler/generated_rollouts"] = float(generated)
    if kept:
        figures["sampler/rollouts_per_kept_group"] = generated / kept
    return Drawn.merge(rounds), drawn, figures


def augment(
    parts: StepParts, augmenter: Augmenter, kept: Drawn, progress: float
) -> tuple[Drawn, dict[str, float]]:
    """The rollouts the step trains on after the run's ``augmenter`` (:mod:`framework.rl.augment`),
    and its figures: ``augment/...``, the rollouts and tokens it generated, its seconds."""
    clock = time.perf_counter()
    loop = parts.running_loop()
    ctx = AugmentContext(loop, parts.reward, parts.scoring_model, loop.backend.tokenizer, progress)
    out = augmenter.augment(kept, ctx)
    figures = {f"augment/{k}": float(v) for k, v in out.figures.items()}
    figures["augment/rollouts"] = float(len(ctx.generated))
    tokens = sum(t.stats.get("generated_tokens", 0) for t in ctx.generated)
    figures["augment/generated_tokens"] = float(tokens)
    figures["timing/augment"] = time.perf_counter() - clock
    return out.drawn, figures


def rl_step(
    parts: StepParts,
    groups: Sequence[GroupRequest],
    dataset: Sequence[QAItem],
    optimizer: Optimizer | LightningOptimizer,
    scheduler: LRScheduler,
    *,
    keep: Callable[[Tensor, Tensor], bool] | None = None,
    backward: Callable[[Tensor], None] = Tensor.backward,
    pad_passes: Callable[[int], int] | None = None,
    progress: float = 0.0,
) -> StepResult:
    """One RL step: roll every group out, score once, estimate advantages, train the policy.

    Rollouts (no gradients) -> rewards (``REWARDS``, each component once) -> the groups ``keep``
    accepts, refilled from the reserve (:func:`draw_groups`) -> one
    :class:`~framework.rl.batch.RolloutBatch` of them (tokens packed, masks and turn indices
    computed once; in ``extras`` what the rewards returned besides their ``[N]`` values, a
    :class:`~framework.types.RewardOutput`'s ``turn_rewards``, and every input a component's config
    ``requires``, computed by its registered provider: :mod:`framework.rl.inputs`, no
    gradient) -> advantages (the estimator bound once from ``ADVANTAGES``, on the batch's
    :class:`~framework.types.AdvantageInputs` view: :meth:`RolloutBatch.estimate`) -> the
    micro-batches sliced from the batch with their weights (:meth:`RolloutBatch.plan`) ->
    ``optim.policy_epochs`` optimiser steps over them (:func:`~framework.rl.update.policy_update`)
    -> the rollout backend's weights refreshed.
    A step that keeps no group changes no weight (the optimiser and schedule still count it).

    Args:
        parts: the run's policy, loop and bound components.
        groups: this process's groups of the step, each with its own size.
        dataset: the training questions (``groups[g].question`` indexes them).
        optimizer: steps the policy's parameters (``zero_grad``, ``step``).
        scheduler: the learning-rate schedule (``step``, ``get_last_lr``).
        keep: the sampler's ``keep_group`` (dynamic sampling; see :func:`draw_groups`).
        backward: runs the backward pass of a loss (Lightning's ``manual_backward``).
        pad_passes: data parallelism: zero-loss backward passes to add for a process with fewer
            micro-batches (see :func:`~framework.rl.update.policy_update`).
        progress: the share of the run's steps done before this one (0 at the first step), for
            input providers (:attr:`~framework.rl.inputs.InputContext.progress`).

    Returns:
        The trained rollouts, their scores and advantages, and the step's figures under the names
        the trainer logs (``rollout/...`` describe every rollout the step generated).
    """
    assert parts.estimator is not None and parts.plan is not None  # bound in __post_init__
    clock = time.perf_counter()
    loop = parts.running_loop()
    kept, drawn, timings = draw_groups(parts, groups, dataset, keep)
    if parts.augmenter is not None:
        kept, more = augment(parts, parts.augmenter, kept, progress)
        timings.update(more)

    mark = time.perf_counter()
    batch = RolloutBatch.build(
        kept.trajectories,
        kept.items,
        kept.scores,
        pad_id=parts.pad_id,
        over_budget=parts.optim.over_budget,
    )
    context = InputContext(parts.scoring_model, loop.backend.tokenizer, batch, progress)
    sections = {s: getattr(parts, s) for s in REQUIRING_SECTIONS}  # the components requiring
    batch.extras.update(provide_inputs(sections, context, have=batch.extras))
    advantages = batch.estimate(parts.estimator, parts.advantage.name)
    timings["timing/scoring"] += time.perf_counter() - mark

    mark = time.perf_counter()
    plan = batch.plan(advantages, parts.plan)
    losses = policy_update(
        parts.policy,
        plan,
        parts.spec,
        optimizer,
        scheduler,
        parts.optim,
        backward=backward,
        reference=parts.reference,
        pad_passes=pad_passes,
    )
    timings["timing/update"] = time.perf_counter() - mark
    mark = time.perf_counter()
    loop.backend.update_weights(parts.policy)
    timings["timing/weight_sync"] = time.perf_counter() - mark

    step_seconds = time.perf_counter() - clock
    timings["timing/step"] = step_seconds
    generated = sum(t.stats.get("generated_tokens", 0) for t in drawn.trajectories)
    timings["timing/rollout_tokens_per_s"] = generated / max(timings["timing/rollout"], 1e-9)
    timings["timing/samples_per_s"] = len(drawn.trajectories) / max(step_seconds, 1e-9)

    d = drawn
    rollout = rollout_metrics(d.trajectories, d.items, d.scores, reward_cfg=parts.reward)
    index = torch.tensor([t.group for t in d.trajectories], dtype=torch.long)
    rollout["zero_variance_groups"] = zero_variance_fraction(d.scores.total, index)
    figures = {f"rollout/{k}": v for k, v in rollout.items()}
    figures.update({f"loss/{k}": v for k, v in losses.items()})
    figures.update(timings)
    figures["train/lr"] = float(scheduler.get_last_lr()[0])
    figures["train/rollouts"] = len(batch.trajectories)
    # what the step spent, for comparisons at equal compute (framework/study/compute.py): every
    # rollout it generated (each sampler round's, and an augmenter's), their generated tokens, and
    # its optimiser steps (mini-batches x epochs, or one per turn stage)
    figures["train/generated_rollouts"] = len(d.trajectories) + timings.get("augment/rollouts", 0)
    figures["train/generated_tokens"] = generated + timings.get("augment/generated_tokens", 0)
    figures["train/optimizer_steps"] = losses.get(
        "optimizer_steps", losses.get("turn_stages", float(parts.optim.policy_epochs))
    )
    figures = {k: float(v) for k, v in figures.items()}
    return StepResult(batch, advantages, figures)
