"""Group-level advantage estimators beyond GRPO: MC-GRPO, NGRPO and A-GRAE.

Each takes :class:`~framework.types.AdvantageInputs` and its config and returns ``[N]`` float
advantages, one per rollout, computed with tensor operations over the groups of ``group_index``
(ids need not be contiguous, groups may differ in size). As in :mod:`framework.algorithms.advantages`,
rollouts masked out of the loss (over budget) still count in the group statistics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from framework.algorithms.advantages import GRPOAdvantageConfig, _float_rewards, grpo_advantage
from framework.algorithms.group import (
    group_max,
    group_mean,
    group_median,
    group_min,
    group_size,
    group_sum,
)
from framework.config import ComponentConfig, Problem, check, check_range
from framework.registry.kinds import ADVANTAGES
from framework.types import AdvantageInputs

# --------------------------------------------------------------------------- MC-GRPO


@dataclass
class MCGRPOAdvantageConfig(ComponentConfig):
    epsilon: float = field(
        default=1e-3,
        metadata={"help": "added to the group MAD before dividing (the paper's code: 1e-3)"},
    )
    compensate_zeros: bool = field(
        default=False,
        metadata={
            "help": "the public code's extra step: multiply a group's nonzero advantages by "
            "group size / number of nonzero ones (not in the formula; off by default)"
        },
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
    (:func:`~framework.algorithms.group.group_median`); :func:`mc_grpo_advantage` gives it 0.
    A trainer can drop it from the loss so that ``G`` of the ``G + 1`` rollouts carry gradient.
    """
    at_median = rewards == group_median(rewards, group_index)
    position = torch.arange(rewards.numel(), device=rewards.device)
    candidate = torch.where(at_median, position, torch.full_like(position, rewards.numel()))
    return position == group_min(candidate, group_index)


# --------------------------------------------------------------------------- NGRPO


@dataclass
class NGRPOAdvantageConfig(ComponentConfig):
    virtual_reward: float = field(
        default=1.0,
        metadata={"help": "reward of the virtual rollout: the task's maximum reward"},
    )
    num_virtual: int = field(
        default=1,
        metadata={"help": "virtual rollouts added to each group's statistics (paper: 1; 0 = GRPO)"},
    )
    epsilon: float = field(default=1e-6, metadata={"help": "added to the std before dividing"})
    unbiased_std: bool = field(
        default=True,
        metadata={"help": "Bessel-corrected std over the G + num_virtual values (paper's code)"},
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
    ``num_virtual = 0`` is exactly :func:`~framework.algorithms.advantages.grpo_advantage`.
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


# --------------------------------------------------------------------------- A-GRAE


@dataclass
class AGRAEAdvantageConfig(ComponentConfig):
    scale_by_std: bool = field(
        default=True,
        metadata={"help": "base advantage is GRPO's (r - mean)/std; false: Dr. GRPO's r - mean"},
    )
    epsilon: float = field(
        default=1e-6,
        metadata={"help": "added to the std and to the difficulty weights' denominators"},
    )
    unbiased_std: bool = field(
        default=True, metadata={"help": "Bessel-corrected group std (n - 1), as torch.std"}
    )
    correct_threshold: float = field(
        default=1.0,
        metadata={"help": "a rollout counts as correct for the batch accuracy when reward >= this"},
    )
    positive_alpha: float = field(
        default=1.0,
        metadata={
            "help": "positive advantages are scaled by min(1, batch accuracy / positive_alpha) "
            "(the paper's code: 1 for math, 0.5 for geo3k and medical)"
        },
    )
    suppress_positive: bool = field(
        default=True, metadata={"help": "scale positive advantages down by the batch accuracy"}
    )
    difficulty_curriculum: bool = field(
        default=True,
        metadata={"help": "weight groups from easy to hard as the batch accuracy grows"},
    )

    def problems(self) -> list[Problem]:
        out = check_range(
            self.epsilon,
            "epsilon",
            low=0.0,
            low_inclusive=False,
            fix="use a small positive epsilon such as 1e-6 (it keeps the difficulty weights finite)",
        )
        out += check_range(
            self.positive_alpha,
            "positive_alpha",
            low=0.0,
            low_inclusive=False,
            fix="set positive_alpha to 1.0 (the paper's code for math) or 0.5",
        )
        out += check(
            math.isfinite(self.correct_threshold),
            "correct_threshold",
            self.correct_threshold,
            "a finite number",
            "set correct_threshold to the reward of a correct answer (1.0 for the outcome reward)",
        )
        return out


@ADVANTAGES.register("a_grae", config=AGRAEAdvantageConfig)
def a_grae_advantage(inputs: AdvantageInputs, *, cfg: AGRAEAdvantageConfig) -> Tensor:
    """A-GRAE: GRPO's advantage, reweighted by group difficulty and with positives suppressed early.

    Yu et al. 2026, "Unveiling Implicit Advantage Symmetry: Why GRPO Struggles with Exploration and
    Difficulty Adaptation", arXiv 2602.05548 (https://arxiv.org/abs/2602.05548); code
    https://github.com/Yu7-code/A-GRAE. METHODS.md marks the schedule loose; the paper's method
    section could not be read here, so the formula and constants are those of the authors' public
    code (``compute_grpo_outcome_advantage``, its A-GRAE branch), restated::

        A0_i  = (r_i - mu_g) / (std_g + eps)          GRPO (r_i - mu_g when scale_by_std is off)
        acc   = mean over the batch's rollouts of [r >= correct_threshold]
        s_g   = sqrt(clamp(mu_g, 0, 1))               mu_g: the group's mean reward
        w_g   = 0.5 (1 - acc) / (1 - s_g + eps)  +  0.5 acc / (s_g + eps)
        A_i   = w_g A0_i
        A_i  *= min(1, acc / positive_alpha)          only where A_i > 0

    The first term of ``w_g`` grows with the group's success rate (easy focus), the second falls
    with it (hard focus); the batch accuracy moves the mix from easy to hard as training succeeds
    (``w = 1`` at ``mu_g = 1/4`` whatever ``acc``). Positive advantages are scaled by the batch
    accuracy: small early (exploration: correct rollouts are reinforced less than wrong ones are
    penalised), full once ``acc >= positive_alpha``. Both steps keep each advantage's sign, and a
    constant group stays exactly 0.

    Choices and differences from the code:

    - ``acc`` is the batch accuracy, the share of rollouts with ``reward >= correct_threshold``;
      the code uses the mean of the group mean rewards. They agree for 0/1 rewards and equal group
      sizes; with partial credit (E-GRPO's ``alpha * gamma``) ours counts only correct answers.
    - ``mu_g`` is the mean reward, as in the code (for 0/1 rewards the group's success rate); it is
      clamped to [0, 1], the range the weights assume, so rewards should lie in [0, 1].
    - Stateless: the code's step schedule of its switch (``grpo_weight`` decaying from 2 to 1, with
      A-GRAE applied when it equals 2.0) is not reproduced; A-GRAE's own schedule is carried by
      ``acc``, which this estimator computes from the batch it is given.
    - A group of one gets 0 (GRPO's convention here), not the code's ``r / (1 + eps)``.

    Args:
        inputs: ``rewards [N]``, ``group_index [N]``.
        cfg: the estimator's config.

    Returns:
        ``[N]`` advantages, each of the sign of (or 0 with) GRPO's.
    """
    r = _float_rewards(inputs)
    base_cfg = GRPOAdvantageConfig(
        name="grpo",
        scale_by_std=cfg.scale_by_std,
        epsilon=cfg.epsilon,
        unbiased_std=cfg.unbiased_std,
    )
    adv = grpo_advantage(inputs, cfg=base_cfg)
    if r.numel() == 0:
        return adv
    acc = (r >= cfg.correct_threshold).to(r).mean()
    if cfg.difficulty_curriculum:
        s = group_mean(r, inputs.group_index).clamp(0.0, 1.0).sqrt()
        weight = 0.5 * (1.0 - acc) / (1.0 - s + cfg.epsilon) + 0.5 * acc / (s + cfg.epsilon)
        adv = adv * weight
    if cfg.suppress_positive:
        scale = torch.clamp(acc / cfg.positive_alpha, max=1.0)
        adv = torch.where(adv > 0, adv * scale, adv)
    return adv
