"""``rank``: group-relative advantages from reward ranks, robust to the reward's scale."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from framework.algorithms.stats.group import group_size
from framework.config import ComponentConfig
from framework.registry.kinds import ADVANTAGES
from framework.types import AdvantageInputs


@dataclass
class RankAdvantageConfig(ComponentConfig):
    pass


@ADVANTAGES.register("rank", config=RankAdvantageConfig)
def rank_advantage(inputs: AdvantageInputs, *, cfg: RankAdvantageConfig) -> Tensor:
    """Centered rank of each reward within its group, scaled to ``[-1, 1]``.

    With ``n`` rollouts in the group and 1-based ranks (ties get their average rank),
    ``A_i = (rank_i - (n + 1) / 2) / ((n - 1) / 2)``, which equals
    ``(#{j: r_j < r_i} - #{j: r_j > r_i}) / (n - 1)`` over the rollouts ``j`` of ``i``'s group.
    The group's best rollout gets 1 and its worst -1 (unless tied); each group's advantages sum to
    0. A group of one, or of identical rewards, gets 0. Only the order of rewards matters, not their
    scale.

    The comparison is pairwise over the batch: ``O(N^2)`` memory, fine for the few thousand rollouts
    of a batch.

    Args:
        inputs: ``rewards [N]``, ``group_index [N]``.
        cfg: unused (no hyperparameters).

    Returns:
        ``[N]`` advantages in ``[-1, 1]``.
    """
    r = inputs.rewards.to(torch.get_default_dtype())
    g = inputs.group_index
    same = g.unsqueeze(0) == g.unsqueeze(1)  # [N, N]: j is in i's group
    lower = ((r.unsqueeze(0) < r.unsqueeze(1)) & same).sum(dim=1).to(r)  # r_j < r_i
    higher = ((r.unsqueeze(0) > r.unsqueeze(1)) & same).sum(dim=1).to(r)  # r_j > r_i
    n = group_size(g).to(r)
    return (lower - higher) / (n - 1.0).clamp(min=1.0)
