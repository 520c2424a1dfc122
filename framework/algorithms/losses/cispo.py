"""CISPO: the clipped importance weight, stop-gradient, times ``A * log π``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from framework.algorithms.losses.base import PolicyLossConfig, on_policy_ratio_inert
from framework.algorithms.losses.inputs import _approx_kl
from framework.algorithms.losses.ppo_clip import _masked_inputs
from framework.algorithms.stats.aggregation import aggregate, masked_mean
from framework.config import Problem, check_range, option
from framework.config.inert import InertRule
from framework.registry.kinds import POLICY_LOSSES
from framework.types import LossOutput, PolicyLossInputs


@dataclass
class CISPOLossConfig(PolicyLossConfig):
    #: on policy the detached weight clip(1) is 1: PPO-clip's gradient (cispo_loss)
    screen_inert: ClassVar[InertRule] = on_policy_ratio_inert

    clip_low: float = option(
        1.0, "IS weight lower bound is 1 - clip_low (>= 1: no lower bound, MiniMax)"
    )
    clip_high: float = option(0.2, "IS weight upper bound is 1 + clip_high")

    def problems(self) -> list[Problem]:
        out = check_range(self.clip_low, "clip_low", low=0.0, low_inclusive=False)
        out += check_range(self.clip_high, "clip_high", low=0.0, low_inclusive=False)
        return out + super().problems()


@POLICY_LOSSES.register("cispo", config=CISPOLossConfig)
def cispo_loss(inputs: PolicyLossInputs, *, cfg: CISPOLossConfig) -> LossOutput:
    """CISPO (MiniMax 2025, MiniMax-M1, https://arxiv.org/abs/2506.13585, eqs. 4-5).

    Clips the importance-sampling weight, not the update::

        loss_t = -sg(clip(ρ_t, 1 - ε_low, 1 + ε_high)) · A_t · log π_θ(y_t)

    The weight carries no gradient, so every trained token keeps its policy gradient
    ``-ŵ_t A_t ∇log π`` (PPO-clip zeroes the tokens whose ratio left the region); on policy
    (``ρ = 1``) the gradient equals PPO-clip's. MiniMax sets ``ε_low`` large (no lower bound) and
    tunes ``ε_high``; the defaults are ``clip_low = 1`` (lower bound 0, which a ratio never goes
    below) and ``clip_high = 0.2`` (verl's CISPO example). The paper normalises by the batch's
    token count (``agg=token_mean``); ``cfg.agg`` decides here. The loss value (log-probabilities
    weighted by advantages) only serves its gradient.

    Returns:
        Loss and ``clip_frac`` (tokens whose weight was truncated), ``clip_frac_low``,
        ``clip_frac_high``, ``ratio_mean``, ``approx_kl``.
    """
    mask, lp, old, adv = _masked_inputs(inputs)
    log_ratio = lp - old
    ratio = log_ratio.detach().exp()
    low, high = 1.0 - cfg.clip_low, 1.0 + cfg.clip_high
    weight = ratio.clamp(low, high)  # detached: sg(clip(ρ))
    per_token = -weight * adv * lp
    loss = aggregate(per_token, mask, cfg.agg, cfg.norm_constant)
    with torch.no_grad():
        below, above = (ratio < low).float(), (ratio > high).float()
        metrics = {
            "clip_frac": masked_mean(below + above, mask),
            "clip_frac_low": masked_mean(below, mask),
            "clip_frac_high": masked_mean(above, mask),
            "ratio_mean": masked_mean(ratio, mask),
        }
    metrics["approx_kl"] = _approx_kl(log_ratio, mask)
    return LossOutput(loss, metrics)
