"""Comparisons of finished evaluations (``seekrl-eval compare=[...]``): side-by-side tables, runs
pooled by label, and training sweeps' tables; no new rollouts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

from framework.eval.report import TableRow, flat, write_csv


class CompareRow(TableRow):
    """A row of ``comparison.csv``: one dataset of one run."""

    run: str
    dataset: str


#: Pass@1 pooled over the runs that share a label, with a 95% interval across them
Pooled = TypedDict("Pooled", {"runs": int, "pass@1": float, "ci": list[float]})


class CompareError(ValueError):
    """Inputs of ``compare`` that cannot be put side by side."""


def compare_inputs(
    runs: Sequence[Path], labels: Sequence[str] | None
) -> tuple[str, list[tuple[str, Path]]]:
    """What ``compare`` puts side by side: ``("eval", [(label, evaluation dir), ...])`` or
    ``("train_sweep", [(label, sweep dir), ...])``.

    Each entry is an evaluation directory (``results.json``), a sweep directory whose jobs are
    evaluations (``seekrl-eval -m``: every numbered job directory with ``results.json`` is one run,
    labelled by the given label, so a sweep's seeds pool, or else by the overrides that differ
    between its jobs), or the sweep directory of a training sweep (``seekrl-train -m``: its sweep
    table, ``sweep.jsonl``).

    Raises:
        FileNotFoundError: an entry that is none of these.
        CompareError: training sweeps mixed with evaluations.
    """
    from framework.eval.sweep import TABLE, job_dirs, job_overrides, varying

    evals: list[tuple[str, Path]] = []
    sweeps: list[tuple[str, Path]] = []
    for i, run in enumerate(map(Path, runs)):
        label = labels[i] if labels else None
        if (run / "results.json").is_file():
            evals.append((label or run.name, run))
            continue
        jobs = [j for j in job_dirs(run) if (j / "results.json").is_file()] if run.is_dir() else []
        if jobs:
            _, own = varying([job_overrides(j) for j in jobs])
            for job, mine in zip(jobs, own):
                evals.append((label or " ".join(mine) or f"{run.name}/{job.name}", job))
        elif (run / TABLE).is_file():
            sweeps.append((label or run.name, run))
        else:
            what = "a missing path" if not run.exists() else "a directory with neither"
            raise FileNotFoundError(
                f"[compare] got {str(run)!r} ({what}); expected an evaluation directory with "
                "results.json, a seekrl-eval -m sweep directory whose job directories have "
                f"results.json, or a seekrl-train -m sweep directory with {TABLE}. Fix: run "
                "seekrl-eval on each policy first and pass those run directories (or their sweep "
                "directory), or pass a training sweep whose jobs have finished."
            )
    if evals and sweeps:
        raise CompareError(
            f"[compare] got training sweeps ({', '.join(str(p) for _, p in sweeps)}) beside "
            "evaluations; expected one kind. Fix: compare training sweeps and evaluations in "
            "separate seekrl-eval compare=... runs (or evaluate the sweep's policies first)."
        )
    return ("train_sweep", sweeps) if sweeps else ("eval", evals)


def compare(runs: Sequence[Path], labels: Sequence[str] | None, out: Path) -> dict[str, Any]:
    """Side-by-side table of several evaluations; runs sharing a label (e.g. seeds of one
    algorithm) are also pooled: mean Pass@1 over runs with a 95% CI across runs.

    ``runs`` may name sweep directories (see :func:`compare_inputs`); training sweeps are
    rendered from their sweep tables (:func:`compare_train_sweeps`).
    """
    from framework.eval.metrics import mean_ci

    kind, found = compare_inputs(runs, labels)
    if kind == "train_sweep":
        return compare_train_sweeps(found, out)
    loaded = [(label, json.loads((run / "results.json").read_text())) for label, run in found]
    rows: list[CompareRow] = []
    for label, res in loaded:
        for d, s in res["datasets"].items():
            rows.append({"run": label, "dataset": d, **flat(s["overall"])})
    pooled: dict[str, Pooled] = {}
    for label in dict.fromkeys(lbl for lbl, _ in loaded):
        for d in {d for lbl, r in loaded if lbl == label for d in r["datasets"]}:
            vals = [
                r["datasets"][d]["overall"]["pass@1"]
                for lbl, r in loaded
                if lbl == label and d in r["datasets"]
            ]
            est = mean_ci(vals)
            pooled[f"{label} / {d}"] = {
                "runs": len(vals),
                "pass@1": est.mean,
                "ci": [est.low, est.high],
            }
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "comparison.csv", rows, ["run", "dataset"])
    lines = [
        "# Comparison",
        "",
        "| run | dataset | Pass@1 [95% CI] | Pass@k | pass^k | EM | F1 | tool calls |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['run']} | {r['dataset']} | {r['pass@1']:.3f} [{r['pass@1_low']:.3f}, {r['pass@1_high']:.3f}] "
            f"| {r['pass@k']:.3f} | {r['pass^k']:.3f} | {r['em']:.3f} | {r['f1']:.3f} | {r['tool_calls']:.2f} |"
        )
    lines += [
        "",
        "## Pooled over runs with the same label",
        "",
        "| label / dataset | runs | Pass@1 [95% CI over runs] |",
        "|---|---|---|",
    ]
    for key, p in pooled.items():
        lines.append(
            f"| {key} | {p['runs']} | {p['pass@1']:.3f} [{p['ci'][0]:.3f}, {p['ci'][1]:.3f}] |"
        )
    _compare_plot(out, rows)
    lines += ["", "![comparison](comparison.png)"]
    (out / "comparison.md").write_text("\n".join(lines) + "\n")
    result = {"rows": rows, "pooled": pooled}
    (out / "comparison.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def compare_train_sweeps(sweeps: Sequence[tuple[str, Path]], out: Path) -> dict[str, Any]:
    """The sweep tables of training sweeps, one row per job (``comparison.md``, ``.csv``,
    ``.json``); a sweep's policies are compared on held-out questions by evaluating them."""
    from framework.eval.sweep import SweepRow, read, render_csv, render_markdown

    rows: list[SweepRow] = []
    for label, sweep in sweeps:
        rows += [{"sweep": label, **r} for r in read(sweep)]
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# Comparison of training sweeps", ""]
    for label in dict.fromkeys(label for label, _ in sweeps):  # equal labels: one table
        table = render_markdown([r for r in rows if r["sweep"] == label], title=label, level=2)
        lines += [table, ""]
    lines.append(
        "Training metrics; for held-out Pass@1 evaluate each job's policy/ "
        "(seekrl-eval -m checkpoint=<job dir>,<job dir>,...) and compare that sweep directory."
    )
    (out / "comparison.md").write_text("\n".join(lines) + "\n")
    (out / "comparison.csv").write_text(render_csv(rows, lead=("sweep",)))
    result = {"kind": "train_sweep", "rows": rows}
    (out / "comparison.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _compare_plot(out: Path, rows: Sequence[CompareRow]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(rows)), 3.2))
    names = [f"{r['run']}\n{r['dataset']}" for r in rows]
    means = [r["pass@1"] for r in rows]
    err = [
        [r["pass@1"] - r["pass@1_low"] for r in rows],
        [r["pass@1_high"] - r["pass@1"] for r in rows],
    ]
    ax.bar(names, means, yerr=err, capsize=4, color="#55a868")
    ax.set_ylabel("Pass@1 (95% CI)")
    ax.set_ylim(0, 1)
    fig.tight_layout()
    fig.savefig(out / "comparison.png", dpi=120)
    plt.close(fig)
