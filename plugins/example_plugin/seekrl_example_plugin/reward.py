"""``length_penalized_outcome``: the outcome reward minus a penalty for overly long completions."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from framework.config import ComponentConfig, Problem, check_choice, check_range, option
from framework.registry.kinds import REWARDS
from framework.rewards.common import answer_scores, valid_mask
from framework.rewards.text import ANSWER_METRICS
from framework.types import RewardInputs

NAME = "length_penalized_outcome"


@dataclass
class LengthPenalizedOutcomeConfig(ComponentConfig):
    metric: str = option("em", f"answer score as in reward=outcome: one of {tuple(ANSWER_METRICS)}")
    max_chars: int = option(2000, "completion length in characters that is free of penalty")
    penalty: float = option(0.1, "reward subtracted per 1000 characters beyond max_chars")
    max_penalty: float = option(
        1.0, "cap on the subtracted penalty, so rewards stay >= -max_penalty"
    )

    def problems(self) -> list[Problem]:
        out = check_choice(self.metric, "metric", ANSWER_METRICS)
        out += check_range(
            self.max_chars, "max_chars", low=0, fix="set max_chars to a length >= 0, e.g. 2000"
        )
        out += check_range(self.penalty, "penalty", low=0.0, fix="set penalty >= 0, e.g. 0.1")
        out += check_range(
            self.max_penalty, "max_penalty", low=0.0, fix="set max_penalty >= 0, e.g. 1.0"
        )
        return out


@REWARDS.register(NAME, config=LengthPenalizedOutcomeConfig)
def length_penalized_outcome_reward(
    inputs: RewardInputs, *, cfg: LengthPenalizedOutcomeConfig
) -> Tensor:
    """Outcome reward minus ``penalty`` per 1000 characters of completion beyond ``max_chars``.

    ``r = score * valid - min(max_penalty, penalty * max(0, len(completion) - max_chars) / 1000)``,
    where ``score`` and ``valid`` are those of the built-in ``outcome`` reward. The penalty is linear
    in the excess characters (not rounded to whole thousands) and applies to right and wrong answers
    alike, so among equally correct rollouts the shorter one scores higher.

    Args:
        inputs: completions, ``golden_answers`` column, optional statuses.
        cfg: the answer metric and the length budget.

    Returns:
        ``[N]`` rewards in ``[-max_penalty, 1]``.
    """
    outcome = answer_scores(inputs, cfg.metric, NAME) * valid_mask(inputs)
    lengths = torch.tensor([len(c) for c in inputs.completions], dtype=outcome.dtype)
    excess = (lengths - cfg.max_chars).clamp(min=0)
    return outcome - (cfg.penalty * excess / 1000.0).clamp(max=cfg.max_penalty)
