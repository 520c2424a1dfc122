"""The block a training run ends with: its warm start against its trained policy, like with like.

Both policies are evaluated on the same validation questions with the same sampling seed (common
random numbers), so the difference is paired by question: :func:`final_comparison` computes the
figures from the two evaluations' records and :func:`final_lines` prints them;
:func:`framework.rl.final.final_evaluation` runs both evaluations for the train job, which writes
the same block into ``summary.json`` (``final``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypedDict, cast

from framework.eval.paired import paired_bootstrap, question_means
from framework.eval.records import EvalRecord
from framework.types import STATUS_OK

#: what the demo is, printed under the figures
WHAT_THIS_IS = (
    "A few RL steps show the pipeline end to end; they are not expected to move Pass@1. "
    "experiment=learn_cpu or a seekrl-study shows learning (README, 'Does it learn?')."
)


#: one policy's figures in the block (:func:`final_comparison`)
Figures = TypedDict("Figures", {"pass@1": float, "format_valid": float, "tool_calls": float})


class Difference(TypedDict):
    """The paired Pass@1 difference, trained minus warm start."""

    diff: float
    ci: list[float]
    p_value: float
    detectable: float


#: what :func:`final_comparison` returns (``summary.json``'s ``final``, less ``where``)
FinalBlock = TypedDict(
    "FinalBlock",
    {
        "questions": int,
        "samples_per_question": int,
        "start": Figures,
        "trained": Figures,
        "pass@1_difference": Difference,
    },
)


def _figures(records: Sequence[EvalRecord]) -> Figures:
    n = len(records)
    return {
        "pass@1": sum(float(r.correct) for r in records) / n,
        "format_valid": sum(r.status == STATUS_OK for r in records) / n,
        "tool_calls": sum(float(r.tool_calls or 0) for r in records) / n,
    }


def final_comparison(
    start: Sequence[EvalRecord], trained: Sequence[EvalRecord], *, n_boot: int
) -> FinalBlock:
    """Warm start and trained policy on the same questions: each one's Pass@1 (mean over samples
    and questions), format-valid share and tool calls, and the paired Pass@1 difference.

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
    return {
        "questions": d.n,
        "samples_per_question": len(trained) // max(1, len(b)),
        "start": _figures(start),
        "trained": _figures(trained),
        "pass@1_difference": {
            "diff": d.diff,
            "ci": [d.low, d.high],
            "p_value": d.p_value,
            "detectable": d.detectable,
        },
    }


def final_lines(block: Mapping[str, object], where: Mapping[str, str]) -> list[str]:
    """The printed block (:func:`final_comparison`'s, as ``summary.json`` keeps it): the
    comparison, where things are, and what the run is."""
    b = cast(FinalBlock, block)
    s, t, d = b["start"], b["trained"], b["pass@1_difference"]
    lo, hi = d["ci"]
    lines = [
        f"warm start -> trained, {b['questions']} validation questions x "
        f"{b['samples_per_question']} samples, paired by question:",
        f"  Pass@1        {s['pass@1']:.3f} -> {t['pass@1']:.3f}   difference "
        f"{d['diff']:+.3f} [{lo:+.3f}, {hi:+.3f}] (95% bootstrap; this size detects "
        f"{d['detectable']:.2f} with 80% power)",
        f"  format valid  {s['format_valid']:.3f} -> {t['format_valid']:.3f}",
        f"  tool calls    {s['tool_calls']:.2f} -> {t['tool_calls']:.2f}",
    ]
    lines += [f"  {label:<13} {path}" for label, path in where.items()]
    lines.append(f"  {WHAT_THIS_IS}")
    return lines
