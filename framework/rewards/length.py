"""Length rewards: DAPO's soft overlong penalty, a term to add to the main reward.

DAPO (Yu et al. 2025, arXiv 2503.14476) adds to the rule-based reward a penalty that grows
linearly over the last ``L_cache`` tokens before the length limit ``L_max``. Combine it with the
main reward through ``weighted_sum``::

    reward:
      name: weighted_sum
      terms:
        - {name: outcome, weight: 1.0}
        - {name: overlong, weight: 1.0, max_length: 1024, cache_length: 256}

What ``|y|`` is for a search agent: the response tokens the policy generated (its thinking, tool
calls and answer; loss mask 1), not the tool responses appended between turns. Retrieved text is
the environment's, not the policy's; counting it would penalise a rollout for what the retriever
returned and for calling tools at all, and would duplicate the rollout budget
(``rollout.max_total_tokens``), which already ends over-long rollouts. The count comes from
:attr:`~framework.types.RewardInputs.generated_tokens`, which
:func:`~framework.rollout.scoring.reward_inputs` fills from each trajectory's loss mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from framework.algorithms.rewards.shaping import overlong_penalty
from framework.config import ComponentConfig, Problem, check, check_range, option
from framework.registry.kinds import REWARDS
from framework.types import RewardInputs


@dataclass
class OverlongRewardConfig(ComponentConfig):
    max_length: int = option(
        1024, "L_max: generated tokens (tool responses excluded) beyond which the penalty is -1"
    )
    cache_length: int = option(
        256, "L_cache: the window before L_max over which the penalty falls 0 -> -1"
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.max_length, "max_length", low=1)
        out += check(
            isinstance(self.cache_length, int) and 1 <= self.cache_length <= self.max_length,
            "cache_length",
            self.cache_length,
            f"an integer in [1, max_length={self.max_length}]",
            "set cache_length to the width of the penalty window (DAPO: L_max / 5)",
        )
        return out


@REWARDS.register("overlong", config=OverlongRewardConfig)
def overlong_reward(inputs: RewardInputs, *, cfg: OverlongRewardConfig) -> Tensor:
    """DAPO's soft overlong penalty on the number of generated tokens.

    ``0`` for ``|y| <= L_max - L_cache``; ``((L_max - L_cache) - |y|) / L_cache`` inside the cache
    window; ``-1`` beyond ``L_max`` (:func:`~framework.algorithms.rewards.shaping.overlong_penalty`). ``|y|``
    counts the policy's own response tokens, tool responses excluded (see the module docstring).
    The penalty applies whatever the rollout's status and answer.

    Args:
        inputs: ``generated_tokens`` per rollout.
        cfg: ``L_max`` and ``L_cache``.

    Returns:
        ``[N]`` penalties in ``[-1, 0]``.

    Raises:
        ValueError: the batch carries no ``generated_tokens``, or not one per rollout.
    """
    counts = inputs.generated_tokens
    if counts is None or len(counts) != len(inputs):
        got = None if counts is None else f"{len(counts)} values"
        raise ValueError(
            f"[reward.overlong] got generated_tokens={got} for {len(inputs)} rollouts; expected "
            "one token count per rollout. Fix: build the batch with "
            "framework.rollout.scoring.reward_inputs, or pass RewardInputs(generated_tokens=...)."
        )
    lengths = torch.tensor([int(c) for c in counts], dtype=torch.long)
    return overlong_penalty(lengths, cfg.max_length, cfg.cache_length)
