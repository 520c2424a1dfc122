"""From trajectories to rewards: the batch that reward functions see."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from framework.config import ComponentConfig
from framework.data.schema import QAItem
from framework.rewards.composite import reward_components
from framework.rollout.types import Trajectory
from framework.types import RewardInputs


def reward_inputs(trajectories: Sequence[Trajectory], items: Sequence[QAItem]) -> RewardInputs:
    """The reward batch of ``trajectories``; ``items[t.group]`` is each rollout's question.

    Columns: ``question``, ``question_id``, ``hops`` and ``golden_answers`` always, ``entities``
    when every question has them.
    """
    rows = [items[t.group] for t in trajectories]
    columns: dict[str, list] = {
        "question": [r.question for r in rows],
        "question_id": [r.id for r in rows],
        "hops": [r.hops for r in rows],
        "golden_answers": [list(r.golden_answers) for r in rows],
    }
    if all(r.entities for r in rows):
        columns["entities"] = [[list(e) for e in r.entities] for r in rows]  # type: ignore[union-attr]
    return RewardInputs(
        group_index=torch.tensor([t.group for t in trajectories], dtype=torch.long),
        completions=[t.response_text for t in trajectories],
        columns=columns,
        status=[t.status for t in trajectories],
        think_texts=[t.think_text for t in trajectories],
    )


@dataclass
class Scores:
    """Rewards of a batch: the total and each component."""

    total: Tensor
    components: dict[str, Tensor]


def score(
    trajectories: Sequence[Trajectory], items: Sequence[QAItem], reward: ComponentConfig
) -> Scores:
    """Rewards of ``trajectories`` under the configured reward, with every component."""
    from framework.registry import REWARDS

    inputs = reward_inputs(trajectories, items)
    return Scores(REWARDS.bind(reward)(inputs), reward_components(inputs, reward))
