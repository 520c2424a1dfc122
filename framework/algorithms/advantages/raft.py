"""RAFT: rejection-sampling fine-tuning as a control arm (arXiv 2304.06767).

Described with the placebo in :mod:`framework.algorithms.advantages.placebo`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from framework.config import ComponentConfig, Problem, check_range, option
from framework.registry.kinds import ADVANTAGES
from framework.types import AdvantageInputs


@dataclass
class RAFTAdvantageConfig(ComponentConfig):
    threshold: float = option(1.0, "a rollout is accepted (advantage 1) at this reward or above")

    def problems(self) -> list[Problem]:
        return check_range(self.threshold, "threshold", low=0.0, low_inclusive=False)


@ADVANTAGES.register("raft", config=RAFTAdvantageConfig)
def raft_advantage(inputs: AdvantageInputs, *, cfg: RAFTAdvantageConfig) -> Tensor:
    """RAFT (arXiv 2304.06767): ``A_i = 1[r_i >= threshold]``; no baseline, so rejected rollouts get
    no gradient.

    Args:
        inputs: ``rewards [N]``.
        cfg: the acceptance threshold.

    Returns:
        ``[N]`` advantages of 0 and 1.
    """
    r = inputs.rewards
    dtype = r.dtype if r.is_floating_point() else torch.get_default_dtype()
    return (r >= cfg.threshold).to(dtype)
