"""HAPO's loss (``loss=hapo``): entropy-adaptive clipping and advantage redistribution.

The method, its formulas and its readings: :mod:`framework.algorithms.advantages.hapo`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.advantages.hapo import PAPER
from framework.algorithms.losses.ppo_clip import (
    ClipLossConfig,
    _masked_inputs,
    dual_clip,
    require_entropy,
)
from framework.algorithms.stats.aggregation import aggregate, masked_mean
from framework.config import Problem, check_range, option
from framework.registry.kinds import POLICY_LOSSES
from framework.types import LossOutput, PolicyLossInputs


@dataclass
class HAPOLossConfig(ClipLossConfig):
    paper: ClassVar[str] = PAPER
    fidelity: ClassVar[str] = "partial"
    needs_entropy: ClassVar[bool] = True

    clip_high: float = option(0.2, "ratio upper bound is 1 + clip_high (paper base: 0.2)")
    alpha: float = option(1.0, "clip adaptation by entropy (code: 1)")
    beta: float = option(1.0, "advantage redistribution (code: 1)")
    pivot: float = option(0.8, "entropy quantile of ĥ = 0 (code: 0.8)")
    dual_clip: float = option(10.0, "PPO dual clip c for negative advantages; 0 disables")

    def problems(self) -> list[Problem]:
        out = check_range(self.alpha, "alpha", low=0.0)
        out += check_range(self.beta, "beta", low=0.0)
        out += check_range(self.pivot, "pivot", low=0.0, high=1.0)
        return out + super().problems()  # dual_clip is checked there (ClipLossConfig)


def entropy_scores(entropy: Tensor, mask: Tensor, pivot: float = 0.8) -> Tensor:
    """``[N, L]`` ``ĥ`` in ``[-1, 1]`` over the trained tokens (0 elsewhere; module docstring)."""
    m = mask.bool()
    out = torch.zeros_like(entropy, dtype=torch.float64)
    if not m.any():
        return out.to(entropy.dtype)
    x = entropy.double()[m].clamp(min=1e-8).log()
    q = x.sort().values[round(pivot * (x.numel() - 1))]
    centred = x - q
    scale = centred.pow(2).mean().sqrt()
    h = centred / scale if scale > 0 else torch.zeros_like(centred)
    top, bottom = h.max(), h.min()
    h = torch.where(h > 0, h / top if top > 0 else h, h)
    h = torch.where(h < 0, h / bottom.abs() if bottom < 0 else h, h)
    out[m] = h
    return out.to(entropy.dtype)


def clip_widths(scores: Tensor, low: float, high: float, alpha: float) -> tuple[Tensor, Tensor]:
    """Per token ``(ε_low', ε_high')``: ``ε_low (1 - α ĥ)`` where ``ĥ <= 0``, ``ε_high (1 + α ĥ)``
    where ``ĥ > 0``, the configured widths otherwise."""
    lo = torch.where(scores <= 0, low * (1 - alpha * scores), torch.full_like(scores, low))
    hi = torch.where(scores > 0, high * (1 + alpha * scores), torch.full_like(scores, high))
    return lo, hi


def redistributed(
    adv: Tensor, ratio: Tensor, scores: Tensor, lo: Tensor, hi: Tensor, beta: float
) -> Tensor:
    """The advantage each token trains with: ``A' = A (1 + β ĥ)`` outside the neutral zone
    ``(1 - ε_low'/2, 1 + ε_high'/2)`` for a high-entropy token (``ĥ > 0``, ``A`` inside it), and
    inside the zone for a low-entropy one (``A`` outside it)."""
    boosted = adv * (1 + beta * scores)
    r = ratio.detach()
    inside = (r > 1 - lo / 2) & (r < 1 + hi / 2)
    return torch.where(
        scores > 0, torch.where(inside, adv, boosted), torch.where(inside, boosted, adv)
    )


@POLICY_LOSSES.register("hapo", config=HAPOLossConfig)
def hapo_loss(inputs: PolicyLossInputs, *, cfg: HAPOLossConfig) -> LossOutput:
    """HAPO's loss (authors' code; ``ĥ`` from this micro-batch's entropies, module docstring)::

        ε_low' = ε_low (1 - α ĥ) if ĥ <= 0;  ε_high' = ε_high (1 + α ĥ) if ĥ > 0
        A' = A (1 + β ĥ), used outside (ĥ > 0) or inside (ĥ <= 0) 1 - ε_low'/2 < ρ < 1 + ε_high'/2
        per token: -min(ρ Â, clip(ρ, 1 - ε_low', 1 + ε_high') Â), at most -c Â where Â < 0

    Raises:
        ValueError: the inputs carry no entropy (the trainer fills it: ``needs_entropy``).
    """
    entropy = require_entropy(inputs, "hapo")
    mask, lp, old, adv = _masked_inputs(inputs)
    scores = entropy_scores(entropy, mask, cfg.pivot).to(lp.dtype)
    lo, hi = clip_widths(scores, cfg.clip_low, cfg.clip_high, cfg.alpha)
    ratio = (lp - old).exp()
    eff = redistributed(adv, ratio, scores, lo, hi, cfg.beta).masked_fill(~mask, 0.0)
    unclipped = -eff * ratio
    clipped = -eff * torch.minimum(torch.maximum(ratio, 1 - lo), 1 + hi)
    per_token = dual_clip(torch.maximum(unclipped, clipped), eff, cfg.dual_clip)
    loss = aggregate(per_token, mask, cfg.agg, cfg.norm_constant)
    with torch.no_grad():
        metrics = {
            "clip_frac": masked_mean((clipped > unclipped).float(), mask),
            "ratio_mean": masked_mean(ratio.detach(), mask),
            "entropy_score_mean": masked_mean(scores, mask),
            "approx_kl": masked_mean(ratio.detach() - 1.0 - (lp - old).detach(), mask),
        }
    return LossOutput(loss, metrics)
