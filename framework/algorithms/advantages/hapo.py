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

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.advantages.grpo import GRPOAdvantageConfig, grpo_advantage
from framework.algorithms.stats.group import group_sum
from framework.config import ComponentConfig, Problem, check_range, option
from framework.registry import ADVANTAGES
from framework.types import AdvantageInputs

PAPER = "HAPO: From Uniform to Heterogeneous, arXiv 2507.21848 (id from its code's README)"


@dataclass
class HAPOAdvantageConfig(ComponentConfig):
    paper: ClassVar[str] = PAPER
    #: the fallback test reads the trained tokens only, the code every padded position
    #: (hapo_advantage's docstring): the two differ whenever a rollout is shorter than the width
    fidelity: ClassVar[str] = "partial"

    epsilon: float = option(1e-6, "added to the token-weighted std")
    fallback: float = option(5.0, "a group with any |A| >= this falls back to GRPO (code: 5)")

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
