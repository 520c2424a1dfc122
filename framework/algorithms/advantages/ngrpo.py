"""NGRPO: GRPO whose group statistics include virtual rollouts of a fixed reward."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from framework.algorithms.advantages.grpo import _float_rewards
from framework.algorithms.stats.group import (
    group_max,
    group_min,
    group_size,
    group_sum,
)
from framework.config import ComponentConfig, Problem, check, check_range, option
from framework.registry.kinds import ADVANTAGES
from framework.types import AdvantageInputs


@dataclass
class NGRPOAdvantageConfig(ComponentConfig):
    virtual_reward: float = option(1.0, "reward of the virtual rollout: the task's maximum reward")
    num_virtual: int = option(
        1, "virtual rollouts added to each group's statistics (paper: 1; 0 = GRPO)"
    )
    epsilon: float = option(1e-6, "added to the std before dividing")
    unbiased_std: bool = option(
        True, "Bessel-corrected std over the G + num_virtual values (paper's code)"
    )

    def problems(self) -> list[Problem]:
        out = check(
            math.isfinite(self.virtual_reward),
            "virtual_reward",
            self.virtual_reward,
            "a finite number",
            "set virtual_reward to the task's maximum reward (1.0 for a 0/1 outcome reward)",
        )
        out += check(
            self.num_virtual >= 0,
            "num_virtual",
            self.num_virtual,
            "an integer >= 0",
            "set num_virtual to 1 (the paper); 0 turns NGRPO into GRPO",
        )
        out += check_range(
            self.epsilon, "epsilon", low=0.0, fix="set epsilon to a small number such as 1e-6"
        )
        return out


@ADVANTAGES.register("ngrpo", config=NGRPOAdvantageConfig)
def ngrpo_advantage(inputs: AdvantageInputs, *, cfg: NGRPOAdvantageConfig) -> Tensor:
    """NGRPO advantage calibration: GRPO statistics over the group plus a virtual max-reward rollout.

    Nan et al. 2025, "NGRPO: Negative-enhanced Group Relative Policy Optimization", arXiv
    2509.18851 (https://arxiv.org/abs/2509.18851); code https://github.com/nangongrui-ngr/NGRPO.
    With ``m = num_virtual`` virtual rollouts of reward ``v = virtual_reward`` (paper: one, of the
    maximum reward 1), over the ``G + m`` values ``{r_1..r_G, v × m}``::

        mu    = (Σ_j r_j + m v) / (G + m)
        sigma = sqrt((Σ_j (r_j - mu)² + m (v - mu)²) / (G + m - 1))     (Bessel, as torch.std)
        A_i   = (r_i - mu) / (sigma + eps)                               for the G real rollouts

    The virtual rollouts only enter ``mu`` and ``sigma``; they get no advantage. So an all-wrong
    group gets negative advantages (``mu > r_i``) instead of GRPO's zeros, an all-correct group
    (every ``r_i = v``) gets exactly 0, and the real advantages of a group sum to
    ``-m (v - mu) / (sigma + eps) <= 0`` rather than 0. The paper pairs it with an asymmetric clip
    (0.16 low / 0.24 high in its code: ``conf/loss/ngrpo.yaml``).

    Choices: a group of one rollout gets its statistics over ``{r, v}`` like any other group (the
    paper's code, inherited from verl's GRPO, instead uses mean 0 and std 1 for a single rollout);
    ``num_virtual = 0`` is exactly :func:`~framework.algorithms.advantages.grpo.grpo_advantage`.
    Rewards above ``virtual_reward`` are not rejected, but then the virtual rollout is no longer
    the maximum and the calibration loses its meaning.

    Args:
        inputs: ``rewards [N]``, ``group_index [N]``.
        cfg: the estimator's config.

    Returns:
        ``[N]`` advantages.
    """
    r = _float_rewards(inputs)
    gi = inputs.group_index
    m, v = float(cfg.num_virtual), float(cfg.virtual_reward)
    total = group_size(gi).to(r) + m
    mean = (group_sum(r, gi) + m * v) / total
    deviation = r - mean
    sum_sq = group_sum(deviation * deviation, gi) + m * (v - mean) ** 2
    denom = (total - 1.0).clamp(min=1.0) if cfg.unbiased_std else total
    std = torch.where(total > 1, sum_sq / denom, torch.zeros_like(sum_sq)).clamp(min=0).sqrt()
    # all G + m values equal (checked exactly: a float mean of eight 0.3s is not exactly 0.3)
    gmax = group_max(r, gi)
    constant = gmax == group_min(r, gi)
    if m > 0:
        constant &= gmax == v
    zero = constant | (std == 0)
    return torch.where(zero, torch.zeros_like(r), deviation / (std + cfg.epsilon))
