"""REINFORCE++ with a baseline: the group's mean subtracted, then normalised over the batch."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from framework.algorithms.advantages.grpo import _float_rewards
from framework.algorithms.stats.group import group_center
from framework.config import ComponentConfig, Problem, check, option
from framework.registry.kinds import ADVANTAGES
from framework.types import AdvantageInputs


@dataclass
class ReinforcePPBaselineConfig(ComponentConfig):
    epsilon: float = option(1e-6, "added to the batch std")
    whiten: bool = option(True, "normalise over the whole batch")
    clip: float = option(0.0, "clamp the advantages to [-clip, clip]; 0: no clamp")

    def problems(self) -> list[Problem]:
        return check(
            self.epsilon >= 0, "epsilon", self.epsilon, "a number >= 0", "use 1e-6"
        ) + check(self.clip >= 0, "clip", self.clip, "a number >= 0", "use 0 (no clamp) or 3")


@ADVANTAGES.register("reinforce_pp_baseline", config=ReinforcePPBaselineConfig)
def reinforce_pp_baseline_advantage(
    inputs: AdvantageInputs, *, cfg: ReinforcePPBaselineConfig
) -> Tensor:
    """REINFORCE++ with baseline: ``r - mean_g r``, then whitened over the whole batch.

    Hu et al. (arXiv 2501.03262). Whitening is over rollouts (each counted once), not tokens: the
    batch mean of ``r - mean_g r`` is already 0, so this divides by the batch std (Bessel). With
    ``clip`` > 0 the result is clamped to ``[-clip, clip]`` (SeeUPO's code clamps at 3).

    Args:
        inputs: ``rewards [N]``, ``group_index [N]``.
        cfg: the estimator's config.

    Returns:
        ``[N]`` advantages.
    """
    centered = group_center(_float_rewards(inputs), inputs.group_index)
    out = centered
    if cfg.whiten:
        std = centered.std() if centered.numel() > 1 else centered.new_zeros(())
        if std == 0:  # every group constant: nothing to learn, and epsilon = 0 must not give NaN
            return torch.zeros_like(centered)
        out = (centered - centered.mean()) / (std + cfg.epsilon)
    return out.clamp(-cfg.clip, cfg.clip) if cfg.clip > 0 else out
