"""From trajectories to rewards: the batch that reward functions see."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from framework.config import ComponentConfig
from framework.data.schema import QAItem, dataset_columns
from framework.rewards.composite import reward_parts
from framework.types import RewardInputs, Trajectory


def reward_inputs(trajectories: Sequence[Trajectory], items: Sequence[QAItem]) -> RewardInputs:
    """The reward batch of ``trajectories``; ``items[t.group]`` is each rollout's question, whose
    columns (:func:`dataset_columns`) the batch carries. ``generated_tokens`` counts each
    response's trained tokens (loss mask 1), so tool responses are not part of a rollout's length."""
    return RewardInputs(
        group_index=torch.tensor([t.group for t in trajectories], dtype=torch.long),
        completions=[t.response_text for t in trajectories],
        columns=dataset_columns([items[t.group] for t in trajectories]),
        status=[t.status for t in trajectories],
        think_texts=[t.think_text for t in trajectories],
        generated_tokens=[sum(t.loss_mask[t.prompt_len :]) for t in trajectories],
        observations=[turn_observations(t) for t in trajectories],
    )


def turn_observations(trajectory: Trajectory) -> list[str]:
    """Per model turn of ``trajectory`` the evidence its tool response showed the model
    (:attr:`~framework.types.RewardInputs.observations`); ``""`` for a turn without one.

    The evidence is what the tools reported as retrieved when they answered
    (:attr:`~framework.types.TurnSpan.evidence`): passages and pages only, none of what echoes the
    model's own words (query headers, failures, error messages), so a rollout cannot "surface" an
    entity by searching for its name. A hand-built trajectory without it reads as ``""``.
    """
    return [turn.evidence if turn.observation is not None else "" for turn in trajectory.turns]


@dataclass
class Scores:
    """Rewards of a batch: the total, each component, and the extras rewards returned.

    Attributes:
        total: ``[N]`` the reward.
        components: ``[N]`` per component (a single reward is its own only component).
        extras: per-rollout tensors (first dimension ``N``) that rewards returned in a
            :class:`~framework.types.RewardOutput` (``turn_rewards`` ``[N, T]``, ...); the step
            hands them to the advantage estimator as ``AdvantageInputs.extras``.
    """

    total: Tensor
    components: dict[str, Tensor]
    extras: dict[str, Tensor] = field(default_factory=dict)


def score(
    trajectories: Sequence[Trajectory], items: Sequence[QAItem], reward: ComponentConfig
) -> Scores:
    """Rewards of ``trajectories`` under the configured reward, with every component and extra;
    each reward is computed once (a weighted sum's total is summed from its components)."""
    inputs = reward_inputs(trajectories, items)
    total, components, extras = reward_parts(inputs, reward)
    return Scores(total, components, extras)
