"""Signals: trajectory triage without a model ("Signals: trajectory sampling and triage", arXiv id
not confirmed here), reconstructed for this agent.

Each rollout is checked for interaction, execution and environment signals that mark it as worth a
look; its triage score is how many fired. The rollout metrics log each signal's rate
(``rollout/signals/<name>``) and the mean score every step, the ``signals`` health monitor warns
when most rollouts fire some signal, every dumped trajectory record carries its signals, and
``tools/triage.py`` draws an error-analysis set from records with probability proportional to
``1 + score`` (the paper: 82% informative against 54% for random sampling on tau-bench).

Our mapping of the paper's taxonomy (``../shared/METHODS-2.md`` item 14), hence "reconstructed":

- ``loop`` (execution): the same normalised search query issued at least twice;
- ``stagnation`` (interaction): ``k`` consecutive tool turns (``k = 2``) that retrieved no passage
  the rollout had not seen already (passages: the non-empty lines of the tools' evidence);
- ``failure`` (execution): an invalid tool call, or a format error;
- ``exhaustion`` (environment): the rollout ran out of a budget (turns, tool calls, tokens);
- ``misalignment`` (interaction): the answer's type does not fit the question's (a "when" / "what
  year" question answered without a digit, a "who" / "where" question answered with digits only).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from framework.types import STATUS_FORMAT_ERROR, STATUS_OVER_BUDGET, Trajectory

#: the signals, in report order
SIGNALS = ("loop", "stagnation", "failure", "exhaustion", "misalignment")


def _query_key(query: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", query.lower()).split())


def loops(trajectory: Trajectory) -> bool:
    """The same normalised search query at least twice."""
    seen: set[str] = set()
    for turn in trajectory.turns:
        for call in turn.calls:
            for q in call.queries:
                key = _query_key(q)
                if key in seen:
                    return True
                seen.add(key)
    return False


def stagnates(trajectory: Trajectory, k: int = 2) -> bool:
    """``k`` consecutive tool turns that retrieved no passage new to the rollout."""
    seen: set[str] = set()
    run = 0
    for turn in trajectory.turns:
        if turn.observation is None:
            continue
        passages = {p.strip() for p in turn.evidence.splitlines() if p.strip()}
        new = passages - seen
        seen |= passages
        run = 0 if new else run + 1
        if run >= k:
            return True
    return False


def fails(trajectory: Trajectory) -> bool:
    """An invalid tool call, or a format error."""
    bad_calls = any(turn.invalid_calls for turn in trajectory.turns)
    return bad_calls or trajectory.status == STATUS_FORMAT_ERROR


def exhausts(trajectory: Trajectory) -> bool:
    """The rollout ran out of a budget (over budget, or ended by a ``max_*`` limit)."""
    return trajectory.status == STATUS_OVER_BUDGET or trajectory.end_reason.startswith("max_")


def misaligned(question: str, answer: str | None) -> bool:
    """The answer's type does not fit the question's (module docstring); False without an
    answer."""
    if not answer:
        return False
    q = question.lower().strip()
    has_digit = any(c.isdigit() for c in answer)
    digits_only = bool(re.fullmatch(r"[\d\s.,/-]+", answer.strip()))
    if q.startswith("when") or "what year" in q or "which year" in q:
        return not has_digit
    if q.startswith(("who", "where")):
        return digits_only
    return False


def trajectory_signals(trajectory: Trajectory, question: str, k: int = 2) -> dict[str, bool]:
    """Every signal of one rollout (:data:`SIGNALS`)."""
    return {
        "loop": loops(trajectory),
        "stagnation": stagnates(trajectory, k),
        "failure": fails(trajectory),
        "exhaustion": exhausts(trajectory),
        "misalignment": misaligned(question, trajectory.answer),
    }


def triage_score(signals: dict[str, bool]) -> int:
    """How many signals fired."""
    return sum(bool(v) for v in signals.values())


def signal_figures(
    trajectories: Sequence[Trajectory], questions: Sequence[str], k: int = 2
) -> dict[str, float]:
    """``signals/<name>``: the share of rollouts firing each signal; ``signals/any``: the share
    firing at least one; ``signals/score``: the mean triage score. Empty without rollouts."""
    if not trajectories:
        return {}
    rows = [trajectory_signals(t, q, k) for t, q in zip(trajectories, questions, strict=True)]
    n = len(rows)
    out = {f"signals/{s}": sum(r[s] for r in rows) / n for s in SIGNALS}
    out["signals/any"] = sum(triage_score(r) > 0 for r in rows) / n
    out["signals/score"] = sum(triage_score(r) for r in rows) / n
    return out
