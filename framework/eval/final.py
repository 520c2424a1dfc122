"""The block a training run ends with: its warm start against its trained policy, like with like.

Both policies are evaluated on the same validation questions with the same sampling seed (common
random numbers), so the difference is paired by question: :func:`final_comparison` computes the
figures from the two evaluations' records and :func:`final_lines` prints them;
:func:`framework.rl.final.final_evaluation` runs both evaluations for the train job, which writes
the same block into ``summary.json`` (``final``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TypedDict, cast

from framework.eval.paired import PairedResult, paired_bootstrap, question_means
from framework.eval.records import EvalRecord
from framework.types import STATUS_OK

#: what the demo is, printed under the figures
WHAT_THIS_IS = (
    "A few RL steps show the pipeline end to end; they are not expected to move Pass@1. "
    "experiment=learn_cpu or a seekrl-study shows learning (README, 'Does it learn?')."
)


#: one policy's figures in the block (:func:`final_comparison`); the graded measures only where
#: the records carry them (an answer F1; ground-truth entities, as synthesized questions have)
_Always = TypedDict("_Always", {"pass@1": float, "format_valid": float, "tool_calls": float})


class Figures(_Always, total=False):
    answer_f1: float
    entity_share: float


class Difference(TypedDict):
    """The paired Pass@1 difference, trained minus warm start."""

    diff: float
    ci: list[float]
    p_value: float
    detectable: float


#: the graded measures of :data:`Figures`, paired like Pass@1: each record's value (None: none)
GRADED: dict[str, Callable[[EvalRecord], float | None]] = {
    "format_valid": lambda r: float(r.status == STATUS_OK),
    "answer_f1": lambda r: r.f1,
    "entity_share": lambda r: r.match_rate,
}

#: how the printed block names each measure, and what the entity share is
LABELS = {"format_valid": "format valid", "answer_f1": "answer F1", "entity_share": "entity share"}
ENTITY_SHARE = (
    "entity share: the share of the question's ground-truth entities the reasoning names "
    "(E-GRPO's partial credit)"
)


#: what :func:`final_comparison` returns (``summary.json``'s ``final``, less ``where``)
FinalBlock = TypedDict(
    "FinalBlock",
    {
        "questions": int,
        "samples_per_question": int,
        "start": Figures,
        "trained": Figures,
        "pass@1_difference": Difference,
        "differences": dict[str, Difference],
        "same_rollouts": list[int],
    },
)


def _figures(records: Sequence[EvalRecord]) -> Figures:
    n = len(records)
    out: Figures = {
        "pass@1": sum(float(r.correct) for r in records) / n,
        "format_valid": sum(r.status == STATUS_OK for r in records) / n,
        "tool_calls": sum(float(r.tool_calls or 0) for r in records) / n,
    }
    f1 = [r.f1 for r in records if r.f1 is not None]
    if f1:
        out["answer_f1"] = sum(f1) / len(f1)
    shares = [r.match_rate for r in records if r.match_rate is not None]
    if shares:
        out["entity_share"] = sum(shares) / len(shares)
    return out


def same_rollouts(start: Sequence[EvalRecord], trained: Sequence[EvalRecord]) -> list[int]:
    """``[same, paired]``: of the rollouts both evaluations made (same dataset, question and
    sample, so the same sampling seed), how many are token for token the same (equal
    ``response_digest``); ``[0, 0]`` where the records carry no digest."""

    def digests(records: Sequence[EvalRecord]) -> dict[tuple[str, str, int], str]:
        return {
            (r.dataset, r.question_id, r.sample): r.response_digest
            for r in records
            if r.response_digest is not None
        }

    a, b = digests(start), digests(trained)
    common = set(a) & set(b)
    return [sum(a[k] == b[k] for k in common), len(common)]


def _difference(d: PairedResult) -> Difference:
    return {"diff": d.diff, "ci": [d.low, d.high], "p_value": d.p_value, "detectable": d.detectable}


def final_comparison(
    start: Sequence[EvalRecord], trained: Sequence[EvalRecord], *, n_boot: int
) -> FinalBlock:
    """Warm start and trained policy on the same questions: each one's Pass@1 (mean over samples
    and questions), format-valid share, tool calls and, where the records carry them, answer F1 and
    entity share; the paired Pass@1 difference, and (``differences``) the paired difference of
    each graded measure both evaluations have. The graded measures keep the block informative
    where Pass@1 sits at the floor for both policies, as it does after a few steps of a small
    warm start.

    Args:
        start: the warm start's per-sample records (their ``dataset``, ``question_id``,
            ``correct``, ``status``, ``tool_calls``).
        trained: the trained policy's, on the same questions.
        n_boot: bootstrap resamples of the paired interval.

    Raises:
        ValueError: fewer than 2 questions common to both.
    """
    a, b = question_means(start), question_means(trained)
    d = paired_bootstrap(a, b, n_boot=n_boot)
    differences: dict[str, Difference] = {}
    for name, value in GRADED.items():
        ga, gb = question_means(start, value), question_means(trained, value)
        if len(set(ga) & set(gb)) >= 2:
            differences[name] = _difference(paired_bootstrap(ga, gb, n_boot=n_boot))
    return {
        "questions": d.n,
        "samples_per_question": len(trained) // max(1, len(b)),
        "start": _figures(start),
        "trained": _figures(trained),
        "pass@1_difference": _difference(d),
        "differences": differences,
        "same_rollouts": same_rollouts(start, trained),
    }


def _interval(d: Difference) -> str:
    lo, hi = d["ci"]
    return f"difference {d['diff']:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def _power(d: Difference) -> str:
    """What the comparison's size detects, or why that cannot be read from it."""
    detectable = d["detectable"]
    if detectable == 0.0:  # every per-question difference is 0: their SD is too
        return "no question's Pass@1 differs between the two, so its SD cannot size a difference"
    if not math.isfinite(detectable):
        return "the size it detects is unknown"
    return f"this size detects {detectable:.2f} with 80% power"


def final_lines(block: Mapping[str, object], where: Mapping[str, str]) -> list[str]:
    """The printed block (:func:`final_comparison`'s, as ``summary.json`` keeps it): the
    comparison, where things are, and what the run is."""
    b = cast(FinalBlock, block)
    s, t, d = b["start"], b["trained"], b["pass@1_difference"]
    graded = b.get("differences", {})  # absent from a summary.json written before it was added

    before, after = cast(Mapping[str, float], s), cast(Mapping[str, float], t)

    def measure(name: str) -> str:
        line = f"  {LABELS[name]:<13} {before[name]:.3f} -> {after[name]:.3f}"
        return f"{line}   {_interval(graded[name])}" if name in graded else line

    lines = [
        f"warm start -> trained, {b['questions']} validation questions x "
        f"{b['samples_per_question']} samples, paired by question:",
        f"  Pass@1        {s['pass@1']:.3f} -> {t['pass@1']:.3f}   {_interval(d)} "
        f"(95% bootstrap; {_power(d)})",
        measure("format_valid"),
        f"  tool calls    {s['tool_calls']:.2f} -> {t['tool_calls']:.2f}",
    ]
    lines += [measure(n) for n in ("answer_f1", "entity_share") if n in s and n in t]
    if "entity_share" in s and "entity_share" in t:
        lines.append(f"  ({ENTITY_SHARE})")
    same, paired = b.get("same_rollouts", [0, 0])
    if paired and same == paired:
        lines.append(
            f"  all {paired} rollouts are the warm start's, token for token: the RL steps did not "
            "change what the policy generates (a group whose rollouts all earn one reward has no "
            "advantage to learn from)"
        )
    elif paired:
        lines.append(f"  {same} of {paired} rollouts are the warm start's, token for token")
    lines += [f"  {label:<13} {path}" for label, path in where.items()]
    lines.append(f"  {WHAT_THIS_IS}")
    return lines
