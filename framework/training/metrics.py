"""What a batch of rollouts looked like, as flat scalars (``rollout/...``) for the logger."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import mean

import torch
from torch import Tensor

from framework.algorithms.group import group_max, group_min
from framework.data.schema import QAItem
from framework.rewards.composite import WeightedSumConfig, term_config
from framework.rewards.entity import EntityRewardConfig, entity_match_rate
from framework.rewards.text import answer_metric, verdict_metrics
from framework.rollout.scoring import Scores
from framework.rollout.tools import tool_stats
from framework.rollout.types import Trajectory


def correctness_metric(reward_cfg: object = None) -> str:
    """The answer metric that decides what a correct answer is, as the reward config says it.

    E-GRPO's ``correctness`` and the outcome reward's ``metric`` (also inside a weighted sum) name
    it. A graded metric (f1) is a reward shape, not a verdict, so it, and a reward that names no
    metric, leaves accuracy at normalised exact match.
    """
    configs = [reward_cfg]
    if isinstance(reward_cfg, WeightedSumConfig):
        configs = [term_config(term)[0] for term in reward_cfg.terms]
    verdicts = verdict_metrics()
    for cfg in configs:
        for field_name in ("correctness", "metric"):
            name = getattr(cfg, field_name, None)
            if name in verdicts:
                return name
    return "em"


def correct(
    trajectories: Sequence[Trajectory], items: Sequence[QAItem], metric: str = "em"
) -> list[bool]:
    """Per rollout: answered within budget and the answer is right by ``metric`` (an entry of
    :data:`~framework.rewards.text.ANSWER_METRICS`; normalised exact match by default)."""
    judge = answer_metric(metric, "reward.correctness")
    return [
        t.status == "ok"
        and t.answer is not None
        and judge.correct(t.answer, items[t.group].golden_answers)
        for t in trajectories
    ]


def match_rates(
    trajectories: Sequence[Trajectory],
    items: Sequence[QAItem],
    cfg: EntityRewardConfig | None = None,
) -> list[float] | None:
    """Per rollout the share of its question's entities named in its thinking (None without entities)."""
    if not all(items[t.group].entities for t in trajectories):
        return None
    cfg = cfg if isinstance(cfg, EntityRewardConfig) else EntityRewardConfig(name="e_grpo")
    return [
        entity_match_rate(t.think_text, items[t.group].entities or [], cfg) for t in trajectories
    ]


def rollout_metrics(
    trajectories: Sequence[Trajectory],
    items: Sequence[QAItem],
    scores: Scores,
    *,
    reward_cfg: object = None,
) -> dict[str, float]:
    """Accuracy, reward and each component, entity match rate, tool use, lengths, failure rates.

    Includes the collapse indicators: response length and the valid-action ratio (valid tool
    calls over all tool calls; rollouts without calls count as fully valid when they answered).
    Accuracy judges answers by the reward's own answer metric (:func:`correctness_metric`).
    """
    n = len(trajectories)
    if n == 0:
        return {}
    out: dict[str, float] = {
        "reward": float(scores.total.float().mean()),
        "accuracy": mean(correct(trajectories, items, correctness_metric(reward_cfg))),
        "format_valid": mean(t.status == "ok" for t in trajectories),
        "format_error": mean(t.status == "format_error" for t in trajectories),
        "over_budget": mean(t.status == "over_budget" for t in trajectories),
        "truncated": mean(t.stats.get("truncated_turns", 0) > 0 for t in trajectories),
    }
    for name, values in scores.components.items():
        out[f"reward/{name}"] = float(values.float().mean())
    rates = match_rates(trajectories, items, reward_cfg)  # type: ignore[arg-type]
    if rates is not None:
        out["entity_match_rate"] = mean(rates)
    for stat in ("turns", "tool_calls", *tool_stats(), "invalid_calls"):
        out[stat] = mean(t.stats.get(stat, 0) for t in trajectories)
    out["response_length"] = mean(t.stats.get("response_tokens", 0) for t in trajectories)
    out["generated_tokens"] = mean(t.stats.get("generated_tokens", 0) for t in trajectories)
    calls = sum(t.stats.get("tool_calls", 0) for t in trajectories)
    invalid = sum(t.stats.get("invalid_calls", 0) for t in trajectories)
    out["valid_action_ratio"] = (calls - invalid) / calls if calls else out["format_valid"]
    return out


def zero_variance_fraction(rewards: Tensor, group_index: Tensor) -> float:
    """Share of groups whose rewards are all equal (they carry no learning signal)."""
    same = group_max(rewards, group_index) == group_min(rewards, group_index)  # [N]
    first = torch.zeros(int(group_index.max()) + 1, dtype=torch.bool)
    zero = torch.zeros_like(first)
    first[group_index] = True
    zero[group_index] = same
    return float(zero[first].float().mean())
