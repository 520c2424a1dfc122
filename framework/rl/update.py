"""One policy update over a batch of trajectories, micro-batched, through the registries.

The caller (the Lightning module) supplies ``backward`` (``manual_backward``) and runs the optimiser;
everything here is plain torch so the gradient accumulation can be checked against the full-batch
loss in unit tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from framework.algorithms.losses.base import PolicyLossConfig
from framework.algorithms.losses.kl import KLConfig
from framework.algorithms.losses.objective import add_kl_penalty
from framework.algorithms.losses.rollout_correction import (
    MismatchStats,
    correction_weights,
    mismatch_stats,
)
from framework.registry import KL_ESTIMATORS, POLICY_LOSSES
from framework.registry.protocols import BoundKLFn, BoundPolicyLossFn
from framework.rl.batch import MicroBatch, PlanOptions, UpdatePlan
from framework.rl.config import OptimConfig
from framework.training.sharding import is_sharded
from framework.training.tokens import token_logprobs
from framework.types import LossOutput, PolicyLossInputs

if TYPE_CHECKING:
    from lightning.pytorch.core.optimizer import LightningOptimizer


@dataclass
class LossSpec:
    """The bound registry components of the objective."""

    policy_loss: BoundPolicyLossFn
    agg: str
    norm_constant: float | None = None
    kl: BoundKLFn | None = None
    kl_coef: float = 0.0
    #: the loss reads group statistics: every group goes into one micro-batch
    whole_groups: bool = False
    #: rollouts with advantage 0 add nothing to the loss, so they may be skipped
    zero_advantage_inert: bool = True
    #: the loss reads the per-token entropy of the current policy (``PolicyLossInputs.entropy``)
    needs_entropy: bool = False
    #: rollout correction (``loss.rollout_correction*``): none, tis or mis; token or sequence; C
    rollout_correction: str = "none"
    rollout_correction_level: str = "token"
    rollout_correction_threshold: float = 2.0
    #: one on-policy pass per model turn, the earlier passes' log-probs kept (SeeUPO)
    stages_per_turn: bool = False


def loss_spec(loss: PolicyLossConfig, kl: KLConfig) -> LossSpec:
    """The objective of the ``loss`` and ``kl`` config sections, bound through the registries.

    The aggregation is the loss config's own (every loss config is a :class:`PolicyLossConfig`,
    which ``POLICY_LOSSES`` checks when the loss registers), and so are its micro-batching needs
    (``needs_groups``, ``zero_advantage_inert``); the KL term's coefficient is the KL config's
    ``coef``, which every KL config declares (``KL_ESTIMATORS``' config base, :class:`KLConfig`).
    """
    use_kl = kl.coef > 0
    return LossSpec(
        policy_loss=POLICY_LOSSES.bind(loss),
        agg=loss.agg,
        norm_constant=loss.norm_constant,
        kl=KL_ESTIMATORS.bind(kl) if use_kl else None,
        kl_coef=kl.coef,
        whole_groups=loss.needs_groups,
        zero_advantage_inert=loss.zero_advantage_inert,
        needs_entropy=loss.needs_entropy,
        rollout_correction=loss.rollout_correction,
        rollout_correction_level=loss.rollout_correction_level,
        rollout_correction_threshold=loss.rollout_correction_threshold,
        stages_per_turn=loss.stages_per_turn,
    )


def plan_options(optim: OptimConfig, spec: LossSpec) -> PlanOptions:
    """How this run's updates group rows into micro-batches (:meth:`RolloutBatch.plan`): the
    ``optim`` section's sizes and the loss's needs. Zero-advantage rollouts are skipped only when
    ``optim.skip_zero_advantage`` is on, no KL term is configured and the loss says such rollouts
    add nothing (``zero_advantage_inert``)."""
    return PlanOptions(
        micro_batch_size=optim.micro_batch_size,
        mini_batch_size=optim.mini_batch_size,
        agg=spec.agg,
        skip_zero=optim.skip_zero_advantage and spec.kl is None and spec.zero_advantage_inert,
        max_tokens=optim.micro_batch_tokens,
        whole_groups=spec.whole_groups,
    )


@dataclass
class ChunkResult:
    """Detached figures of one micro-batch, weighted for averaging."""

    weight: float
    loss: float
    metrics: dict[str, float] = field(default_factory=dict)
    entropy_sum: float = 0.0
    entropy_tokens: int = 0
    mismatch: MismatchStats | None = None
    #: the importance ratio's sum and sum of squares over the trained tokens (its spread)
    ratio_sum: float = 0.0
    ratio_sq_sum: float = 0.0
    ratio_tokens: int = 0
    ratio_max: float = 1.0


def chunk_loss(
    model: torch.nn.Module,
    micro: MicroBatch,
    spec: LossSpec,
    *,
    old_logprobs: Tensor | None = None,
    reference: torch.nn.Module | None = None,
    entropy: bool = False,
    pass_index: int = 0,
    passes: int = 1,
    history: list[Tensor] | None = None,
    keep_old: list[Tensor] | None = None,
    ratios: list[Tensor] | None = None,
) -> tuple[LossOutput, Tensor | None, Tensor, MismatchStats | None]:
    """Loss of one micro-batch: ``(loss output, entropy [n, R] or None, token mask [n, R],
    rollout mismatch or None)``.

    ``micro`` holds its rows' packed tokens and advantages (:meth:`RolloutBatch.micro_batches`).
    ``old_logprobs`` ``[n, R]`` are the behaviour policy's; ``None`` means the batch is exactly on
    policy (one policy epoch, weights unchanged since generation) and the current
    log-probabilities, detached, stand in for them: the ratio is 1 and its gradient the policy
    gradient.

    When the rollouts carry the backend's log-probs (``micro.rollout_logprobs``), their mismatch
    with the trainer's pre-update log-probs (``old``) over the trained tokens is measured
    (:func:`~framework.algorithms.losses.rollout_correction.mismatch_stats`), and with
    ``spec.rollout_correction`` on, the importance weights
    (:func:`~framework.algorithms.losses.rollout_correction.correction_weights`) go to the loss as
    ``PolicyLossInputs.token_weights``.

    ``history`` (a loss with ``stages_per_turn``): this micro-batch's log-probs at the start of
    each earlier pass, oldest first; the loss gets them as ``PolicyLossInputs.earlier_logprobs``
    and this pass's, detached, are appended.

    ``keep_old``: the old log-probs this micro-batch used are appended to it (an on-policy first
    pass keeps its own, detached, as the behaviour log-probs of the update's later passes).
    ``ratios``: the importance ratio ``exp(logp - old)`` of the trained tokens, detached and
    flattened, is appended to it.

    Raises:
        ValueError: a correction is configured but a trained rollout has no backend log-probs;
            ``micro`` carries no advantages.
    """
    if micro.advantages is None:
        raise ValueError("chunk_loss() needs a micro-batch with advantages")
    device = next(model.parameters()).device
    tokens = micro.tokens.to(device)
    logp, ent = token_logprobs(model, tokens, entropy=entropy or spec.needs_entropy)
    old = logp.detach() if old_logprobs is None else old_logprobs.to(device)
    if keep_old is not None:
        keep_old.append(old)
    inputs = PolicyLossInputs(
        logprobs=logp,
        old_logprobs=old,
        advantages=micro.advantages.to(device),
        token_mask=tokens.loss_mask,
        sample_mask=micro.sample_mask.to(device),
        group_index=micro.group_index.to(device),
        extras={k: v.to(device) if isinstance(v, Tensor) else v for k, v in micro.extras.items()},
        entropy=ent if spec.needs_entropy else None,
        turn_index=None if micro.turn_index is None else micro.turn_index.to(device),
        pass_index=pass_index,
        passes=passes,
        earlier_logprobs=() if history is None else tuple(history),
    )
    if history is not None:
        history.append(logp.detach())
    mismatch = _rollout_correction(inputs, micro.rollout_logprobs, spec)
    if ratios is not None:
        ratios.append((logp.detach() - old).exp()[inputs.effective_mask().bool()])
    out = spec.policy_loss(inputs)
    if spec.kl is not None and spec.kl_coef > 0 and reference is not None:
        with torch.no_grad():
            ref_logp, _ = token_logprobs(reference, tokens)
        out = add_kl_penalty(
            out,
            spec.kl(logp, ref_logp),
            inputs.effective_mask(),
            coef=spec.kl_coef,
            agg=spec.agg,
            norm_constant=spec.norm_constant,
        )
    return out, ent if entropy else None, inputs.effective_mask(), mismatch


def _rollout_correction(
    inputs: PolicyLossInputs, behav: Tensor | None, spec: LossSpec
) -> MismatchStats | None:
    """Measure the rollout/trainer mismatch of a micro-batch (``behav``: the backend's log-probs
    in the packed layout, :attr:`MicroBatch.rollout_logprobs`) and, with a correction
    configured, set ``inputs.token_weights``; None when the rollouts carry no backend log-probs."""
    mask = inputs.effective_mask()
    if behav is None:
        if spec.rollout_correction != "none":
            raise ValueError(
                f"[loss.rollout_correction] got {spec.rollout_correction!r}; expected the rollout "
                "backend's log-probs on every trained rollout, but some of this batch have none "
                "(rollout.decoder=generate records none). Fix: use rollout.decoder=loop or "
                "rollout=vllm, or set loss.rollout_correction=none."
            )
        return None
    old, behav = inputs.old_logprobs.detach(), behav.to(mask.device)
    correction = None
    if spec.rollout_correction != "none":
        correction = correction_weights(
            old,
            behav,
            mask,
            mode=spec.rollout_correction,
            level=spec.rollout_correction_level,
            threshold=spec.rollout_correction_threshold,
        )
        inputs.token_weights = correction.weights.to(inputs.logprobs.dtype)
    return mismatch_stats(
        old, behav, mask, threshold=spec.rollout_correction_threshold, correction=correction
    )


@torch.no_grad()
def behaviour_logprobs(
    model: torch.nn.Module, micro: Sequence[MicroBatch], *, pad_id: int = 0, extra: int = 0
) -> list[Tensor]:
    """Log-probabilities of every micro-batch under the current weights (before any update);
    ``extra`` more forward passes of one ``pad_id`` token, whose output is dropped (a sharded
    policy: every process runs as many forwards as the busiest one)."""
    device = next(model.parameters()).device
    out = [token_logprobs(model, m.tokens.to(device))[0].detach() for m in micro]
    for _ in range(extra):
        zero_loss(model, pad_id)
    return out


def run_update_pass(
    model: torch.nn.Module,
    micro: Sequence[MicroBatch],
    weights: Sequence[float],
    spec: LossSpec,
    backward: Callable[[Tensor], None],
    *,
    pad_id: int,
    old_logprobs: list[Tensor] | None = None,
    reference: torch.nn.Module | None = None,
    entropy: bool = True,
    extra_passes: int = 0,
    pass_index: int = 0,
    passes: int = 1,
    history: list[list[Tensor]] | None = None,
    keep_old: list[Tensor] | None = None,
    ratio_spread: bool = False,
) -> dict[str, float]:
    """Accumulate the gradient of the whole batch's loss over its micro-batches (``weights``: the
    plan's accumulation weights, :meth:`~framework.rl.batch.RolloutBatch.plan`).

    ``pass_index`` is the optimisation pass over the batch, of ``passes``
    (``PolicyLossInputs.pass_index``, for losses that train in stages). ``extra_passes`` adds
    backward passes of an exactly-zero loss (a ``pad_id`` token through the model): under data
    parallelism every process must run as many backward passes (each one synchronises gradients)
    as the busiest one. ``history``: per micro-batch, its log-probs at the start of the earlier
    passes (a loss with ``stages_per_turn``; :func:`chunk_loss`), extended by this pass.

    Returns:
        The batch loss and weighted means of the loss metrics (``clip_frac``, ``approx_kl``, ``kl``,
        ...), plus ``entropy`` (token mean over the trained tokens of the chunks seen) and, when the
        rollouts carry backend log-probs, the ``rollout_mismatch_*`` figures (and with a
        correction ``rollout_correction_frac`` / ``_weight_mean``) over the same tokens.
    """
    results = []
    for k, (m, w) in enumerate(zip(micro, weights, strict=True)):
        seen: list[Tensor] | None = [] if ratio_spread else None
        out, ent, mask, mismatch = chunk_loss(
            model,
            m,
            spec,
            old_logprobs=None if old_logprobs is None else old_logprobs[k],
            reference=reference,
            entropy=entropy,
            pass_index=pass_index,
            passes=passes,
            history=None if history is None else history[k],
            keep_old=keep_old,
            ratios=seen,
        )
        backward(out.loss * w)
        res = ChunkResult(w, float(out.loss.detach()) * w, mismatch=mismatch)
        res.metrics = {k2: float(v) for k2, v in out.metrics.items()}
        if ent is not None:
            res.entropy_sum = float(ent[mask].sum())
            res.entropy_tokens = int(mask.sum())
        if seen:
            r = seen[0].double()
            res.ratio_sum, res.ratio_sq_sum = float(r.sum()), float((r * r).sum())
            res.ratio_tokens = int(r.numel())
            res.ratio_max = float(r.max()) if r.numel() else 1.0
        results.append(res)
    for _ in range(extra_passes):
        backward(zero_loss(model, pad_id))
    out_figures = summarize(results)
    if ratio_spread:
        out_figures.update(ratio_figures(results))
    return out_figures


def ratio_figures(results: Sequence[ChunkResult]) -> dict[str, float]:
    """The importance ratio's token mean, standard deviation (population) and maximum over the
    trained tokens of ``results`` (1, 0 and 1 when no token was trained)."""
    n = sum(r.ratio_tokens for r in results)
    if n == 0:
        return {"ratio_token_mean": 1.0, "ratio_std": 0.0, "ratio_max": 1.0}
    mean = sum(r.ratio_sum for r in results) / n
    var = max(sum(r.ratio_sq_sum for r in results) / n - mean * mean, 0.0)
    top = max(r.ratio_max for r in results if r.ratio_tokens)
    return {"ratio_token_mean": mean, "ratio_std": var**0.5, "ratio_max": top}


def zero_loss(model: torch.nn.Module, pad_id: int) -> Tensor:
    """A loss of exactly 0 connected to every parameter (one token through the model)."""
    device = next(model.parameters()).device
    out = model(input_ids=torch.full((1, 1), pad_id, dtype=torch.long, device=device))
    return out.logits.sum() * 0.0


def summarize(results: Sequence[ChunkResult]) -> dict[str, float]:
    """The batch loss (sum of weighted chunk losses) and weight-averaged chunk metrics."""
    total_w = sum(r.weight for r in results)
    out = {"policy_loss": sum(r.loss for r in results)}
    names = {k for r in results for k in r.metrics}
    for name in sorted(names):
        if total_w > 0:
            out[name] = sum(r.metrics.get(name, 0.0) * r.weight for r in results) / total_w
    tokens = sum(r.entropy_tokens for r in results)
    if tokens:
        out["entropy"] = sum(r.entropy_sum for r in results) / tokens
    parts = [r.mismatch for r in results if r.mismatch is not None]
    if parts:
        out.update(sum(parts, MismatchStats()).figures())
    return out


def turn_count(micro: Sequence[MicroBatch]) -> int:
    """The most model turns of any rollout in ``micro`` (at least 1; a micro-batch that records no
    turns counts as one turn)."""
    counts = [int(m.turn_index.max()) + 1 for m in micro if m.turn_index is not None]
    return max([1, *counts])


@torch.no_grad()
def mean_entropy(model: torch.nn.Module, micro: MicroBatch) -> float | None:
    """Token-mean entropy over the generated tokens of ``micro`` (a collapse indicator)."""
    device = next(model.parameters()).device
    tokens = micro.tokens.to(device)
    _, ent = token_logprobs(model, tokens, entropy=True)
    mask = tokens.loss_mask.bool()
    return float(ent[mask].mean()) if ent is not None and mask.any() else None


def policy_update(
    model: torch.nn.Module,
    plan: UpdatePlan,
    spec: LossSpec,
    optimizer: Optimizer | LightningOptimizer,
    scheduler: LRScheduler,
    optim: OptimConfig,
    *,
    backward: Callable[[Tensor], None] = Tensor.backward,
    reference: torch.nn.Module | None = None,
    pad_passes: Callable[[int], int] | None = None,
) -> dict[str, float]:
    """The update of one RL step: ``optim.policy_epochs`` passes over the planned PPO
    mini-batches, one optimiser step per mini-batch.

    One mini-batch of the whole batch (``optim.mini_batch_size=0``, the default) makes one
    optimiser step per epoch. With several (:attr:`UpdatePlan.spans`), each epoch steps the
    optimiser once per mini-batch in batch order (PPO / verl's ``ppo_mini_batch_size``), so every
    mini-batch after the first is trained off policy and the importance ratio and PPO's clip act.
    The behaviour log-probabilities come from one pass before any update, when a later pass is
    off policy; the first mini-batch's first pass is on policy and keeps its own log-probs
    (detached) instead, so a fully on-policy update (one mini-batch, one epoch) makes no
    behaviour pass at all. The learning-rate schedule advances once per epoch, whatever the
    number of mini-batches. Each pass accumulates its micro-batches' gradient, clips it and
    steps the optimiser; the Lightning module passes its ``manual_backward``; plain torch
    callers keep the default.

    A loss with ``stages_per_turn`` (SeeUPO) gets one pass per model turn instead (the most turns
    of any planned rollout; under data parallelism the most of any process, through
    ``pad_passes``), each an optimiser step on policy (its ratio against the pass's own start), with
    the log-probs of the earlier passes kept for the loss (:func:`run_update_pass`); the scheduler
    steps once for the whole update, as it does for one policy epoch. Its figures add
    ``turn_stages`` and the last stage's loss figures (``last_stage_<name>``). The train config
    refuses it with mini-batches.

    Args:
        plan: the step's micro-batches, their weights and mini-batches
            (:meth:`RolloutBatch.plan`).
        optim: the ``optim`` section (policy_epochs, grad_clip).
        pad_passes: given this process's count (of micro-batches in a pass, or of mini-batches),
            how many to add so that every process runs as many as the busiest one (data
            parallelism: see :func:`run_update_pass`); None adds none.

    Returns:
        The first epoch's loss figures (with several mini-batches, the first mini-batch's, and
        per mini-batch ``k`` of the first epoch ``mini<k>_clip_frac``, ``mini<k>_ratio_std``,
        ``mini<k>_ratio_max`` and ``mini<k>_policy_loss``, plus ``mini_batches`` and
        ``optimizer_steps``), ``grad_norm`` (before clipping), ``nonfinite_grad`` (passes whose
        non-finite gradient was skipped), ``entropy``, ``trained_rollouts`` and
        ``advantage_abs_mean``. When the trajectories carry rollout log-probs, also the first
        epoch's ``rollout_mismatch_kl_mean`` / ``_kl_max`` / ``_frac_beyond`` (the trainer's
        pre-update log-probs against the rollout backend's, over the trained tokens) and, with
        ``loss.rollout_correction`` on, ``rollout_correction_frac`` / ``_weight_mean``.
    """
    o, micro = optim, plan.micro
    spans = plan.mini_spans
    # a sharded policy's every forward is a collective: forwards outside the accumulated passes
    # (behaviour log-probs, the entropy probe) are padded to the busiest process's count too
    lockstep = pad_passes if pad_passes is not None and is_sharded(model) else None
    if spec.stages_per_turn and plan.mini_batched:
        raise ValueError(
            "[optim.mini_batch_size] got a mini-batch size; expected 0 with a loss that trains "
            "turn by turn (stages_per_turn). Fix: set optim.mini_batch_size=0."
        )
    if plan.mini_batched and pad_passes is not None:  # every process steps as often
        spans = spans + [(len(micro), len(micro))] * pad_passes(len(spans))
    # per mini-batch, the zero-loss passes that match the busiest process's micro-batches
    extras = [pad_passes(b - a) if pad_passes is not None else 0 for a, b in spans]
    old: list[Tensor] | None = None
    kept: list[Tensor] | None = None  # the first mini-batch's own log-probs, kept on its pass
    passes: int = o.policy_epochs
    history: list[list[Tensor]] | None = None
    if spec.stages_per_turn:
        passes = turn_count(micro)
        passes += pad_passes(passes) if pad_passes is not None else 0
        history = [[] for _ in micro]
    elif len(spans) > 1:  # later mini-batches are off policy: one behaviour pass for them
        first = spans[0][1]
        kept = []
        old = behaviour_logprobs(
            model, micro[first:], pad_id=plan.pad_id, extra=_more(lockstep, len(micro) - first)
        )
    elif o.policy_epochs > 1:  # later epochs are off policy: keep the behaviour log-probs
        old = behaviour_logprobs(
            model, micro, pad_id=plan.pad_id, extra=_more(lockstep, len(micro))
        )
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    figures: dict[str, float] = {}
    nonfinite = 0  # passes whose gradient was not finite (their optimiser step is skipped)
    many = len(spans) > 1
    for epoch in range(passes):
        for k, (a, b) in enumerate(spans):
            optimizer.zero_grad(set_to_none=True)
            if old is None:
                mine = None
            elif kept is not None and k == 0:  # the first mini-batch: on policy at epoch 0
                mine = None if epoch == 0 else kept
            else:
                start = spans[0][1] if kept is not None else 0
                mine = old[a - start : b - start]
            stats = run_update_pass(
                model,
                micro[a:b],
                plan.weights[a:b],
                spec,
                backward,
                pad_id=plan.pad_id,
                old_logprobs=mine,
                reference=reference,
                entropy=epoch == 0 and k == 0,
                extra_passes=extras[k],
                pass_index=epoch,
                passes=passes,
                history=None if history is None else history[a:b],
                keep_old=kept if (kept is not None and k == 0 and epoch == 0) else None,
                ratio_spread=many,
            )
            norm = _clip_and_step(params, optimizer, o.grad_clip)
            nonfinite += 0 if bool(torch.isfinite(norm)) else 1
            if epoch == 0 and k == 0:
                figures = dict(stats, grad_norm=float(norm))
            elif history is not None and epoch == passes - 1:  # a stage loss: its last stage too
                figures.update({f"last_stage_{n}": v for n, v in stats.items() if n != "entropy"})
            if epoch == 0 and many:
                figures.update(_mini_figures(k, stats))
        if history is None or epoch == passes - 1:
            scheduler.step()
    model.eval()
    probe = plan.probe if "entropy" not in figures else None  # nothing trained: measure anyway
    if probe is not None:
        ent = mean_entropy(model, probe)
        if ent is not None:
            figures["entropy"] = ent
    with torch.no_grad():
        for _ in range(_more(lockstep, int(probe is not None))):
            zero_loss(model, plan.pad_id)
    if history is not None:
        figures["turn_stages"] = float(passes)
    if many:
        figures["mini_batches"] = float(len(spans))
        figures["optimizer_steps"] = float(len(spans) * passes)
    figures["nonfinite_grad"] = float(nonfinite)
    figures["trained_rollouts"] = float(plan.rollouts - plan.skipped)
    figures["advantage_abs_mean"] = plan.advantage_abs_mean
    return figures


def _more(pad_passes: Callable[[int], int] | None, mine: int) -> int:
    """The passes to add to this process's ``mine`` (0 without ``pad_passes``)."""
    return pad_passes(mine) if pad_passes is not None else 0


def _clip_and_step(
    params: Sequence[Tensor], optimizer: Optimizer | LightningOptimizer, grad_clip: float
) -> Tensor:
    """Clip the accumulated gradient to ``grad_clip`` (0: no limit) and step the optimiser;
    a non-finite gradient is dropped instead (it would poison the weights; the health monitor
    stops the run). Returns the gradient norm before clipping."""
    grads = [p for p in params if p.grad is not None]
    limit = grad_clip if grad_clip > 0 else float("inf")
    norm = torch.nn.utils.clip_grad_norm_(grads, limit) if grads else torch.zeros(())
    if bool(torch.isfinite(norm)):
        optimizer.step()
    else:
        optimizer.zero_grad(set_to_none=True)
    return norm


def _mini_figures(k: int, stats: dict[str, float]) -> dict[str, float]:
    """Mini-batch ``k``'s figures of the first epoch: its loss, clip fraction and ratio spread."""
    names = ("policy_loss", "clip_frac", "ratio_std", "ratio_max")
    return {f"mini{k}_{n}": stats[n] for n in names if n in stats}
