"""Trajectories as JSON records (dumps) and as readable text (console)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from framework.data.schema import QAItem
from framework.rollout.scoring import Scores
from framework.rollout.signals import trajectory_signals
from framework.types import Segment, Status, ToolCall, Trajectory, TurnSpan


class TrajectoryRecord(TypedDict):
    """One trajectory as a JSON record (:func:`trajectory_records`)."""

    question_id: str
    question: str
    golden_answers: list[str]
    entities: list[list[str]] | None
    group: int
    status: Status
    end_reason: str
    answer: str | None
    reward: float
    reward_components: dict[str, float]
    stats: dict[str, int]
    prompt_tokens: int
    think_text: str
    response_text: str
    signals: dict[str, bool]


def trajectory_records(
    trajectories: Sequence[Trajectory], items: Sequence[QAItem], scores: Scores
) -> list[TrajectoryRecord]:
    """One JSON-ready dict per trajectory: question, gold, outcome, rewards, stats, full text and
    the triage signals it fired (:func:`~framework.rollout.signals.trajectory_signals`).

    Per-token data (``token_ids``, ``loss_mask``, ``rollout_logprobs``) is left out: it would
    multiply the size of every dump, and the step's mismatch figures summarise the log-probs.
    """
    out: list[TrajectoryRecord] = []
    for i, t in enumerate(trajectories):
        item = items[t.group]
        out.append(
            {
                "question_id": item.id,
                "question": item.question,
                "golden_answers": list(item.golden_answers),
                "entities": [list(e) for e in item.entities] if item.entities else None,
                "group": t.group,
                "status": t.status,
                "end_reason": t.end_reason,
                "answer": t.answer,
                "reward": float(scores.total[i]),
                "reward_components": {k: float(v[i]) for k, v in scores.components.items()},
                "stats": dict(t.stats),
                "prompt_tokens": t.prompt_len,
                "think_text": t.think_text,
                "response_text": t.response_text,
                "signals": trajectory_signals(t, item.question),
            }
        )
    return out


def render_record(record: TrajectoryRecord) -> str:
    """A trajectory for humans."""
    comps = ", ".join(f"{k} {v:.3f}" for k, v in record["reward_components"].items())
    head = (
        f"--- {record['question_id']} (group {record['group']}): {record['status']} "
        f"({record['end_reason']}), reward {record['reward']:.3f} [{comps}]\n"
        f"Q: {record['question']}\ngold: {record['golden_answers']}  answer: {record['answer']!r}\n"
        f"stats: {record['stats']}\n"
    )
    return head + record["response_text"].strip() + "\n"


def trajectory_state(t: Trajectory) -> dict[str, object]:
    """``t`` as JSON-ready data (:func:`trajectory_from_state` rebuilds it exactly)."""
    return dataclasses.asdict(t)


def trajectory_from_state(state: Mapping[str, Any]) -> Trajectory:
    """The :class:`Trajectory` that :func:`trajectory_state` gave ``state``."""
    d = dict(state)
    d["segments"] = [Segment(**s) for s in d.get("segments", [])]
    turns = []
    for turn in d.get("turns", []):
        turn = dict(turn)
        turn["calls"] = tuple(
            ToolCall(**{**c, "queries": tuple(c.get("queries", ()))}) for c in turn["calls"]
        )
        obs = turn.get("observation")
        turn["observation"] = tuple(obs) if obs is not None else None
        turns.append(TurnSpan(**turn))
    d["turns"] = turns
    return Trajectory(**d)
