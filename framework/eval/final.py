"""The block a training run ends with: its warm start against its trained policy, like with like.

Both policies are evaluated on the same validation questions with the same sampling seed (common
random numbers), so the difference is paired by question: :func:`final_comparison` computes the
figures from the two evaluations' records and :func:`final_lines` prints them;
:func:`final_evaluation` runs both evaluations for the train job (:mod:`framework.rl.recipe`), which
writes the same block into ``summary.json`` (``final``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from framework.eval.paired import paired_bootstrap, per_question
from framework.types import STATUS_OK

#: what the demo is, printed under the figures
WHAT_THIS_IS = (
    "A few RL steps show the pipeline end to end; they are not expected to move Pass@1. "
    "experiment=learn_cpu or a seekrl-study shows learning (README, 'Does it learn?')."
)


def _figures(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    n = len(rows)
    return {
        "pass@1": sum(float(r["correct"]) for r in rows) / n,
        "format_valid": sum(r.get("status") == STATUS_OK for r in rows) / n,
        "tool_calls": sum(float(r.get("tool_calls") or 0) for r in rows) / n,
    }


def final_evaluation(cfg: Any, run_dir: Path) -> dict[str, Any]:
    """Evaluate the warm start and the trained policy of a train run (``cfg``, its
    :class:`~framework.rl.config.TrainConfig`) on the same validation questions with the same
    sampling (``final_eval``), in ``<run_dir>/final_eval/{start,trained}``; returns the paired
    comparison (:func:`final_comparison`) with where things are. An evaluation finished by an
    earlier, interrupted attempt is read back, not redone."""
    from framework.eval.config import eval_config_for
    from framework.eval.records import RECORDS, read_records
    from framework.eval.run import evaluate_policy

    print("\nseekrl-train: final comparison: the warm start and the trained policy", flush=True)
    records = {}
    for label, checkpoint in (("start", None), ("trained", run_dir)):
        out = run_dir / "final_eval" / label
        if not (out / RECORDS).is_file():
            evaluate_policy(eval_config_for(cfg, checkpoint, out, cfg.final_eval.settings()))
        records[label] = read_records(out / RECORDS)
    block = final_comparison(records["start"], records["trained"], n_boot=cfg.final_eval.bootstrap)
    block["where"] = {
        "policy": str(run_dir / "policy"),
        "evaluations": str(run_dir / "final_eval"),
        "summary": str(run_dir / "summary.json"),
    }
    if "TensorBoard" in str((cfg.logger or {}).get("_target_", "")):
        block["where"]["TensorBoard"] = f"tensorboard --logdir {run_dir / 'tensorboard'}"
    return block


def final_comparison(
    start: Sequence[Mapping[str, Any]], trained: Sequence[Mapping[str, Any]], *, n_boot: int
) -> dict[str, Any]:
    """Warm start and trained policy on the same questions: each one's Pass@1 (mean over samples
    and questions), format-valid share and tool calls, and the paired Pass@1 difference.

    Args:
        start: the warm start's per-sample records (``dataset``, ``question_id``, ``correct``,
            ``status``, ``tool_calls``).
        trained: the trained policy's, on the same questions.
        n_boot: bootstrap resamples of the paired interval.

    Raises:
        ValueError: fewer than 2 questions common to both.
    """
    a, b = per_question(start), per_question(trained)
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


def final_lines(block: Mapping[str, Any], where: Mapping[str, str]) -> list[str]:
    """The printed block: the comparison, where things are, and what the run is."""
    s, t, d = block["start"], block["trained"], block["pass@1_difference"]
    lo, hi = d["ci"]
    lines = [
        f"warm start -> trained, {block['questions']} validation questions x "
        f"{block['samples_per_question']} samples, paired by question:",
        f"  Pass@1        {s['pass@1']:.3f} -> {t['pass@1']:.3f}   difference "
        f"{d['diff']:+.3f} [{lo:+.3f}, {hi:+.3f}] (95% bootstrap; this size detects "
        f"{d['detectable']:.2f} with 80% power)",
        f"  format valid  {s['format_valid']:.3f} -> {t['format_valid']:.3f}",
        f"  tool calls    {s['tool_calls']:.2f} -> {t['tool_calls']:.2f}",
    ]
    lines += [f"  {label:<13} {path}" for label, path in where.items()]
    lines.append(f"  {WHAT_THIS_IS}")
    return lines
