"""A-GRAE: GRPO's advantage reweighted per group by the batch's accuracy."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from framework.algorithms.advantages.grpo import GRPOAdvantageConfig, _float_rewards, grpo_advantage
from framework.algorithms.stats.group import (
    group_mean,
)
from framework.config import Problem, check, check_range, option
from framework.registry.kinds import ADVANTAGES
from framework.types import AdvantageInputs


@dataclass
class AGRAEAdvantageConfig(GRPOAdvantageConfig):
    """GRPO's fields (the base advantage) and the reweighting's."""

    epsilon: float = option(1e-6, "added to the std and to the difficulty weights' denominators")
    correct_threshold: float = option(
        1.0, "a rollout counts as correct for the batch accuracy when reward >= this"
    )
    positive_alpha: float = option(
        1.0,
        "positive advantages are scaled by min(1, batch accuracy / positive_alpha) "
        "(the paper's code: 1 for math, 0.5 for geo3k and medical)",
    )
    suppress_positive: bool = option(True, "scale positive advantages down by the batch accuracy")
    difficulty_curriculum: bool = option(
        True, "weight groups from easy to hard as the batch accuracy grows"
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
    adv = grpo_advantage(inputs, cfg=cfg)
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
