"""RLOO: the leave-one-out baseline (each rollout against the mean of its group's others)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from framework.algorithms.advantages.grpo import _float_rewards
from framework.algorithms.stats.group import group_center, group_size
from framework.config import ComponentConfig
from framework.registry.kinds import ADVANTAGES
from framework.types import AdvantageInputs


@dataclass
class RLOOAdvantageConfig(ComponentConfig):
    pass


@ADVANTAGES.register("rloo", config=RLOOAdvantageConfig)
def rloo_advantage(inputs: AdvantageInputs, *, cfg: RLOOAdvantageConfig) -> Tensor:
    """RLOO: ``A_i = r_i - mean_{j != i} r_j = G/(G-1) (r_i - mean_g r)``.

    Ahmadian et al. 2024 (arXiv 2402.14740). A group of one has no baseline and gets 0.

    Args:
        inputs: ``rewards [N]``, ``group_index [N]``.
        cfg: unused (no hyperparameters).

    Returns:
        ``[N]`` advantages.
    """
    r = _float_rewards(inputs)
    n = group_size(inputs.group_index).to(r)
    scale = torch.where(n > 1, n / (n - 1.0).clamp(min=1.0), torch.zeros_like(n))
    return scale * group_center(r, inputs.group_index)
