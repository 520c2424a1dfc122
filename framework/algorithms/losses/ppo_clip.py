"""Policy losses: PPO-clip with asymmetric (clip-higher) bounds, and GSPO's sequence-level ratio.

Both take :class:`~framework.types.PolicyLossInputs` and return a
:class:`~framework.types.LossOutput` to minimise. Tokens outside the effective mask (tool responses,
padding, dropped rollouts) neither change the loss nor receive gradient.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.losses.base import PolicyLossConfig, on_policy_ratio_inert
from framework.algorithms.stats.aggregation import aggregate, masked_mean
from framework.config import Problem, check_range, option
from framework.config.inert import InertRule
from framework.registry.kinds import POLICY_LOSSES
from framework.types import LossOutput, PolicyLossInputs


@dataclass
class ClipLossConfig(PolicyLossConfig):
    """PPO-clip's bounds, and its dual clip (:func:`dual_clip`), which every loss built on
    :func:`_clipped_objective` or :func:`ppo_clip_loss` applies."""

    #: on policy (ratio 1) no bound acts: the plain policy gradient (not inherited: a subclass
    #: that changes the objective declares its own rule or none)
    screen_inert: ClassVar[InertRule] = on_policy_ratio_inert

    clip_low: float = option(0.2, "ratio lower bound is 1 - clip_low")
    clip_high: float = option(0.28, "ratio upper bound is 1 + clip_high (clip-higher, DAPO)")
    dual_clip: float = option(
        0.0,
        "dual clip c (> 1; Ye et al. 2020): where A < 0 a token's loss is at most "
        "-c A (no gradient beyond it); 0 = off",
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.clip_low, "clip_low", low=0.0, high=1.0, low_inclusive=False)
        out += check_range(self.clip_high, "clip_high", low=0.0, low_inclusive=False)
        if self.dual_clip != 0:
            fix = "set dual_clip above 1, e.g. 3 (verl's default), or 0 to turn it off"
            out += check_range(self.dual_clip, "dual_clip", low=1.0, low_inclusive=False, fix=fix)
        return out + super().problems()


def _masked_inputs(inputs: PolicyLossInputs) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(mask, logprobs, old_logprobs, advantages)`` with masked entries zeroed (no NaN/inf).

    The advantages are weighted by ``inputs.token_weights`` (rollout correction), when given.
    For a loss whose per-token term is ``A_t · f(ρ_t)`` or ``min``/``max`` of such terms (every
    clipped surrogate here), a weight ``w_t >= 0`` on ``A_t`` is exactly a weight on the term:
    ``-min(ρ w A, clip(ρ) w A) = w · -min(ρ A, clip(ρ) A)``.
    """
    mask = inputs.effective_mask()
    lp = inputs.logprobs.masked_fill(~mask, 0.0)
    old = inputs.old_logprobs.detach().masked_fill(~mask, 0.0)
    adv = inputs.token_advantages().detach()
    if inputs.token_weights is not None:
        adv = adv * inputs.token_weights.detach().to(adv.dtype)
    adv = adv.masked_fill(~mask, 0.0)
    return mask, lp, old, adv


def require_entropy(inputs: PolicyLossInputs, loss: str) -> Tensor:
    """``inputs.entropy``, detached, for a loss whose config sets ``needs_entropy``.

    Raises:
        ValueError: the inputs carry none (the trainer fills it for such a loss).
    """
    if inputs.entropy is None:
        raise ValueError(
            f"[loss.{loss}] got PolicyLossInputs without entropy; expected the per-token entropy "
            "the trainer computes for a loss whose config sets needs_entropy. Fix: call the loss "
            "through the trainer, or pass entropy=[N, L]."
        )
    return inputs.entropy.detach()


def dual_clip(per_token: Tensor, adv: Tensor, c: float) -> Tensor:
    """Dual-clip PPO (Ye et al. 2020, arXiv 1912.09729): cap the loss of negative-advantage tokens.

    PPO's pessimistic per-token loss ``max(-ρ A, -clip(ρ) A)`` is, where ``A < 0``, ``|A| ρ`` for
    every ``ρ >= 1 - ε_low``: unbounded as the ratio grows, so a token the policy has made far more
    likely than the behaviour policy did (a stale or off-policy sample) can dominate the update.
    Dual clip bounds it where ``A < 0``::

        loss_t = min(max(-ρ A, -clip(ρ) A), -c A)

    i.e. ``|A| min(max(ρ, 1 - ε_low), c)``: the loss stops growing at ``ρ = c``, and a token beyond
    it contributes ``-c A`` with **zero gradient** (the ``min`` takes the constant). Tokens with
    ``A >= 0`` are unchanged (their loss is already bounded by the upper clip), as is every token
    whose ratio is at most ``c``. ``c`` must exceed 1 (verl's ``clip_ratio_c``, default 3; HAPO's
    authors use 10); ``c = 0`` turns it off and returns ``per_token`` itself, bit for bit.

    Args:
        per_token: ``[N, L]`` per-token losses to minimise (PPO's pessimistic bound).
        adv: advantages broadcastable to ``per_token`` (the same ones the loss used, so with the
            rollout-correction weights and any per-token scaling already applied).
        c: the dual-clip constant, ``> 1``, or 0 for off.

    Returns:
        ``[N, L]`` losses, ``per_token`` where ``A >= 0`` or ``c = 0``.
    """
    if c == 0:
        return per_token
    return torch.where(adv < 0, torch.minimum(per_token, -c * adv), per_token)


def _clipped_objective(
    ratio: Tensor,
    adv: Tensor,
    mask: Tensor,
    low: float | Tensor,
    high: float | Tensor,
    cfg: ClipLossConfig,
) -> LossOutput:
    """PPO's pessimistic clipped objective; ``low`` / ``high`` are the clip widths (a number, or
    per-token ``[N, L]`` / per-row ``[N, 1]`` widths, as ETR scales them). With ``cfg.dual_clip``
    set, negative-advantage tokens' losses are capped (:func:`dual_clip`); the metrics then include
    ``dual_clip_frac``, the share of tokens at that cap."""
    unclipped = -adv * ratio  # [N, L]
    # a number or a tensor: clamp takes both (its stub's overloads take one kind at a time)
    clipped = -adv * ratio.clamp(1.0 - low, 1.0 + high)  # type: ignore[arg-type]  # [N, L]
    pessimistic = torch.maximum(unclipped, clipped)  # [N, L] pessimistic bound
    per_token = dual_clip(pessimistic, adv, cfg.dual_clip)  # [N, L]
    loss = aggregate(per_token, mask, cfg.agg, cfg.norm_constant)
    with torch.no_grad():
        r = ratio.detach()
        metrics = {
            "clip_frac": masked_mean((clipped > unclipped).float(), mask),
            "clip_frac_low": masked_mean(((r < 1.0 - low) & (adv < 0)).float(), mask),
            "clip_frac_high": masked_mean(((r > 1.0 + high) & (adv > 0)).float(), mask),
            "ratio_mean": masked_mean(r, mask),
        }
        if cfg.dual_clip != 0:
            metrics["dual_clip_frac"] = masked_mean((per_token < pessimistic).float(), mask)
    return LossOutput(loss, metrics)


@POLICY_LOSSES.register("ppo_clip", config=ClipLossConfig)
def ppo_clip_loss(inputs: PolicyLossInputs, *, cfg: ClipLossConfig) -> LossOutput:
    """PPO-clip with separate lower and upper bounds (clip-higher).

    Per token ``-min(ρ A, clip(ρ, 1 - ε_low, 1 + ε_high) A)`` with ``ρ = exp(logp - old_logp)``
    (Schulman et al. 2017; clip-higher from DAPO, arXiv 2503.14476), reduced by ``cfg.agg``. With
    ``cfg.dual_clip = c > 0`` (off by default) a token with ``A < 0`` loses at most ``-c A``
    (:func:`dual_clip`, Ye et al. 2020).

    Args:
        inputs: ``logprobs``/``old_logprobs``/``token_mask`` ``[N, L]``, ``advantages`` ``[N]`` or
            ``[N, L]``, ``sample_mask`` ``[N]``.
        cfg: bounds and aggregation.

    Returns:
        Loss and metrics ``clip_frac`` (tokens where the clipped term is active), ``clip_frac_low``,
        ``clip_frac_high``, ``ratio_mean``, ``approx_kl`` (k3 estimate of KL(old || new)), and with
        the dual clip on ``dual_clip_frac`` (tokens whose loss it caps).
    """
    mask, lp, old, adv = _masked_inputs(inputs)
    log_ratio = lp - old  # [N, L]
    out = _clipped_objective(log_ratio.exp(), adv, mask, cfg.clip_low, cfg.clip_high, cfg)
    with torch.no_grad():
        out.metrics["approx_kl"] = masked_mean(log_ratio.exp() - 1.0 - log_ratio, mask)
    return out


def with_penalty_term(
    out: LossOutput,
    penalty: Tensor,
    held: Tensor,
    mask: Tensor,
    cfg: ClipLossConfig,
    coef: float,
    name: str,
) -> LossOutput:
    """PPO-clip's ``out`` plus ``coef`` times a token penalty reduced like the loss (``cfg.agg``).

    Args:
        out: :func:`ppo_clip_loss` of the batch.
        penalty: ``[N, L]`` the penalty per token, 0 where it does not act.
        held: ``[N, L]`` bool, the tokens it acts on (for the metric).
        mask: ``[N, L]`` the trained tokens.
        cfg: the loss's config (its ``agg`` and ``norm_constant``).
        coef: the term's weight.
        name: metric prefix: ``<name>_term`` (the reduced term before ``coef``) and
            ``<name>_token_frac`` (share of trained tokens in ``held``) join ``out.metrics``.
    """
    term = aggregate(penalty, mask, cfg.agg, cfg.norm_constant)
    with torch.no_grad():
        out.metrics[f"{name}_term"] = term.detach()
        out.metrics[f"{name}_token_frac"] = masked_mean(held.float(), mask)
    return LossOutput(out.loss + coef * term, out.metrics)
