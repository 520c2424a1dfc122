"""What a batch of rollouts looked like, as flat scalars (``rollout/...``) for the logger."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import mean

import torch
from torch import Tensor

from framework.algorithms.group import group_max, group_min
from framework.data.schema import QAItem
from framework.rewards.entity import EntityRewardConfig, entity_match_rate
from framework.rewards.text import exact_match
from framework.rollout.scoring import Scores
from framework.rollout.types import Trajectory


def correct(trajectories: Sequence[Trajectory], items: Sequence[QAItem]) -> list[bool]:
    """Per rollout: answered within budget and the answer matches a gold answer (normalised EM)."""
    return [
        t.status == "ok"
        and t.answer is not None
        and exact_match(t.answer, items[t.group].golden_answers)
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
    """
    n = len(trajectories)
    if n == 0:
        return {}
    out: dict[str, float] = {
        "reward": float(scores.total.float().mean()),
        "accuracy": mean(correct(trajectories, items)),
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
    for stat in ("turns", "tool_calls", "queries", "visits", "invalid_calls"):
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
