"""S-GRPO: serial-group decaying rewards for early exits (arXiv 2505.07686), for search agents.

One rollout and its early exits form a *serial group*: after each of the rollout's turns that got a
tool response, the policy is made to answer at once (``<answer>`` is forced after the tool response
and one turn is generated), and the full rollout is the last exit. The ``k``-th *correct* exit
counting from the front gets ``2^-(k-1)``, a wrong one 0, and the advantage is the reward minus the
serial group's mean (no std). Earlier correct exits earn more, so the policy learns when it has
searched enough. Each exit trains on its own tokens: the kept turns of the rollout and its answer.

Choices (METHODS-2 item 10; the formula is the paper's, "exact"): an exit is "answer now" after a
turn's tool response (search agents have no end-of-thinking marker to append; the forced text is
``<answer>``, trained with loss mask 0); every rollout of the sampled group spawns its own serial
group (so a question gives ``G`` serial groups, and the parallel comparison between rollouts is not
made); correctness is the reward's answer metric (the ``early_exits`` augmenter marks it in
``exit_correct``); exits are ordered by the number of turns they kept (``exit_position``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.stats.group import group_center
from framework.config import ComponentConfig
from framework.registry import ADVANTAGES
from framework.types import AdvantageInputs


def serial_rewards(correct: Tensor, position: Tensor, group_index: Tensor) -> Tensor:
    """``[N]``: ``2^-(k-1)`` for the ``k``-th correct exit of its serial group counted by
    ``position`` (ascending), 0 for a wrong exit."""
    out = torch.zeros(correct.shape[0], dtype=torch.get_default_dtype())
    for g in group_index.unique().tolist():
        rows = (group_index == g).nonzero().flatten()
        rows = rows[torch.argsort(position[rows], stable=True)]
        k = 0
        for r in rows.tolist():
            if bool(correct[r]):
                out[r] = 2.0 ** (-k)
                k += 1
    return out


@dataclass
class SGRPOAdvantageConfig(ComponentConfig):
    requires: ClassVar[tuple[str, ...]] = ("exit_position", "exit_correct")
    paper: ClassVar[str] = "S-GRPO: serial-group decaying reward for early exit, arXiv 2505.07686"
    fidelity: ClassVar[str] = "exact"


@ADVANTAGES.register("s_grpo", config=SGRPOAdvantageConfig)
def s_grpo_advantage(inputs: AdvantageInputs, *, cfg: SGRPOAdvantageConfig) -> Tensor:
    """``A_j = r_j - mean(r)`` over each serial group, ``r_j = 2^-(k-1)`` for the ``k``-th correct
    exit from the front (module docstring); ``[N]``."""
    position, right = inputs.extras.get("exit_position"), inputs.extras.get("exit_correct")
    if position is None or right is None:
        raise ValueError(
            "[advantage.s_grpo] got no extras['exit_position'] / ['exit_correct']; expected the "
            "early_exits augmenter's. Fix: set augment=early_exits (the s_grpo bundle does)."
        )
    r = serial_rewards(right.bool(), position, inputs.group_index)
    return group_center(r, inputs.group_index)
