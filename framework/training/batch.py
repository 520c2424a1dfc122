"""The batch an advantage estimator receives: rewards, and everything the trainer knows per rollout."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from framework.data.schema import QAItem
from framework.rollout.scoring import dataset_columns
from framework.rollout.types import Trajectory
from framework.training.tokens import response_mask
from framework.types import AdvantageInputs


def advantage_inputs(
    trajectories: Sequence[Trajectory], items: Sequence[QAItem], rewards: Tensor
) -> AdvantageInputs:
    """:class:`AdvantageInputs` of a scored batch; ``items[t.group]`` is each rollout's question.

    Args:
        trajectories: the batch's ``N`` rollouts, grouped.
        items: the question of each group.
        rewards: ``[N]`` each rollout's total reward.

    Returns:
        Rewards (float), group index, token mask ``[N, L]`` (generated response tokens, ``L`` the
        longest response), sample mask (over-budget rollouts out), turn index ``[N, L]``, turns in
        response positions, the loop's stats and every dataset column.
    """
    return AdvantageInputs(
        rewards=rewards.float(),
        group_index=torch.tensor([t.group for t in trajectories], dtype=torch.long),
        token_mask=response_mask(trajectories),
        sample_mask=torch.tensor([t.status != "over_budget" for t in trajectories]),
        turn_index=turn_index(trajectories),
        turns=[[turn.shifted(-t.prompt_len) for turn in t.turns] for t in trajectories],
        stats=[dict(t.stats) for t in trajectories],
        columns=dataset_columns([items[t.group] for t in trajectories]),
    )


def turn_index(trajectories: Sequence[Trajectory]) -> Tensor:
    """``[N, L]`` long: per response token the model turn it belongs to (a tool response belongs to
    the turn that called the tool); -1 on padding and in rollouts that recorded no turns.

    Same layout as :func:`~framework.training.tokens.response_mask`.
    """
    width = response_mask(trajectories).shape[1]
    index = torch.full((len(trajectories), width), -1, dtype=torch.long)
    for i, t in enumerate(trajectories):
        p = t.prompt_len
        for k, turn in enumerate(t.turns):
            index[i, turn.start - p : turn.end - p] = k
            if turn.observation is not None:
                index[i, turn.observation[0] - p : turn.observation[1] - p] = k
    return index


def per_rollout(advantages: Tensor, token_mask: Tensor | None) -> Tensor:
    """``[N]``: the advantages themselves, or for ``[N, L]`` each rollout's mean over its
    generated tokens (``token_mask``; 0 without any)."""
    if advantages.dim() == 1 or token_mask is None:
        return advantages
    m = token_mask.float()
    return (advantages * m).sum(-1) / m.sum(-1).clamp(min=1)


def check_advantages(advantages: Tensor, inputs: AdvantageInputs, name: str) -> Tensor:
    """``advantages`` as float, after checking that they are ``[N]`` or ``[N, L]``.

    Raises:
        ValueError: another shape, naming the estimator and both accepted shapes.
    """
    n = len(inputs.rewards)
    width = inputs.token_mask.shape[1] if inputs.token_mask is not None else None
    shape = tuple(advantages.shape)
    if shape != (n,) and (width is None or shape != (n, width)):
        per_token = f" or [N, L] = ({n}, {width})" if width is not None else ""
        raise ValueError(
            f"[advantage.{name}] got advantages of shape {shape}; expected [N] = ({n},)"
            f"{per_token}, L being the width of inputs.token_mask. Fix: return one advantage "
            "per rollout, or one per response token in the layout of inputs.token_mask."
        )
    return advantages.float()
