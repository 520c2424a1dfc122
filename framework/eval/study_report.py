"""The study's report: per-arm tables, paired differences, entity analysis, curves, provenance.

Everything is computed from the study's archive (:mod:`framework.eval.study_archive`): the
per-question, per-sample records of every evaluation, the runs' curves and versions, and the
study's config. :func:`write_study` first brings the archive up to date from the study directory,
then writes ``study.md``, ``study.json`` and ``curves/*.png`` from the archive alone, so a committed
archive regenerates the published report exactly.

Pass@1 of an arm pooled over seeds is the mean over questions of the seeds' per-question means.
Every difference (arm minus baseline, arm minus warm start) is given three ways side by side:
resampling questions (paired bootstrap), resampling clusters of questions that share an answer
(clustered bootstrap), and resampling each arm's seeds and then the questions (seed bootstrap);
with the power of each design for the smallest difference that matters (``min_effect``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

from framework.config.study import all_seeds, arm_seeds
from framework.eval.curves import curve_table, plot_arms
from framework.eval.entity_credit import pooled
from framework.eval.metrics import entity_comparison, summarize_samples
from framework.eval.paired import (
    PairedResult,
    QuestionKey,
    cluster_bootstrap,
    interval_side,
    paired_bootstrap,
    per_question,
    pooled_per_question,
    power_at,
    questions_needed,
    seed_bootstrap,
    variance_components,
)
from framework.eval.study_archive import CURVE_TAGS, StudyArchive, archive_study
from framework.eval.study_integrity import integrity, integrity_lines

#: per-rollout figures compared between arms (record field -> label)
FIGURES = {
    "correct": "Pass@1",
    "tool_calls": "tool calls",
    "turns": "turns",
    "format_error": "format errors",
}
#: samples per question of the sizing table (same rollout budget, other splits of it)
SIZING_SAMPLES = (1, 2, 4, 8)


def _mean_ci(values: Mapping[Any, float], n_boot: int) -> PairedResult:
    """Mean over questions with its bootstrap interval (a paired comparison against zero)."""
    return paired_bootstrap(dict.fromkeys(values, 0.0), values, n_boot=n_boot)


def overall(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One evaluation's headline figures from its records: Pass@1 (normal interval over
    questions), Pass@k at the smallest number of samples any question has, tool use, format
    errors, samples that ran out of budget unanswered, and the bridge-entity analysis."""
    groups = _grouped(rows)
    k = min(len(g) for g in groups)
    sampling = summarize_samples([[bool(r["correct"]) for r in g] for g in groups], k)
    return {
        "pass@1": sampling.pass1.mean,
        "pass@1_ci": [sampling.pass1.low, sampling.pass1.high],
        "k": k,
        "pass@k": sampling.pass_k,
        "questions": len(groups),
        "samples": len(rows),
        "tool_calls": _mean([r["tool_calls"] for r in rows]),
        "turns": _mean([r["turns"] for r in rows]),
        "format_error_rate": _mean([r["format_error"] for r in rows]),
        "over_budget_rate": _mean([r["over_budget"] for r in rows]),
        "entity": bridge_analysis(groups),
    }


def _mean(values: Sequence[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def bridge_analysis(groups: Any) -> dict[str, Any] | None:
    """The paper's entity analysis on the hidden bridge entities only.

    The anchor is named in the question and the answer is written by every correct rollout, so
    counting them makes "correct rollouts match more entities" close to automatic. Here only the
    bridges (entities between anchor and answer) count: per question with bridges and with both
    correct and wrong rollouts, do the correct ones match more of them? Also: the bridge match
    rate, and the share of wrong rollouts that match at least one bridge (those E-GRPO credits
    for something the question did not give away). None when no question has bridges.
    """
    groups = [g for g in groups if (g[0].get("bridges") or 0) > 0]
    if not groups:
        return None
    cmp = entity_comparison(
        [[r["matched_bridges"] for r in g] for g in groups],
        [[bool(r["correct"]) for r in g] for g in groups],
    )
    rows = [r for g in groups for r in g]
    wrong = [r for r in rows if not r["correct"]]
    return {
        "questions_with_bridges": len(groups),
        **cmp.as_dict(),
        "bridge_match_rate": sum(r["matched_bridges"] for r in rows)
        / sum(r["bridges"] for r in rows),
        "wrong_with_a_bridge": (
            sum(r["matched_bridges"] > 0 for r in wrong) / len(wrong) if wrong else None
        ),
    }


def _samples(rows: Sequence[dict[str, Any]]) -> dict[QuestionKey, list[float]]:
    out: dict[QuestionKey, list[float]] = {}
    for r in rows:
        out.setdefault((r["dataset"], r["question_id"]), []).append(float(r["correct"]))
    return out


def _clusters(rows: Sequence[dict[str, Any]]) -> dict[QuestionKey, Any]:
    """question -> its answer key (records without one leave the question its own cluster)."""
    return {
        (r["dataset"], r["question_id"]): r["answer_key"]
        for r in rows
        if r.get("answer_key") is not None
    }


def _by_hops(
    start: Sequence[dict[str, Any]], seed_rows: Sequence[Sequence[dict[str, Any]]], n_boot: int
) -> dict[str, dict[str, Any]]:
    """Pass@1 of the warm start and of the arm (pooled over seeds) on the questions of each hop
    count, with the paired difference; empty when the rows carry no hop counts. A hop count with
    fewer than two questions is left out (no interval to give)."""
    hops = sorted({r["hops"] for r in start if r.get("hops") is not None})
    out = {}
    for h in hops:
        s = per_question([r for r in start if r.get("hops") == h])
        a = pooled_per_question(
            [per_question([r for r in rs if r.get("hops") == h]) for rs in seed_rows]
        )
        if len(set(s) & set(a)) >= 2:  # a bootstrap needs two questions; fewer is left out
            out[str(h)] = _as_dict(paired_bootstrap(s, a, n_boot=n_boot))
    return out


def _three_ways(
    a_runs: Sequence[Mapping[QuestionKey, float]],
    b_runs: Sequence[Mapping[QuestionKey, float]],
    clusters: Mapping[QuestionKey, Any],
    n_boot: int,
    min_effect: float,
) -> dict[str, Any]:
    """The Pass@1 difference ``b - a`` by the question, the answer-clustered and the seed
    bootstrap, each with its power for ``min_effect``."""
    a, b = pooled_per_question(a_runs), pooled_per_question(b_runs)
    out = {
        "questions": paired_bootstrap(a, b, n_boot=n_boot),
        "answer_clusters": cluster_bootstrap(a, b, clusters, n_boot=n_boot),
    }
    if len(a_runs) > 1 or len(b_runs) > 1:
        out["seeds"] = seed_bootstrap(a_runs, b_runs, n_boot=n_boot)
    return {
        name: {**_as_dict(r), "power_at_min_effect": r.power(min_effect)} for name, r in out.items()
    }


def _sizing(
    a_rows: Sequence[dict[str, Any]], b_rows: Sequence[dict[str, Any]], min_effect: float
) -> dict[str, Any]:
    """How the same rollout budget would be best spent, from the measured variance components of
    the Pass@1 difference (:func:`framework.eval.paired.variance_components`)."""
    a, b = _samples(a_rows), _samples(b_rows)
    vc = variance_components(a, b)
    budget = sum(len(v) for v in b.values())  # rollouts of the candidate
    designs = []
    for k in SIZING_SAMPLES:
        q = max(2, budget // k)
        se = vc.se(q, k)
        designs.append(
            {
                "samples_per_question": k,
                "questions": q,
                "se": se,
                "detectable": vc.detectable(q, k),
                "power_at_min_effect": power_at(min_effect, se),
            }
        )
    return {"between": vc.between, "within": vc.within, "budget": budget, "designs": designs}


def summarize_study(
    archive: StudyArchive,
    arms: Sequence[str],
    seeds: Sequence[int],
    baseline: str,
    n_boot: int,
    min_effect: float = 0.05,
) -> dict[str, Any]:
    """Every figure of the report, from the study's archive alone."""
    start = archive.records(None) if archive.has_eval(None) else None
    out: dict[str, Any] = {
        "min_effect": min_effect,
        "arms": {},
        "versus_baseline": {},
        "versus_start": {},
        "versus_baseline_seeds": {},
        "versus_start_seeds": {},
        "pass1_three_ways": {},
        "by_hops": {},
        "sizing": {},
        "test_evaluations": archive.test_evaluations(),
    }
    pooled: dict[str, dict[str, dict[Any, float]]] = {}
    by_seed: dict[str, dict[str, list[dict[Any, float]]]] = {}
    all_rows: dict[str, list[dict[str, Any]]] = {}
    clusters: dict[QuestionKey, Any] = {}
    if start is not None:
        out["start"] = overall(start)
        clusters.update(_clusters(start))
    # the warm start's per-question figures, shared by every arm's comparisons
    start_pq = {key: per_question(start, key) for key in FIGURES} if start is not None else {}
    for arm in arms:
        seeds_done = [s for s in seeds if archive.has_eval(arm, s)]
        if not seeds_done:
            continue
        per_seed = {}
        figures: dict[str, list[dict[Any, float]]] = {k: [] for k in FIGURES}
        results, seed_rows = [], []
        for s in seeds_done:
            rows = archive.records(arm, s)
            clusters.update(_clusters(rows))
            seed_rows.append(rows)
            o = overall(rows)
            results.append(o)
            per_seed[s] = {k: o[k] for k in ("pass@1", "pass@1_ci", "pass@k", "tool_calls")}
            per_seed[s] |= {k: o[k] for k in ("turns", "format_error_rate", "over_budget_rate")}
            for key in FIGURES:
                figures[key].append(per_question(rows, key))
        all_rows[arm] = [r for rows in seed_rows for r in rows]
        pooled[arm] = {key: pooled_per_question(v) for key, v in figures.items()}
        by_seed[arm] = figures
        p1 = _mean_ci(pooled[arm]["correct"], n_boot)
        out["arms"][arm] = {
            "seeds": seeds_done,
            "pass@1": p1.diff,
            "pass@1_ci": [p1.low, p1.high],
            "questions": p1.n,
            "k": min(r["k"] for r in results),
            "pass@k": sum(r["pass@k"] for r in results) / len(results),
            "tool_calls": sum(r["tool_calls"] for r in results) / len(results),
            "turns": sum(r["turns"] for r in results) / len(results),
            "format_error_rate": sum(r["format_error_rate"] for r in results) / len(results),
            "over_budget_rate": sum(r["over_budget_rate"] for r in results) / len(results),
            "per_seed": per_seed,
            "entity": bridge_analysis(_grouped(all_rows[arm])),
        }
        if start is not None:
            out["versus_start"][arm] = {
                label: _as_dict(paired_bootstrap(start_pq[key], pooled[arm][key], n_boot=n_boot))
                for key, label in FIGURES.items()
            }
            for s, seed_p1 in zip(seeds_done, figures["correct"], strict=True):
                per_seed[s]["minus_start"] = _as_dict(
                    paired_bootstrap(start_pq["correct"], seed_p1, n_boot=n_boot)
                )
            if len(seeds_done) > 1:
                out["versus_start_seeds"][arm] = {
                    label: _as_dict(seed_bootstrap([start_pq[key]], figures[key], n_boot=n_boot))
                    for key, label in FIGURES.items()
                }
            out["pass1_three_ways"][f"{arm} - start"] = _three_ways(
                [start_pq["correct"]], figures["correct"], clusters, n_boot, min_effect
            )
            out["sizing"][f"{arm} - start"] = _sizing(start, all_rows[arm], min_effect)
            by_hops = _by_hops(start, seed_rows, n_boot)
            if by_hops:
                out["by_hops"][arm] = by_hops
    if baseline in pooled:
        for arm in pooled:
            if arm == baseline:
                continue
            out["versus_baseline"][arm] = {
                label: _as_dict(
                    paired_bootstrap(pooled[baseline][key], pooled[arm][key], n_boot=n_boot)
                )
                for key, label in FIGURES.items()
            }
            if len(by_seed[arm]["correct"]) > 1 or len(by_seed[baseline]["correct"]) > 1:
                out["versus_baseline_seeds"][arm] = {
                    label: _as_dict(
                        seed_bootstrap(by_seed[baseline][key], by_seed[arm][key], n_boot=n_boot)
                    )
                    for key, label in FIGURES.items()
                }
            out["pass1_three_ways"][f"{arm} - {baseline}"] = _three_ways(
                by_seed[baseline]["correct"], by_seed[arm]["correct"], clusters, n_boot, min_effect
            )
            out["sizing"][f"{arm} - {baseline}"] = _sizing(
                all_rows[baseline], all_rows[arm], min_effect
            )
    return out


def _grouped(rows: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    by_q: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_q.setdefault(r["question_id"], []).append(r)
    return list(by_q.values())


def _as_dict(r: PairedResult) -> dict[str, Any]:
    return {
        "diff": r.diff,
        "ci": [r.low, r.high],
        "p_value": r.p_value,
        "questions": r.n,
        "a_mean": r.a_mean,
        "b_mean": r.b_mean,
        "excludes_zero": r.excludes_zero,
        "sd": r.sd,
        "se": r.se,
        "detectable": r.detectable,
    }


def write_study(root: Path, cfg: Any, states: Sequence[Any]) -> dict[str, Any]:
    """Archive the study in ``root`` (:func:`archive_study`), then write its report from the
    archive alone (:func:`write_report`)."""
    archive_study(root, cfg, states)
    return write_report(root, cfg)


def write_subset_report(root: Path, cfg: Any, seeds: Sequence[int]) -> dict[str, Any]:
    """The report over ``seeds`` only, a subset of the study's (a sensitivity analysis, e.g. the
    seeds no exploration used), from ``<root>/archive`` beside the main report:
    ``study_seeds_<s>_<s>.md``, ``.json`` and ``curves_seeds_<s>_<s>/``; the main report and
    the archive stay as they are.

    Raises:
        ValueError: a seed the study does not have, or none.
    """
    from dataclasses import replace

    extra = [s for s in seeds if s not in all_seeds(cfg)]
    if not seeds or extra:
        raise ValueError(
            f"[only_seeds] got {list(seeds)}; expected some of the study's seeds "
            f"{list(cfg.seeds)}. Fix: pass only_seeds=[...] from those."
        )
    tag = "_seeds_" + "_".join(str(s) for s in seeds)
    subset = replace(cfg, seeds=[s for s in seeds if s in cfg.seeds], only_seeds=[])
    if getattr(cfg, "baseline_seeds", None):  # a replicated baseline: its seeds of the subset
        subset = replace(subset, baseline_seeds=[s for s in cfg.baseline_seeds if s in seeds])
    return write_report(root, subset, publish=False, suffix=tag, subset_of=list(cfg.seeds))


def write_report(
    root: Path,
    cfg: Any,
    *,
    publish: bool = True,
    suffix: str = "",
    subset_of: Sequence[int] = (),
) -> dict[str, Any]:
    """``study.md``, ``study.json`` and ``curves/`` in ``root`` (each name with ``suffix``), from
    ``<root>/archive`` only; a screen with ``cfg.publish`` also publishes
    (:func:`publish_screen`) unless ``publish`` is off. ``subset_of``: the study's seeds, when
    ``cfg.seeds`` is a subset of them (:func:`write_subset_report`)."""
    archive = StudyArchive(root / "archive")
    arms, seeds = list(cfg.arms), all_seeds(cfg)  # with a replicated baseline's further seeds
    summary = summarize_study(archive, arms, seeds, cfg.baseline, cfg.bootstrap, cfg.min_effect)
    runs = {arm: [archive.curves(arm, s) for s in seeds] for arm in arms}
    runs = {a: [c for c in r if c] for a, r in runs.items()}
    runs = {a: r for a, r in runs.items() if r}
    plots = plot_arms(
        runs, list(CURVE_TAGS), root / f"curves{suffix}", title_prefix=f"{cfg.name}: "
    )
    summary["curves"] = curve_table(runs, list(CURVE_TAGS))
    rates = {
        arm: h
        for arm in arms
        if (
            h := pooled(
                [(archive.run(arm, s) or {}).get("wrong_entity_rates") or {} for s in seeds]
            )
        )
        is not None
    }
    if rates:  # archives from before the histogram was kept have none (their reports unchanged)
        summary["wrong_entity_rates"] = rates
    summary["runs"] = [
        {
            "arm": arm,
            "seed": seed,
            "status": run["status"],
            "seconds": run["seconds"],
            "train_seconds": run["train_seconds"],
            "dir": f"runs/{arm}/seed{seed}",
            "versions": run["versions"],
        }
        for arm, seed in archive.runs(arms)
        if (run := archive.run(arm, seed)) is not None
    ]
    # the runs' commits, trees, times and pre-registration (archives without them: no key)
    provenance = integrity(archive, archive.runs(arms))
    if provenance is not None:
        summary["integrity"] = provenance
    table = ""
    if getattr(cfg, "screen", False):
        from framework.eval.screen import (
            parts_markdown,
            row_machines,
            screen_markdown,
            screen_parts,
            screen_rows,
        )

        summary["screen"] = screen_rows(summary, archive, arms, cfg.baseline, cfg=cfg)
        parts = screen_parts(cfg)
        in_parts = {r["arm"]: p["name"] for p in parts for r in p["rows"]}
        table = screen_markdown(cfg, summary["screen"], in_parts=in_parts)
        if parts:
            summary["screen_parts"] = [
                {"name": p["name"], "archive": p["archive"], "rows": p["rows"]} for p in parts
            ]
            table += parts_markdown(parts, row_machines(summary["screen"]))
        if marks := integrity_lines(provenance):  # on the page too, above the table
            table = "\n".join(marks) + "\n" + table
    (root / f"study{suffix}.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    text = _markdown(cfg, summary, plots, root, screen_table=table)
    if subset_of:
        head, rest = text.split("\n", 1)
        text = (
            f"{head} (seeds {list(seeds)} only)\n\n**A sensitivity analysis that decides nothing:** "
            f"every figure below pools seeds {list(seeds)} of the study's {list(subset_of)}; the "
            "study's own report (`study.md`) pools them all. `seekrl-study report_only=true "
            f"only_seeds=[{','.join(str(x) for x in seeds)}]` regenerates this page from "
            "`archive/`.\n" + rest
        )
    (root / f"study{suffix}.md").write_text(text)
    if getattr(cfg, "screen", False) and cfg.publish and publish:
        publish_screen(root, cfg, table)
    return summary


def published_records(publish: str | Path) -> Path:
    """The folder beside a screen's page (``publish``) that holds its records and report:
    ``docs/benchmarks/screen.md`` -> ``docs/benchmarks/screen``."""
    return Path(publish).with_suffix("")


def publish_screen(root: Path, cfg: Any, table: str) -> Path:
    """Writes the screening ``table`` to ``cfg.publish`` (``docs/benchmarks/screen.md``) with the
    records it comes from beside it: ``root``'s archive copied to the folder of the same name
    (``docs/benchmarks/screen/archive``) and the study's report written there from that copy, so
    that what the page shows is committed with it and regenerates from it. Reporting from that
    folder itself (``report_only=true out_dir=docs/benchmarks/screen``) rewrites the page only.
    Returns the records folder."""
    import shutil

    target = Path(cfg.publish)
    records = published_records(target)
    if records.resolve() != root.resolve():
        if (records / "archive").exists():
            shutil.rmtree(records / "archive")  # a run that left the screen drops out of it too
        shutil.copytree(root / "archive", records / "archive")
        write_report(records, cfg, publish=False)
    target.parent.mkdir(parents=True, exist_ok=True)
    head = (
        f"# {cfg.name}: the screening table\n\nWritten by `seekrl-study` from the records in "
        f"`{records}/archive` (their full report: `{records}/study.md`; the training curves: "
        f"`{records}/curves/`); "
        f"`seekrl-study study={cfg.name} out_dir={records} report_only=true` regenerates both "
        "from them.\n\n"
    )
    target.write_text(head + table)
    return records


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def _ci(ci: Sequence[float]) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _diff(d: dict[str, Any]) -> str:
    sign = "excludes 0" if d["excludes_zero"] else "includes 0"
    return f"{d['diff']:+.3f} {_ci([d['ci'][0], d['ci'][1]])} ({sign}, p={d['p_value']:.3f})"


def _power_lines(versus: dict[str, dict[str, Any]]) -> list[str]:
    """What each Pass@1 comparison could detect, from the spread of its per-question differences."""
    lines = [
        "",
        "What each Pass@1 comparison can detect (80% power, normal approximation; "
        "`framework.eval.paired.detectable_difference`):",
        "",
    ]
    for arm, d in versus.items():
        p = d["Pass@1"]
        line = (
            f"- {arm}: per-question differences have SD {p['sd']:.3f} over {p['questions']} "
            f"questions, so a true difference of {p['detectable']:.3f} either way shows"
        )
        if p["diff"] != 0 and p["sd"] > 0:
            n = questions_needed(p["sd"], p["diff"])
            line += f"; a true {p['diff']:+.3f} (the measured one) would need about {n} questions"
        lines.append(line + ".")
    return lines


def _start_k(s: dict[str, Any]) -> str:
    return f"{s['start']['k']} samples per question" if "start" in s else "not evaluated"


def _test_line(s: dict[str, Any]) -> str:
    """How many times each policy was evaluated on the test split (the protocol counts them)."""
    counts = s.get("test_evaluations") or {}
    if not counts:
        return "Test-split evaluations: none (this study evaluated on validation only)."
    return (
        "Test-split evaluations (each counted when it finished): "
        + ", ".join(f"{policy} {n}" for policy, n in sorted(counts.items()))
        + "."
    )


def _power_cell(d: dict[str, Any]) -> str:
    p = d["power_at_min_effect"]
    return "n/a" if p != p else f"{p:.2f}"


def _three_way_lines(s: dict[str, Any]) -> list[str]:
    """Pass@1 differences by the three resampling schemes, side by side, with their power."""
    if not s["pass1_three_ways"]:
        return []
    m = s["min_effect"]
    lines = [
        "",
        "## Pass@1 differences three ways, and the power for the smallest difference that matters",
        "",
        "Questions: resample questions (seeds fixed). Answer clusters: resample the groups of "
        "questions that share an answer, so questions about one answer count once. Seeds: resample "
        "each arm's seeds, then the questions. Power: the chance that the design's interval "
        f"excludes 0 if the true difference were {m:+.3f} (`min_effect`), from the resampling "
        "standard error.",
        "",
        "| comparison | questions [95% CI] | power | answer clusters [95% CI] | power | "
        "seeds [95% CI] | power |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, d in s["pass1_three_ways"].items():
        cells = []
        for scheme in ("questions", "answer_clusters", "seeds"):
            if scheme in d:
                cells += [_diff(d[scheme]), _power_cell(d[scheme])]
            else:
                cells += ["- (one seed each)", "-"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def verdict(name: str, d: dict[str, Any]) -> str:
    """The decision rule on one comparison ``"b - a"`` (``name``) and its interval ``d``: ``b``
    beats ``a`` when the interval lies above 0, ``a`` beats ``b`` when below, otherwise no
    difference shown."""
    b, a = name.split(" - ", 1)
    side = interval_side(d["ci"])
    return f"{b} beats {a}" if side > 0 else f"{a} beats {b}" if side < 0 else "no difference shown"


def _decision_lines(s: dict[str, Any]) -> list[str]:
    """Every Pass@1 comparison read by the decision rule on its primary interval: the seed
    bootstrap where an arm has several seeds, else the question bootstrap."""
    if not s["pass1_three_ways"]:
        return []
    m = s["min_effect"]
    lines = [
        "",
        "## Decisions (the rule applied to each comparison)",
        "",
        "Rule: a comparison `b - a` shows that b beats a when its 95% interval lies above 0, that "
        "a beats b when it lies below 0, and otherwise no difference; the interval is the seed "
        "bootstrap where the arms have several seeds (each arm's seeds resampled, then questions), "
        "else the question bootstrap. Power: the chance that this interval excludes 0 if the true "
        f"difference were {m:+.3f} (`min_effect`). Which comparison is primary is the study's "
        "pre-registration's to say; each is read on its own here.",
        "",
        "| comparison | interval | difference [95% CI] | power | decision |",
        "|---|---|---|---|---|",
    ]
    for name, d in s["pass1_three_ways"].items():
        scheme = "seeds" if "seeds" in d else "questions"
        lines.append(
            f"| {name} | {scheme} | {_diff(d[scheme])} | {_power_cell(d[scheme])} | "
            f"{verdict(name, d[scheme])} |"
        )
    return lines


def _sizing_lines(s: dict[str, Any]) -> list[str]:
    """The same rollout budget split into questions x samples, from the measured variance."""
    if not s["sizing"]:
        return []
    lines = [
        "",
        "## Sizing the next evaluation (questions x samples for the same rollout budget)",
        "",
        "From the measured variance of the Pass@1 difference: `between` questions (what more "
        "questions average out) and `within` a question (what more samples average out; "
        "`framework.eval.paired.variance_components`). Detectable: the true difference found "
        "with 80% power; questions beyond the split's size are not available.",
        "",
        "| comparison | between | within | rollouts per policy | samples per question | questions "
        "| standard error | detectable | power at min_effect |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, z in s["sizing"].items():
        for d in z["designs"]:
            lines.append(
                f"| {name} | {z['between']:.4f} | {z['within']:.4f} | {z['budget']} | "
                f"{d['samples_per_question']} | {d['questions']} | {d['se']:.4f} | "
                f"{d['detectable']:.3f} | {d['power_at_min_effect']:.2f} |"
            )
    return lines


def _baseline_seeds(cfg: Any) -> str:
    """``" (the baseline `grpo`: [0, 1, 2])"`` for a replicated baseline, else ``""``."""
    extra = getattr(cfg, "baseline_seeds", None) or []
    return f" (the baseline `{cfg.baseline}`: {list(extra)})" if extra else ""


def _partial_lines(cfg: Any, s: dict[str, Any]) -> list[str]:
    """A warning when some (arm, seed) of the study is not evaluated yet: the tables cover only
    the evaluated ones, and arms pooled over different seeds are compared as they are."""
    status = {(r["arm"], r["seed"]): r["status"] for r in s.get("runs", [])}
    inert = getattr(cfg, "inert_arms", None) or {}  # listed by the screen, never trained
    jobs = [(a, seed) for a in cfg.arms if a not in inert for seed in arm_seeds(cfg, a)]
    missing = [
        f"{arm} seed {seed} ({status.get((arm, seed), 'pending')})"
        for arm, seed in jobs
        if seed not in s["arms"].get(arm, {}).get("seeds", [])
    ]
    if not missing:
        return []
    return [
        f"**Partial report:** {len(missing)} of {len(jobs)} runs not "
        f"evaluated yet, left out of every table: {', '.join(missing)}. An arm is pooled "
        "over its evaluated seeds only (the `seeds` column), so arms with different seeds are "
        "compared on different seed sets.",
        "",
    ]


def _entity_rate_lines(hists: dict[str, dict[str, Any]]) -> list[str]:
    """The distribution of ``γ̂`` over each arm's wrong training rollouts (pooled over seeds)."""
    if not hists:
        return []
    edges = next(iter(hists.values()))["edges"]
    bins = [f"({a:g}, {b:g}{')' if b >= 1 else ']'}" for a, b in pairwise(edges)]
    lines = [
        "",
        "## E-GRPO's normalised entity rate over the wrong training rollouts",
        "",
        "Every wrong rollout of every training step, recomputed from the runs' saved trajectories "
        "with each run's own reward settings (a GRPO or control arm: what E-GRPO with the default "
        "rule would have credited): the share of its question's E_q named in its thinking over "
        "the best share in its group (γ̂). Share of the wrong rollouts per bin; the paper finds "
        "the distribution bimodal.",
        "",
        "| arm | runs | wrong rollouts | mean γ̂ | credited (γ̂ > 0) | γ̂ = 0 | "
        + " | ".join(bins)
        + " | γ̂ = 1 |",
        "|---|---|---|---|---|---|" + "---|" * len(bins) + "---|",
    ]
    for arm, h in hists.items():
        n = h["n"]
        shares = [h["zero"], *h["interior"], h["full"]]
        cells = " | ".join(f"{c / n:.3f}" for c in shares)
        lines.append(
            f"| {arm} | {h['runs']} | {n} | {h['mean']:.3f} | {1 - h['zero'] / n:.3f} | {cells} |"
        )
    return lines


def _seed_lines(cfg: Any, s: dict[str, Any]) -> list[str]:
    """The comparisons again with each arm's seeds resampled too (``seed_bootstrap``): the
    tables above hold the seeds fixed, so they speak for these runs; these speak for the arms."""
    rows = [("the warm start", arm, d) for arm, d in s.get("versus_start_seeds", {}).items()]
    rows += [(f"`{cfg.baseline}`", arm, d) for arm, d in s.get("versus_baseline_seeds", {}).items()]
    if not rows:
        return []
    lines = [
        "",
        "## Resampling seeds too (two-level bootstrap: each arm's seeds, then the questions)",
        "",
        "The tables above resample questions with each arm's seeds fixed: they say how sure the "
        "difference is for these runs. Here every resample also draws each arm's seeds with "
        "replacement (`framework.eval.paired.seed_bootstrap`), so the interval covers the spread "
        "between seeds as well; with few seeds (a bootstrap of 3 values has 2/3 of their "
        "variance) it understates it.",
        "",
        "| arm | minus | " + " | ".join(FIGURES.values()) + " |",
        "|---|---" + "|---" * len(FIGURES) + "|",
    ]
    for versus, arm, d in rows:
        lines.append(
            f"| {arm} | {versus} | " + " | ".join(_diff(d[f]) for f in FIGURES.values()) + " |"
        )
    return lines


def _markdown(
    cfg: Any, s: dict[str, Any], plots: Sequence[Path], root: Path, screen_table: str = ""
) -> str:
    e = cfg.eval
    arms = ", ".join(f"`{a}` ({' '.join(v)})" for a, v in cfg.arms.items())
    lines = [
        f"# Study `{cfg.name}`",
        "",
        f"Arms: {arms}; seeds "
        f"{list(cfg.seeds)}{_baseline_seeds(cfg)}; shared overrides: "
        f"`{' '.join(cfg.overrides) or '(none)'}`.",
        f"Evaluation: {e.questions or 'all'} {e.split} questions x {e.samples_per_question} samples "
        f"per run (the warm start: {_start_k(s)}), sampling seed {e.seed}, the same for every "
        f"policy. Intervals: 95% percentile bootstrap ({cfg.bootstrap} resamples); differences are "
        "paired by question. Every figure below is computed from the records in `archive/` "
        "(`seekrl-study report_only=true` regenerates this report from them).",
        "",
        _test_line(s),
        "",
    ]
    lines += _partial_lines(cfg, s)
    if screen_table:  # a screen's table (and its parts'), as its page shows it
        lines += [screen_table, ""]
    else:  # the runs' commits and pre-registration (a screen's table begins with them)
        lines += integrity_lines(s.get("integrity"))
    lines += ["## Pass@1 per arm (pooled over seeds)", ""]
    lines += [
        "| policy | seeds | samples per question | Pass@1 [95% CI] | Pass@k | tool calls | turns "
        "| format errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    if "start" in s:
        st = s["start"]
        lines.append(
            f"| warm start | - | {st['k']} | {st['pass@1']:.3f} {_ci(st['pass@1_ci'])} | "
            f"{st['pass@k']:.3f} | {st['tool_calls']:.2f} | {st['turns']:.2f} | "
            f"{st['format_error_rate']:.3f} |"
        )
    for arm, a in s["arms"].items():
        lines.append(
            f"| {arm} | {len(a['seeds'])} | {a['k']} x {len(a['seeds'])} | {a['pass@1']:.3f} "
            f"{_ci(a['pass@1_ci'])} | {a['pass@k']:.3f} | {a['tool_calls']:.2f} | "
            f"{a['turns']:.2f} | {a['format_error_rate']:.3f} |"
        )
    lines += [
        "",
        "### Per seed",
        "",
        "| arm | seed | Pass@1 [95% CI] | minus the warm start (paired) | tool calls |",
        "|---|---|---|---|---|",
    ]
    for arm, a in s["arms"].items():
        for seed, p in a["per_seed"].items():
            gain = _diff(p["minus_start"]) if "minus_start" in p else "-"
            lines.append(
                f"| {arm} | {seed} | {p['pass@1']:.3f} {_ci(p['pass@1_ci'])} | {gain} | "
                f"{p['tool_calls']:.2f} |"
            )
    if s["versus_start"]:
        lines += ["", "## Each arm minus the warm start (paired over questions)", ""]
        lines += [
            "| arm | " + " | ".join(FIGURES.values()) + " |",
            "|---" * (len(FIGURES) + 1) + "|",
        ]
        for arm, d in s["versus_start"].items():
            lines.append(f"| {arm} | " + " | ".join(_diff(d[f]) for f in FIGURES.values()) + " |")
        lines += _power_lines(s["versus_start"])
    if s["by_hops"]:
        lines += ["", "### Pass@1 by hop count, each arm minus the warm start (paired)", ""]
        lines += [
            "| arm | hops | questions | warm start | arm | difference |",
            "|---|---|---|---|---|---|",
        ]
        for arm, by in s["by_hops"].items():
            for h, d in by.items():
                lines.append(
                    f"| {arm} | {h} | {d['questions']} | {d['a_mean']:.3f} | {d['b_mean']:.3f} | "
                    f"{_diff(d)} |"
                )
    if s["versus_baseline"]:
        lines += ["", f"## Each arm minus `{cfg.baseline}` (paired over questions)", ""]
        lines += [
            "| arm | " + " | ".join(FIGURES.values()) + " |",
            "|---" * (len(FIGURES) + 1) + "|",
        ]
        for arm, d in s["versus_baseline"].items():
            lines.append(f"| {arm} | " + " | ".join(_diff(d[f]) for f in FIGURES.values()) + " |")
        lines += _power_lines(s["versus_baseline"])
    lines += _seed_lines(cfg, s)
    lines += _three_way_lines(s)
    lines += _decision_lines(s)
    lines += _sizing_lines(s)
    lines += [
        "",
        "## Entity analysis on the hidden bridge entities (anchor and answer not counted)",
        "",
        "Questions with bridges (two hops or more) only. The anchor is named by the question and "
        "the answer is written by every correct rollout, so they are left out.",
        "",
        "| policy | questions with bridges | with correct and wrong | correct matches more | "
        "wrong matches more | ties | mean bridges matched (correct) | (wrong) | bridge match rate "
        "| wrong rollouts with a bridge |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    ents = ([("warm start", s["start"].get("entity"))] if "start" in s else []) + [
        (arm, a["entity"]) for arm, a in s["arms"].items()
    ]
    for label, en in ents:
        if en:
            lines.append(
                f"| {label} | {en['questions_with_bridges']} | "
                f"{en['questions_with_correct_and_wrong']} | {en['correct_matches_more']} | "
                f"{en['wrong_matches_more']} | {en['ties']} | {_pct(en['mean_matched_correct'])} | "
                f"{_pct(en['mean_matched_wrong'])} | {en['bridge_match_rate']:.3f} | "
                f"{_pct(en['wrong_with_a_bridge'])} |"
            )
    lines += _entity_rate_lines(s.get("wrong_entity_rates") or {})
    if s["curves"]:
        lines += [
            "",
            "## Training curves (first quarter -> last quarter of the steps, mean over seeds)",
            "",
            "| arm | metric | runs | first | last | change |",
            "|---|---|---|---|---|---|",
        ]
        for r in s["curves"]:
            lines.append(
                f"| {r['arm']} | {r['tag']} | {r['runs']} | {r['first']:.3f} | {r['last']:.3f} | "
                f"{r['change']:+.3f} |"
            )
        lines += [""] + [f"![{p.stem}]({p.relative_to(root)})" for p in plots]
    lines += ["", "## Runs", ""]
    lines += [
        "| arm | seed | status | training seconds (all steps) | last launch (s) | git commit | precision |"
    ]
    lines += ["|---|---|---|---|---|---|---|"]
    for r in s["runs"]:
        v = r["versions"] or {}
        steps = "n/a" if r["train_seconds"] is None else f"{r['train_seconds']:.0f}"
        lines.append(
            f"| {r['arm']} | {r['seed']} | {r['status']} | {steps} | {r['seconds']:.0f} | "
            f"{v.get('git_commit', 'n/a')} | {v.get('precision', 'n/a')} |"
        )
    failed = [r for r in s["runs"] if r["status"] == "failed"]
    if failed:
        lines += ["", "**Failed runs** (left out of every table above; see their study_error.txt):"]
        lines += [f"- {r['arm']} seed {r['seed']}: {r['dir']}" for r in failed]
    lines += [
        "",
        "Each run's resolved config is `runs/<arm>/seed<S>/config.yaml`, its package versions, CPU, "
        "precision and git commit `versions.json`; the evaluations are in `eval/`.",
        "",
    ]
    return "\n".join(lines)
