"""What a batch of rollouts looked like, as flat scalars (``rollout/...``) for the logger."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import mean

import torch
from torch import Tensor

from framework.algorithms.rewards.shaping import entity_shaped_reward
from framework.algorithms.stats.group import group_max, group_min
from framework.data.schema import QAItem
from framework.rewards.entity_match import (
    EntityRule,
    RulesEntities,
    entity_match_rate,
    question_match_rates,
)
from framework.rewards.text import ReportsEntityRule, ReportsVerdict, answer_metric
from framework.rollout.scoring import Scores
from framework.rollout.signals import signal_figures
from framework.rollout.tools import tool_stats
from framework.types import STATUS_OK, STATUSES, Trajectory


def correctness_metric(reward_cfg: object = None) -> str:
    """The answer metric that decides what a correct answer is, as the reward says it
    (:class:`~framework.rewards.text.ReportsVerdict`: E-GRPO's ``correctness``, the outcome
    reward's ``metric``, a weighted sum's first judging term). A graded metric (f1) is a reward
    shape, not a verdict, so it, and a reward that judges no answer, leave accuracy at normalised
    exact match.
    """
    name = reward_cfg.verdict_metric() if isinstance(reward_cfg, ReportsVerdict) else None
    return name or "em"


def entity_rule(reward_cfg: object = None) -> RulesEntities:
    """How entities are matched for the logged entity figures: the reward's own rule
    (:class:`~framework.rewards.text.ReportsEntityRule`), else E-GRPO's defaults."""
    rule = reward_cfg.entity_rule() if isinstance(reward_cfg, ReportsEntityRule) else None
    return rule if rule is not None else EntityRule()


def correct(
    trajectories: Sequence[Trajectory], items: Sequence[QAItem], metric: str = "em"
) -> list[bool]:
    """Per rollout: answered within budget and the answer is right by ``metric`` (an entry of
    :data:`~framework.rewards.text.ANSWER_METRICS`; normalised exact match by default)."""
    return correct_answers(
        [t.status for t in trajectories],
        [t.answer for t in trajectories],
        [items[t.group].golden_answers for t in trajectories],
        metric,
    )


def correct_answers(
    statuses: Sequence[str],
    answers: Sequence[str | None],
    golden: Sequence[Sequence[str]],
    metric: str = "em",
) -> list[bool]:
    """:func:`correct` on plain lists (also saved trajectory records): a rollout's status is ok,
    it gave an answer and ``metric`` judges it right against its gold answers."""
    judge = answer_metric(metric, "reward.correctness")
    return [
        status == STATUS_OK and answer is not None and judge.correct(answer, gold)
        for status, answer, gold in zip(statuses, answers, golden, strict=True)
    ]


def match_rates(
    trajectories: Sequence[Trajectory],
    items: Sequence[QAItem],
    cfg: object = None,
) -> list[float] | None:
    """Per rollout the share of its question's entities named in its thinking, matched by the
    reward config ``cfg``'s rule (:func:`entity_rule`); None without entities."""
    if not all(items[t.group].entities for t in trajectories):
        return None
    rule = entity_rule(cfg)
    return [
        entity_match_rate(t.think_text, items[t.group].entities or [], rule) for t in trajectories
    ]


def wrong_entity_rates(
    thinks: Sequence[str],
    entities: Sequence[Sequence[Sequence[str] | str]],
    questions: Sequence[str],
    valid: Sequence[bool],
    correct_flags: Sequence[bool],
    groups: Sequence[int],
    rule: RulesEntities,
) -> Tensor:
    """``γ̂`` of each wrong rollout of a batch, in batch order: the share of its question's ``E_q``
    (the rule's entity set: hidden entities only under ``skip_question_entities``) named in its
    thinking ``thinks``, over the best share in its group, exactly as
    :func:`~framework.algorithms.rewards.shaping.entity_shaped_reward` normalises it (0 for an invalid
    rollout). Plain lists in, so it also runs on saved trajectory records."""
    rates = question_match_rates(thinks, entities, questions, rule)
    correct_t = torch.tensor(list(correct_flags), dtype=torch.bool)
    gamma_hat = entity_shaped_reward(
        torch.zeros_like(correct_t),  # every rollout "wrong": its shaped value is γ̂ itself
        torch.tensor(rates),
        torch.tensor(list(valid), dtype=torch.bool),
        torch.tensor(list(groups)),
        1.0,
    )
    return gamma_hat[~correct_t]


def partial_credit(
    trajectories: Sequence[Trajectory],
    items: Sequence[QAItem],
    correct_flags: Sequence[bool],
    cfg: object = None,
) -> dict[str, float]:
    """What E-GRPO's entity term gives the wrong rollouts of a batch (whatever the arm trains with).

    Each wrong, valid rollout's ``γ̂`` (:func:`wrong_entity_rates`). Returns
    ``partial_credit_share`` (share of wrong rollouts with ``γ̂ > 0``: those E-GRPO credits), and
    the distribution of ``γ̂`` over wrong rollouts as its mean, the share at 0 and the share at 1
    (the paper finds it bimodal); empty without entities or wrong rollouts.
    """
    if not trajectories or not all(items[t.group].entities for t in trajectories):
        return {}
    wrong = wrong_entity_rates(
        [t.think_text for t in trajectories],
        [items[t.group].entities or () for t in trajectories],
        [items[t.group].question for t in trajectories],
        [t.status == STATUS_OK for t in trajectories],
        correct_flags,
        [t.group for t in trajectories],
        entity_rule(cfg),
    )
    if wrong.numel() == 0:
        return {}
    return {
        "partial_credit_share": float((wrong > 0).float().mean()),
        "wrong_entity_rate_mean": float(wrong.mean()),
        "wrong_entity_rate_zero": float((wrong == 0).float().mean()),
        "wrong_entity_rate_full": float((wrong >= 1).float().mean()),
    }


def rollout_metrics(
    trajectories: Sequence[Trajectory],
    items: Sequence[QAItem],
    scores: Scores,
    *,
    reward_cfg: object = None,
) -> dict[str, float]:
    """Accuracy, reward and each component, entity match rate, tool use, lengths, failure rates.

    Includes the collapse indicators: response length and the valid-action ratio (valid tool
    calls over all tool calls; rollouts without calls count as fully valid when they answered),
    and the triage signals' rates (``signals/...``: :mod:`framework.rollout.signals`).
    Accuracy judges answers by the reward's own answer metric (:func:`correctness_metric`).
    """
    n = len(trajectories)
    if n == 0:
        return {}
    right = correct(trajectories, items, correctness_metric(reward_cfg))
    out: dict[str, float] = {
        "reward": float(scores.total.float().mean()),
        "accuracy": mean(right),
        "format_valid": mean(t.status == STATUS_OK for t in trajectories),
        **{s: mean(t.status == s for t in trajectories) for s in STATUSES if s != STATUS_OK},
        "truncated": mean(t.stats.get("truncated_turns", 0) > 0 for t in trajectories),
    }
    for name, values in scores.components.items():
        out[f"reward/{name}"] = float(values.float().mean())
    rates = match_rates(trajectories, items, reward_cfg)
    if rates is not None:
        out["entity_match_rate"] = mean(rates)
    out |= partial_credit(trajectories, items, right, reward_cfg)
    out |= signal_figures(trajectories, [items[t.group].question for t in trajectories])
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
