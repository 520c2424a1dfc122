"""HAPO, "From Uniform to Heterogeneous" (Heterogeneous Adaptive Policy Optimization; arXiv
2507.21848 per its code's README): tokens are not alike, and their entropy decides how much
advantage each gets, how far its ratio may move, and how rollouts are compared.

Formulas from the authors' code (github.com/starriver030515/HAPO, ``core_algos.py``), as
``../shared/METHODS-2.md`` item 9 restates them:

- token-level group average (``advantage=hapo``): a group's mean and std over its *tokens* (each
  rollout's reward counted once per trained token), with GRPO as the group's fallback when any of
  its advantages reaches 5 in magnitude;
- entropy score: ``x = log max(H, 1e-8)`` over the micro-batch's trained tokens, centred on its 0.8
  quantile (nearest rank) and scaled by the root mean square of the centred values, then divided
  by its largest positive value (``h > 0``) or by the magnitude of its most negative one
  (``h < 0``), so ``ĥ`` lies in ``[-1, 1]``;
- asymmetric adaptive clipping and differential advantage redistribution (``loss=hapo``), with
  PPO's dual clip (c = 10); ``algorithm=hapo`` reduces it with ``agg=token_mean``, the code's
  ``loss_agg_mode="token-mean"`` (every recipe), not the framework's default
  ``seq_mean_token_mean``.

Readings and omissions (why both fidelities are "partial"): the released code divides negative
scores by ``min(h)`` itself, which flips their sign; we read that as a slip and divide by
``|min(h)|`` (the loss). Its fallback test runs over every position of the padded response width,
where an untrained position (padding, a tool response) holds ``(0 - μ) / (σ + eps)``, so those
positions can trigger it; ours reads the trained tokens only, i.e. the advantages of the rollouts
that have tokens (the advantage; see :func:`hapo_advantage`), and falls back to verl's GRPO with the
unbiased std as the code does. The adaptive sampling temperature ``T (1 + 0.05 ĥ)`` needs a patched
sampler and is not implemented: rollouts use the configured temperature.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.advantages import GRPOAdvantageConfig, grpo_advantage
from framework.algorithms.aggregation import aggregate, masked_mean
from framework.algorithms.group import group_sum
from framework.algorithms.losses import (
    ClipLossConfig,
    _masked_inputs,
    dual_clip,
    require_entropy,
)
from framework.config import ComponentConfig, Problem, check_range
from framework.registry import ADVANTAGES
from framework.registry.kinds import POLICY_LOSSES
from framework.types import AdvantageInputs, LossOutput, PolicyLossInputs

PAPER = "HAPO: From Uniform to Heterogeneous, arXiv 2507.21848 (id from its code's README)"


@dataclass
class HAPOAdvantageConfig(ComponentConfig):
    paper: ClassVar[str] = PAPER
    #: the fallback test reads the trained tokens only, the code every padded position
    #: (hapo_advantage's docstring): the two differ whenever a rollout is shorter than the width
    fidelity: ClassVar[str] = "partial"

    epsilon: float = field(default=1e-6, metadata={"help": "added to the token-weighted std"})
    fallback: float = field(
        default=5.0, metadata={"help": "a group with any |A| >= this falls back to GRPO (code: 5)"}
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.epsilon, "epsilon", low=0.0)
        return out + check_range(self.fallback, "fallback", low=0.0, low_inclusive=False)


def token_group_advantage(
    rewards: Tensor, lengths: Tensor, group_index: Tensor, epsilon: float = 1e-6
) -> Tensor:
    """``[N]``: ``(r_i - μ) / (σ + eps)`` with the group's mean and (population) std over its
    tokens, rollout ``i`` weighing ``lengths[i]``; 0 for a rollout without tokens (it weighs
    nothing in its group and has no token to carry an advantage), so 0 in a group without tokens."""
    w = lengths.to(rewards.dtype)
    total = group_sum(w, group_index)
    mu = group_sum(w * rewards, group_index) / total.clamp(min=1e-12)
    var = group_sum(w * (rewards - mu) ** 2, group_index) / total.clamp(min=1e-12)
    out = (rewards - mu) / (var.clamp(min=0).sqrt() + epsilon)
    return torch.where((total > 0) & (w > 0), out, torch.zeros_like(out))


@ADVANTAGES.register("hapo", config=HAPOAdvantageConfig)
def hapo_advantage(inputs: AdvantageInputs, *, cfg: HAPOAdvantageConfig) -> Tensor:
    """HAPO's token-level group average (authors' code; the fallback read over trained tokens)::

        L_i = trained tokens of rollout i
        μ_g = Σ L_i r_i / Σ L_i;  σ_g² = Σ L_i (r_i - μ_g)² / Σ L_i
        A_i = (r_i - μ_g) / (σ_g + eps), 0 where L_i = 0
        a group with any |A_i| >= 5 over its rollouts with L_i > 0: GRPO (unbiased std)

    The fallback test reads the trained tokens only: the advantages of the group's rollouts that
    have trained tokens. The authors' code tests every position of the padded response width, and
    an untrained position there (padding, a tool response) holds ``(0 - μ) / (σ + eps)``, so it
    falls back where we do not. G = 16, rewards fifteen 1s and one 0.3, equal lengths shorter than
    the width (METHODS-2.md item 9): μ = 0.95625, σ = 0.16944, so the 0.3 rollout's advantage is
    -3.873 and the largest magnitude 3.873 < 5, no fallback here; the code's padded positions hold
    -0.95625 / 0.16944 = -5.64, so it falls back to GRPO (unbiased std 0.175) and gives that rollout
    -3.75. This reading is why the fidelity is "partial".

    A rollout without trained tokens (L_i = 0) weighs nothing in its group's mean and std, cannot
    trigger the fallback, and gets advantage 0 (it has no token to carry one), whether or not its
    group falls back; GRPO's fallback values for the others still count its reward, as in the
    code. Rewards [1, 0, 0, 0] with lengths [0, 5, 5, 5]: μ = 0, σ = 0, advantages [0, 0, 0, 0]
    (the code gives the same: every trained position holds 0).

    Args:
        inputs: ``rewards [N]``, ``group_index [N]``, ``token_mask [N, L]`` (lengths; without it
            every rollout weighs 1).
        cfg: epsilon and the fallback threshold.

    Returns:
        ``[N]`` advantages.
    """
    r = inputs.rewards if inputs.rewards.is_floating_point() else inputs.rewards.float()
    mask = inputs.token_mask
    lengths = mask.sum(-1) if mask is not None else torch.ones_like(r)
    adv = token_group_advantage(r, lengths, inputs.group_index, cfg.epsilon)  # 0 where L_i = 0
    big = group_sum((adv.abs() >= cfg.fallback).to(r.dtype), inputs.group_index) > 0
    grpo = grpo_advantage(inputs, cfg=GRPOAdvantageConfig(name="grpo", unbiased_std=True))
    out = torch.where(big, grpo.to(adv.dtype), adv)
    return torch.where(lengths > 0, out, torch.zeros_like(out))


@dataclass
class HAPOLossConfig(ClipLossConfig):
    paper: ClassVar[str] = PAPER
    fidelity: ClassVar[str] = "partial"
    needs_entropy: ClassVar[bool] = True

    clip_high: float = field(
        default=0.2, metadata={"help": "ratio upper bound is 1 + clip_high (paper base: 0.2)"}
    )
    alpha: float = field(default=1.0, metadata={"help": "clip adaptation by entropy (code: 1)"})
    beta: float = field(default=1.0, metadata={"help": "advantage redistribution (code: 1)"})
    pivot: float = field(default=0.8, metadata={"help": "entropy quantile of ĥ = 0 (code: 0.8)"})
    dual_clip: float = field(
        default=10.0, metadata={"help": "PPO dual clip c for negative advantages; 0 disables"}
    )

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
