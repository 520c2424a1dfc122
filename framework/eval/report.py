"""Evaluation outputs: JSON, CSV tables, PNG plots, a markdown report, TensorBoard (comparisons of
finished evaluations: :mod:`framework.eval.compare`)."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from framework.eval.records import RECORDS, EvalRecord, write_records

if TYPE_CHECKING:
    from framework.eval.sources import BySource

TABLE_KEYS = (
    "questions",
    "rollouts",
    "pass@1",
    "pass@1_low",
    "pass@1_high",
    "pass@k",
    "pass^k",
    "em",
    "f1",
    "tool_calls",
    "queries",
    "turns",
    "format_error_rate",
    "over_budget_rate",
    "entity_match_rate",
)


#: one table row of a summary (:func:`flat`): the figures of :data:`TABLE_KEYS`
TableRow = TypedDict(
    "TableRow",
    {
        "questions": int,
        "rollouts": int,
        "pass@1": float,
        "pass@1_low": float,
        "pass@1_high": float,
        "pass@k": float,
        "pass^k": float,
        "em": float,
        "f1": float,
        "tool_calls": float,
        "queries": float,
        "turns": float,
        "format_error_rate": float,
        "over_budget_rate": float,
        "entity_match_rate": float | None,
    },
)


def flat(summary: Mapping[str, Any]) -> TableRow:
    """One table row of a summary (:func:`~framework.eval.harness.summarize`; k-specific keys
    renamed to pass@k / pass^k)."""
    k = summary["k"]
    entity = summary.get("entity") or {}
    return {
        "questions": summary["questions"],
        "rollouts": summary["rollouts"],
        "pass@1": summary["pass@1"],
        "pass@1_low": summary["pass@1_ci"][0],
        "pass@1_high": summary["pass@1_ci"][1],
        "pass@k": summary[f"pass@{k}"],
        "pass^k": summary[f"pass^{k}"],
        "em": summary["em"],
        "f1": summary["f1"],
        "tool_calls": summary["tool_calls"],
        "queries": summary["queries"],
        "turns": summary["turns"],
        "format_error_rate": summary["format_error_rate"],
        "over_budget_rate": summary["over_budget_rate"],
        "entity_match_rate": entity.get("match_rate"),
    }


#: the label of the macro-average row of the per-source tables
MACRO = "macro average"


def source_table_rows(sources: BySource) -> list[dict[str, object]]:
    """``by_source.csv``'s rows: ``dataset``, ``data_source`` and the table figures of each
    source, then the macro average (``data_source`` :data:`MACRO`, ``dataset`` empty)."""
    rows: list[dict[str, object]] = [
        {"dataset": r["dataset"], "data_source": r["data_source"], **flat(r["summary"])}
        for r in sources["rows"]
    ]
    rows.append({"dataset": "", "data_source": MACRO, **flat(sources["macro"])})
    return rows


def source_markdown(sources: BySource, k: int) -> list[str]:
    """The report's per-source table (:mod:`framework.eval.sources`): one row per source, then
    the macro average."""
    n = len(sources["rows"])
    lines = [
        "## By data source",
        "",
        f"One row per `data_source` of each dataset; the last row is the unweighted mean over the "
        f"{n} source{'s' if n != 1 else ''} (each counts once, as in Search-R1's tables; Pass@1's "
        "interval treats the sources as independent samples).",
        "",
        f"| dataset | source | questions | Pass@1 [95% CI] | Pass@{k} | EM | F1 | tool calls |",
        "|---|---|---|---|---|---|---|---|",
    ]
    table = [(r["dataset"], r["data_source"], flat(r["summary"])) for r in sources["rows"]]
    for dataset, source, o in [*table, ("", f"**{MACRO}**", flat(sources["macro"]))]:
        lines.append(
            f"| {dataset} | {source} | {o['questions']} | {o['pass@1']:.3f} "
            f"[{o['pass@1_low']:.3f}, {o['pass@1_high']:.3f}] | {o['pass@k']:.3f} | "
            f"{o['em']:.3f} | {o['f1']:.3f} | {o['tool_calls']:.2f} |"
        )
    return lines


def source_lines(sources: BySource) -> list[str]:
    """The printed summary's lines on the sources: one per source, then the macro average."""
    out = []
    for r in sources["rows"]:
        o = flat(r["summary"])
        out.append(
            f"  {r['data_source']} ({r['dataset']}): Pass@1 {o['pass@1']:.3f}, EM {o['em']:.3f}, "
            f"F1 {o['f1']:.3f} ({o['questions']} questions)"
        )
    m = flat(sources["macro"])
    out.append(
        f"  {MACRO} over {len(sources['rows'])} sources: Pass@1 {m['pass@1']:.3f}, "
        f"EM {m['em']:.3f}, F1 {m['f1']:.3f}"
    )
    return out


def write_csv(path: Path, rows: Sequence[Mapping[str, object]], first: Sequence[str]) -> None:
    """A table of ``rows``: the ``first`` columns, then :data:`TABLE_KEYS` (floats to 4 places)."""
    keys = [*first, *TABLE_KEYS]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: _fmt(r.get(k)) for k in keys})


def _fmt(v: object) -> object:
    return round(v, 4) if isinstance(v, float) else v


def write_outputs(
    run_dir: Path, results: Mapping[str, Any], records: Sequence[EvalRecord], notices: list[str]
) -> list[Path]:
    """Everything an evaluation leaves behind; returns the plot files.

    Args:
        results: the JSON object of ``results.json`` (``policy``, ``k``, ``judge``, ``seed``,
            ``schedule``, per dataset its ``overall`` and ``by_hops`` summaries, and optionally
            ``answer_rule`` and ``by_source``, :class:`~framework.eval.sources.BySource`, which
            also becomes ``by_source.csv``).
        records: the evaluation's records, every dataset's.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    with (run_dir / "samples.jsonl").open("w") as fh:
        for r in records:
            fh.write(json.dumps(r.to_row(), ensure_ascii=False) + "\n")
    write_records(run_dir / RECORDS, records)
    datasets = results["datasets"]
    write_csv(
        run_dir / "summary.csv",
        [{"dataset": d, **flat(s["overall"])} for d, s in datasets.items()],
        ["dataset"],
    )
    write_csv(
        run_dir / "by_hops.csv",
        [
            {"dataset": d, "hops": h, **flat(x)}
            for d, s in datasets.items()
            for h, x in s["by_hops"].items()
        ],
        ["dataset", "hops"],
    )
    if results.get("by_source"):
        rows = source_table_rows(results["by_source"])
        write_csv(run_dir / "by_source.csv", rows, ["dataset", "data_source"])
    plots = _plots(run_dir, results)
    (run_dir / "report.md").write_text(_markdown(results, plots, notices))
    _tensorboard(run_dir, results, plots)
    return plots


def _plots(run_dir: Path, results: Mapping[str, Any]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    for name, s in results["datasets"].items():
        safe = name.replace("/", "_")
        hops = s["by_hops"]
        fig, ax = plt.subplots(figsize=(5, 3.2))
        labels = list(hops)
        means = [hops[h]["pass@1"] for h in labels]
        err = [
            [m - hops[h]["pass@1_ci"][0] for h, m in zip(labels, means, strict=True)],
            [hops[h]["pass@1_ci"][1] - m for h, m in zip(labels, means, strict=True)],
        ]
        ax.bar(labels, means, yerr=err, capsize=4, color="#4c72b0")
        ax.set_xlabel("hops")
        ax.set_ylabel("Pass@1 (95% CI)")
        ax.set_ylim(0, 1)
        ax.set_title(f"{name}: Pass@1 by hop count")
        fig.tight_layout()
        path = run_dir / f"pass1_by_hops_{safe}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        out.append(path)
        entity = s["overall"].get("entity")
        if entity:
            fig, ax = plt.subplots(figsize=(5, 3.2))
            edges = [i / 10 for i in range(10)]
            ax.bar(
                edges, entity["norm_rate_hist_correct"], width=0.045, align="edge", label="correct"
            )
            ax.bar(
                [e + 0.05 for e in edges],
                entity["norm_rate_hist_wrong"],
                width=0.045,
                align="edge",
                label="wrong",
            )
            ax.set_xlabel("normalised entity match rate")
            ax.set_ylabel("rollouts")
            ax.set_title(f"{name}: entity matches of correct vs wrong rollouts")
            ax.legend()
            fig.tight_layout()
            path = run_dir / f"entity_match_hist_{safe}.png"
            fig.savefig(path, dpi=120)
            plt.close(fig)
            out.append(path)
    return out


def _markdown(results: Mapping[str, Any], plots: list[Path], notices: list[str]) -> str:
    from framework.eval.answer_rule import answer_rule_markdown

    k = results["k"]
    lines = [
        f"# Evaluation of {results['policy']}",
        "",
        f"{k} samples per question; judge `{results['judge']}`; seed {results['seed']}.",
        "",
    ]
    plan = results.get("schedule")
    if plan:
        taken = sum(w.get("from_journal", 0) for w in plan.get("waves", {}).values())
        lines += [
            f"Rolled out in waves of {plan['wave_questions']} questions, "
            f"{plan['batch_questions']} in flight, {plan['rollout_dtype']} weights"
            + (f"; {taken} wave(s) taken from the journal of an interrupted run" if taken else "")
            + ".",
            "",
        ]
    if results.get("answer_rule"):
        lines += answer_rule_markdown(results["answer_rule"])
    lines += [f"> {n}" for n in notices] + ([""] if notices else [])
    head = f"| dataset | questions | Pass@1 [95% CI] | Pass@{k} | pass^{k} | EM | F1 | tool calls | format errors | over budget |"
    lines += [head, "|" + "---|" * 10]
    for d, s in results["datasets"].items():
        o = s["overall"]
        lines.append(
            f"| {d} | {o['questions']} | {o['pass@1']:.3f} [{o['pass@1_ci'][0]:.3f}, "
            f"{o['pass@1_ci'][1]:.3f}] | {o[f'pass@{k}']:.3f} | {o[f'pass^{k}']:.3f} | "
            f"{o['em']:.3f} | {o['f1']:.3f} | {o['tool_calls']:.2f} | "
            f"{o['format_error_rate']:.3f} | {o['over_budget_rate']:.3f} |"
        )
    if results.get("by_source"):
        lines += ["", *source_markdown(results["by_source"], k)]
    for d, s in results["datasets"].items():
        lines += [
            "",
            f"## {d} by hop count",
            "",
            "| hops | questions | Pass@1 [95% CI] | tool calls |",
            "|---|---|---|---|",
        ]
        for h, x in s["by_hops"].items():
            lines.append(
                f"| {h} | {x['questions']} | {x['pass@1']:.3f} [{x['pass@1_ci'][0]:.3f}, "
                f"{x['pass@1_ci'][1]:.3f}] | {x['tool_calls']:.2f} |"
            )
        e = s["overall"].get("entity")
        lines += ["", f"## {d}: entities in the reasoning", ""]
        if e is None:
            lines.append("Skipped: this dataset has no ground-truth entities.")
        else:
            lines += [
                f"- mean entity match rate: {e['match_rate']:.3f}",
                f"- questions with both correct and wrong rollouts: "
                f"{e['questions_with_correct_and_wrong']}; correct rollouts match more entities "
                f"on {e['correct_matches_more']}, wrong ones on {e['wrong_matches_more']}, "
                f"ties {e['ties']}",
                f"- mean matched entities: correct {e['mean_matched_correct']:.2f}, wrong "
                f"{e['mean_matched_wrong']:.2f}",
                f"- normalised match rate histogram (10 bins over [0, 1]): correct "
                f"{e['norm_rate_hist_correct']}, wrong {e['norm_rate_hist_wrong']}",
            ]
    lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots]
    return "\n".join(lines) + "\n"


def _tensorboard(run_dir: Path, results: Mapping[str, Any], plots: list[Path]) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(run_dir / "tensorboard"))
    try:
        for d, s in results["datasets"].items():
            for key, value in flat(s["overall"]).items():
                if isinstance(value, int | float) and value is not None:
                    writer.add_scalar(f"eval/{d}/{key}", value, 0)
        import matplotlib.image as mpimg

        for p in plots:
            img = mpimg.imread(p)
            writer.add_image(f"eval/{p.stem}", img[..., :3], 0, dataformats="HWC")
        writer.add_text("eval/report", (run_dir / "report.md").read_text(), 0)
    finally:
        writer.close()
