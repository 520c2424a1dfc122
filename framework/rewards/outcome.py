"""Outcome reward: is the final answer right?"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from framework.config import ComponentConfig, Problem, check_choice, option
from framework.registry.kinds import REWARDS
from framework.rewards.common import answer_scores, valid_mask
from framework.rewards.text import ANSWER_METRICS, verdict_of
from framework.types import RewardInputs


@dataclass
class OutcomeRewardConfig(ComponentConfig):
    metric: str = option(
        "em",
        f"one of {tuple(ANSWER_METRICS)}: em is normalised exact match, f1 the token F1 as reward",
    )

    def problems(self) -> list[Problem]:
        return check_choice(self.metric, "metric", ANSWER_METRICS)

    def verdict_metric(self) -> str | None:
        return verdict_of(self.metric)


@REWARDS.register("outcome", config=OutcomeRewardConfig)
def outcome_reward(inputs: RewardInputs, *, cfg: OutcomeRewardConfig) -> Tensor:
    """GRPO's outcome reward: the answer score, 0 on format error or budget overrun.

    The outcome reward of GRPO (DeepSeekMath, arXiv 2402.03300) and E-GRPO's GRPO arm.

    Args:
        inputs: completions, ``golden_answers`` column, optional statuses.
        cfg: the answer metric.

    Returns:
        ``[N]`` rewards in [0, 1].
    """
    return answer_scores(inputs, cfg.metric, "outcome") * valid_mask(inputs)
