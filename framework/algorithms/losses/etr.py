"""ETR: PPO-clip whose clip range widens with ``|A|`` and the group's outcome variance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.losses.base import on_policy_ratio_inert
from framework.algorithms.losses.inputs import _approx_kl, _group_index, _row_advantage
from framework.algorithms.losses.ppo_clip import ClipLossConfig, _clipped_objective, _masked_inputs
from framework.algorithms.stats.aggregation import masked_mean
from framework.algorithms.stats.group import group_mean
from framework.config import Problem, check, check_range, option
from framework.config.inert import InertRule
from framework.registry.kinds import POLICY_LOSSES
from framework.types import LossOutput, PolicyLossInputs


@dataclass
class ETRLossConfig(ClipLossConfig):
    needs_groups: ClassVar[bool] = True
    #: on policy (ratio 1) no widened bound acts either: PPO-clip's gradient, summed over
    #: whole-group micro-batches (on_policy_ratio_inert says so)
    screen_inert: ClassVar[InertRule] = on_policy_ratio_inert

    advantage_elasticity: float = option(
        0.25, "alpha: the clip range grows by the factor 1 + alpha * tanh(|A|)"
    )
    variance_elasticity: float = option(
        0.25,
        "kappa: the clip range grows by the factor 1 + kappa * 4 p(1-p), p the "
        "group's share of positive advantages",
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.advantage_elasticity, "advantage_elasticity", low=0.0)
        out += check_range(self.variance_elasticity, "variance_elasticity", low=0.0)
        out += super().problems()
        if out:
            return out
        widest = self.clip_low * (1 + self.advantage_elasticity) * (1 + self.variance_elasticity)
        return check(
            widest < 1.0,
            "clip_low",
            self.clip_low,
            f"clip_low * (1 + advantage_elasticity) * (1 + variance_elasticity) < 1 (got "
            f"{widest:.3g}), so the ratio's lower bound stays positive",
            "lower clip_low or the elasticities",
        )


def etr_clip_scale(inputs: PolicyLossInputs, cfg: ETRLossConfig) -> Tensor:
    """``[N, L]`` factor by which ETR widens both clip bounds of every token (>= 1).

    ``(1 + α·tanh|A_{i,t}|) · (1 + κ·4·p̂_g(1 - p̂_g))`` with ``p̂_g`` the share of rollouts of
    rollout ``i``'s group ``g`` whose advantage is positive; every rollout of the group counts,
    dropped (over-budget) ones included. Entries outside the effective mask are 1. The advantages
    are the unweighted ones: rollout correction's ``token_weights`` scale the loss terms, not the
    trust region.
    """
    mask = inputs.effective_mask()
    adv = inputs.token_advantages().detach().masked_fill(~mask, 0.0)
    groups = _group_index(inputs, "etr")
    row_adv = _row_advantage(inputs).to(adv.dtype)
    share = group_mean((row_adv > 0).to(adv.dtype), groups)  # [N] p̂_g
    variance = 4.0 * share * (1.0 - share)  # [N] in [0, 1], 1 at p̂ = 1/2
    micro = 1.0 + cfg.advantage_elasticity * torch.tanh(adv.abs())  # [N, L]
    macro = 1.0 + cfg.variance_elasticity * variance  # [N]
    return (micro * macro.unsqueeze(-1)).masked_fill(~mask, 1.0)


@POLICY_LOSSES.register("etr", config=ETRLossConfig)
def etr_loss(inputs: PolicyLossInputs, *, cfg: ETRLossConfig) -> LossOutput:
    """ETR: PPO-clip with elastic trust regions (Zhang et al. 2026, "ETR: Outcome-Guided Elastic
    Trust Regions for Policy Optimization", https://arxiv.org/abs/2601.03723).

    The paper widens the clip range per sample with the advantage magnitude (micro level) and per
    group with the variance of the group's pass rate, giving more room to questions in the
    "optimal learning zone" (macro level). Its exact functions and constants were not available
    when this was written (METHODS.md marks them loose); the form chosen here::

        ε_{i,t}^low  = ε_low  · e_{i,t},   ε_{i,t}^high = ε_high · e_{i,t}
        e_{i,t} = (1 + α·tanh|A_{i,t}|) · (1 + κ·4·p̂_g(1 - p̂_g))
        loss_t  = -min(ρ_t A_t, clip(ρ_t, 1 - ε_{i,t}^low, 1 + ε_{i,t}^high) A_t)

    * ``p̂_g`` is the share of the group's rollouts with ``A > 0``: for 0/1 rewards and any
      estimator with a group baseline it is exactly the group's pass rate, so ``4 p̂(1 - p̂)`` is the
      Bernoulli outcome variance scaled to [0, 1] (the loss sees advantages, not rewards). For
      graded rewards it is the share above the group baseline.
    * ``tanh`` saturates the advantage term so a rare outcome's large ``|A|`` cannot open the region
      without bound: ``e <= (1 + α)(1 + κ)``.
    * Defaults ``α = κ = 0.25`` (our choice): with ε = 0.2 / 0.28 the widest region is
      [0.69, 1.44]. ``α = κ = 0`` is exactly ``ppo_clip``.
    * Both bounds widen by the same factor, so clip-higher's asymmetry is kept.

    Args:
        inputs: as ``ppo_clip``, plus ``group_index`` (required).
        cfg: base bounds, elasticities and aggregation.

    Returns:
        Loss and the ``ppo_clip`` metrics (clip fractions against each token's own bounds), plus
        ``clip_scale_mean`` (mean widening factor over trained tokens).

    Raises:
        ValueError: ``inputs.group_index`` is None.
    """
    mask, lp, old, adv = _masked_inputs(inputs)
    scale = etr_clip_scale(inputs, cfg).detach()
    log_ratio = lp - old
    out = _clipped_objective(
        log_ratio.exp(), adv, mask, cfg.clip_low * scale, cfg.clip_high * scale, cfg
    )
    out.metrics["approx_kl"] = _approx_kl(log_ratio, mask)
    out.metrics["clip_scale_mean"] = masked_mean(scale, mask)
    return out
