"""Per-rollout facts that several rewards need: answers, correctness, validity."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from framework.rewards.text import answer_metric, extract_answer
from framework.types import STATUS_OK, STATUSES, RewardInputs


def require_column(inputs: RewardInputs, column: str, reward: str, why: str) -> Sequence[Any]:
    """The dataset column ``column`` aligned with the rollouts.

    Raises:
        ValueError: the column is missing or has the wrong length, with what to do about it.
    """
    values = inputs.columns.get(column)
    if values is None:
        raise ValueError(
            f"[reward.{reward}] got a batch without the '{column}' column; expected it because "
            f"{why}. Fix: use a dataset that has '{column}' or choose another reward."
        )
    if len(values) != len(inputs):
        raise ValueError(
            f"[reward.{reward}] got {len(values)} '{column}' values for {len(inputs)} rollouts; "
            "expected one per rollout. Fix: repeat each question's column G times (one per rollout)."
        )
    return values


def answers(inputs: RewardInputs) -> list[str | None]:
    """The final answer of each rollout, ``None`` when it has no ``<answer>`` block."""
    return [extract_answer(c) for c in inputs.completions]


def answer_scores(inputs: RewardInputs, metric: str, reward: str) -> Tensor:
    """``[N]`` answer score per rollout by ``metric`` of
    :data:`~framework.rewards.text.ANSWER_METRICS` (em / substring give 0 or 1, f1 gives the token
    F1); 0 for a rollout without an answer."""
    golds = require_column(inputs, "golden_answers", reward, "answers are scored against them")
    score = answer_metric(metric, "reward.metric").score
    scores = []
    for pred, gold in zip(answers(inputs), golds, strict=True):
        gold = [gold] if isinstance(gold, str) else list(gold)
        scores.append(0.0 if pred is None else float(score(pred, gold)))
    return torch.tensor(scores, dtype=torch.get_default_dtype())


def valid_mask(inputs: RewardInputs) -> Tensor:
    """``[N]`` bool: the rollout ended in an answer, without format error or budget overrun.

    Without a status from the rollout engine, a completion with no ``<answer>`` block counts as a
    format error.
    """
    has_answer = [a is not None for a in answers(inputs)]
    if inputs.status is None:
        return torch.tensor(has_answer, dtype=torch.bool)
    unknown = sorted({s for s in inputs.status if s not in STATUSES})
    if unknown:
        raise ValueError(
            f"[rollout.status] got {unknown}; expected values in {list(STATUSES)}. "
            "Fix: report one of those statuses per rollout."
        )
    ok = [s == STATUS_OK and h for s, h in zip(inputs.status, has_answer, strict=True)]
    return torch.tensor(ok, dtype=torch.bool)
