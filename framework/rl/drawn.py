"""The rollouts a step drew: trajectories, their questions and their scores, as one unit.

What :func:`~framework.rl.step.draw_groups` returns and a rollout augmenter
(:mod:`framework.rl.augment`) receives and returns, before the step builds its batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from framework.algorithms.stats.padding import pad_to_widest
from framework.data.schema import QAItem
from framework.rollout.scoring import Scores
from framework.types import Trajectory


@dataclass
class Drawn:
    """Rollouts of some groups with their questions and rewards (``items[t.group]`` is a
    rollout's question)."""

    trajectories: list[Trajectory]
    items: list[QAItem]
    scores: Scores

    @staticmethod
    def merge(parts: Sequence[tuple[Drawn, Sequence[bool]]]) -> Drawn:
        """One batch of the groups flagged in each part, renumbered in order."""
        trajs: list[Trajectory] = []
        items: list[QAItem] = []
        rows: list[Tensor] = []
        for part, flags in parts:
            new = {}
            for g, flag in enumerate(flags):
                if flag:
                    new[g] = len(items)
                    items.append(part.items[g])
            picked = [i for i, t in enumerate(part.trajectories) if t.group in new]
            trajs += [
                replace(part.trajectories[i], group=new[part.trajectories[i].group]) for i in picked
            ]
            rows.append(torch.tensor(picked, dtype=torch.long))
        scores = [p.scores for p, _ in parts]
        total = torch.cat([s.total[r] for s, r in zip(scores, rows, strict=True)])
        components = {
            name: torch.cat([s.components[name][r] for s, r in zip(scores, rows, strict=True)])
            for name in scores[0].components
        }
        extras = {
            name: cat_padded([s.extras[name][r] for s, r in zip(scores, rows, strict=True)])
            for name in scores[0].extras
        }
        return Drawn(trajs, items, Scores(total, components, extras))


def cat_padded(parts: Sequence[Tensor]) -> Tensor:
    """``parts`` concatenated along the first dimension, each zero-padded at the end of its other
    dimensions to the largest (``[n_j, T_j]`` turn rewards of rounds with different most turns)."""
    return torch.cat(pad_to_widest(parts))
