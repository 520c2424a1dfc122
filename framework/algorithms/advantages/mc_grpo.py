"""MC-GRPO: GRPO's group statistics replaced by the median and the median absolute deviation.

As every group-level estimator (MC-GRPO, NGRPO, A-GRAE), it takes
:class:`~framework.types.AdvantageInputs` and its config and returns ``[N]`` float advantages, one
per rollout, computed with tensor operations over the groups of ``group_index`` (ids need not be
contiguous, groups may differ in size). As in :mod:`framework.algorithms.advantages.grpo`, rollouts
masked out of the loss (over budget) still count in the group statistics.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from framework.algorithms.advantages.grpo import _float_rewards
from framework.algorithms.stats.group import (
    group_median,
    group_min,
    group_size,
    group_sum,
)
from framework.config import ComponentConfig, Problem, check_range, option
from framework.registry.kinds import ADVANTAGES
from framework.types import AdvantageInputs


@dataclass
class MCGRPOAdvantageConfig(ComponentConfig):
    epsilon: float = option(1e-3, "added to the group MAD before dividing (the paper's code: 1e-3)")
    compensate_zeros: bool = option(
        False,
        "the public code's extra step: multiply a group's nonzero advantages by "
        "group size / number of nonzero ones (not in the formula; off by default)",
    )

    def problems(self) -> list[Problem]:
        return check_range(
            self.epsilon,
            "epsilon",
            low=0.0,
            low_inclusive=False,
            fix="use a small positive epsilon such as 1e-3 (binary rewards give a MAD of 0)",
        )


@ADVANTAGES.register("mc_grpo", config=MCGRPOAdvantageConfig)
def mc_grpo_advantage(inputs: AdvantageInputs, *, cfg: MCGRPOAdvantageConfig) -> Tensor:
    """MC-GRPO: ``A_i = (r_i - median_g r) / (MAD_g + eps)``, ``MAD_g = median_g |r - median_g r|``.

    Kim 2026, "MC-GRPO: Median-Centered Group Relative Policy Optimization for Small-Rollout
    Reinforcement Learning", arXiv 2601.22582 (https://arxiv.org/abs/2601.22582); code
    https://github.com/lotusroot-kim/MC-GRPO. The method samples ``G + 1`` rollouts per question
    (``conf/algorithm/mc_grpo.yaml`` sets the sampler's ``group_size`` to 9), centres on the group
    median instead of the mean and scales by the median absolute deviation instead of the std.

    Choices:

    - Median: the lower median (``torch.median``'s convention, as the paper's code), so it is one
      of the group's own rewards. With the odd ``G + 1`` groups the method is meant for it is the
      unique middle value; with an even group it is the lower of the two middle values. MAD is the
      lower median of ``|r - median|`` the same way.
    - Pivot: every rollout whose reward equals the median gets exactly 0 (``r - median`` is
      computed exactly), so the pivot, the one rollout the paper leaves out of backpropagation,
      contributes no policy gradient. :func:`mc_grpo_pivot` names exactly one pivot per group (the
      first rollout in batch order whose reward is the median) for a trainer that wants to drop it
      from the loss's denominators too; this estimator only returns advantages, so a pivot kept in
      the batch still counts in a per-rollout mean (a factor ``G / (G + 1)``) and in a KL term.
    - Binary rewards: in an odd group more than half the rewards equal the median, so the MAD is
      0 and ``|A| = 1 / eps = 1000`` on the minority rollouts, 0 on the majority (the paper's code
      does the same); Adam and gradient-norm clipping absorb most of that scale.
    - ``compensate_zeros`` (off by default) reproduces the public code's extra rescaling of the
      nonzero advantages by ``group size / count of nonzero advantages``; the paper's formula and
      the registry table (METHODS.md) do not have it.

    A constant group gets 0 everywhere (its deviations are all 0), never NaN: ``epsilon`` must
    be positive.

    Args:
        inputs: ``rewards [N]``, ``group_index [N]``.
        cfg: the estimator's config.

    Returns:
        ``[N]`` advantages; 0 on every rollout whose reward equals its group's median.
    """
    r = _float_rewards(inputs)
    gi = inputs.group_index
    deviation = r - group_median(r, gi)  # exactly 0 where r equals the median
    mad = group_median(deviation.abs(), gi)
    adv = deviation / (mad + cfg.epsilon)
    if cfg.compensate_zeros:
        nonzero = group_sum((adv != 0).to(r), gi)
        scale = group_size(gi).to(r) / nonzero.clamp(min=1.0)
        adv = torch.where(nonzero > 0, adv * scale, adv)
    return adv


def mc_grpo_pivot(rewards: Tensor, group_index: Tensor) -> Tensor:
    """``[N]`` bool, true on each group's MC-GRPO pivot: exactly one rollout per group.

    The pivot is the first rollout in batch order whose reward equals the group's lower median
    (:func:`~framework.algorithms.stats.group.group_median`); :func:`mc_grpo_advantage` gives it 0.
    A trainer can drop it from the loss so that ``G`` of the ``G + 1`` rollouts carry gradient.
    """
    at_median = rewards == group_median(rewards, group_index)
    position = torch.arange(rewards.numel(), device=rewards.device)
    candidate = torch.where(at_median, position, torch.full_like(position, rewards.numel()))
    return position == group_min(candidate, group_index)
