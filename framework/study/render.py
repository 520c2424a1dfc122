"""The study report as Markdown (:func:`study_markdown`), section by section, from the figures
:func:`framework.study.summary.summarize_study` computed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from pathlib import Path

from framework.eval.paired import interval_side, questions_needed
from framework.study.integrity import integrity_lines
from framework.study.learning_bar import bar_lines
from framework.study.schema import StudyConfig, arm_seeds
from framework.study.summary import FIGURES, PoweredResult, Result, StudySummary
from framework.study.types import PooledHistogram


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def _ci(ci: Sequence[float]) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _diff(d: Result) -> str:
    sign = "excludes 0" if d["excludes_zero"] else "includes 0"
    return f"{d['diff']:+.3f} {_ci([d['ci'][0], d['ci'][1]])} ({sign}, p={d['p_value']:.3f})"


def _power_lines(versus: Mapping[str, Mapping[str, Result]]) -> list[str]:
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


def _start_k(s: StudySummary) -> str:
    return f"{s['start']['k']} samples per question" if "start" in s else "not evaluated"


def _test_line(s: StudySummary) -> str:
    """How many times each policy was evaluated on the test split (the protocol counts them)."""
    counts = s.get("test_evaluations") or {}
    if not counts:
        return "Test-split evaluations: none (this study evaluated on validation only)."
    return (
        "Test-split evaluations (each counted when it finished): "
        + ", ".join(f"{policy} {n}" for policy, n in sorted(counts.items()))
        + "."
    )


def _power_cell(d: PoweredResult) -> str:
    p = d["power_at_min_effect"]
    return "n/a" if p != p else f"{p:.2f}"


def _three_way_lines(s: StudySummary) -> list[str]:
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


def verdict(name: str, d: Result) -> str:
    """The decision rule on one comparison ``"b - a"`` (``name``) and its interval ``d``: ``b``
    beats ``a`` when the interval lies above 0, ``a`` beats ``b`` when below, otherwise no
    difference shown."""
    b, a = name.split(" - ", 1)
    side = interval_side(d["ci"])
    return f"{b} beats {a}" if side > 0 else f"{a} beats {b}" if side < 0 else "no difference shown"


def _decision_lines(s: StudySummary) -> list[str]:
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


def _sizing_lines(s: StudySummary) -> list[str]:
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


def _baseline_seeds(cfg: StudyConfig) -> str:
    """``" (the baseline `grpo`: [0, 1, 2])"`` for a replicated baseline, else ``""``."""
    extra = getattr(cfg, "baseline_seeds", None) or []
    return f" (the baseline `{cfg.baseline}`: {list(extra)})" if extra else ""


def _partial_lines(cfg: StudyConfig, s: StudySummary) -> list[str]:
    """A warning when some (arm, seed) of the study is not evaluated yet: the tables cover only
    the evaluated ones, and arms pooled over different seeds are compared as they are."""
    status = {(r["arm"], r["seed"]): r["status"] for r in s.get("runs", [])}
    inert = getattr(cfg, "inert_arms", None) or {}  # listed by the screen, never trained
    jobs = [(a, seed) for a in cfg.arms if a not in inert for seed in arm_seeds(cfg, a)]
    missing = [
        f"{arm} seed {seed} ({status.get((arm, seed), 'pending')})"
        for arm, seed in jobs
        if arm not in s["arms"] or seed not in s["arms"][arm].get("seeds", [])
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


def _entity_rate_lines(hists: Mapping[str, PooledHistogram]) -> list[str]:
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


def _seed_lines(cfg: StudyConfig, s: StudySummary) -> list[str]:
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


def study_markdown(
    cfg: StudyConfig, s: StudySummary, plots: Sequence[Path], root: Path, screen_table: str = ""
) -> str:
    """The report ``study.md`` from the summary ``s`` (:func:`~framework.study.summary.
    summarize_study`), the curves' ``plots`` (linked relative to ``root``) and, for a screen, its
    table (``screen_table``), which stands in for the provenance lines it begins with."""
    lines = _header_lines(cfg, s)
    lines += _partial_lines(cfg, s)
    if screen_table:  # a screen's table (and its parts'), as its page shows it
        lines += [screen_table, ""]
    else:  # the runs' commits and pre-registration (a screen's table begins with them)
        lines += integrity_lines(s.get("integrity"))
    lines += bar_lines(s.get("learning_bar"))  # issue 79's bar, where the study sets one
    lines += _arm_lines(s)
    lines += _versus_lines("the warm start", s["versus_start"])
    lines += _hop_lines(s)
    lines += _versus_lines(f"`{cfg.baseline}`", s["versus_baseline"])
    lines += _seed_lines(cfg, s)
    lines += _three_way_lines(s)
    lines += _decision_lines(s)
    lines += _sizing_lines(s)
    lines += _bridge_lines(s)
    lines += _entity_rate_lines(s.get("wrong_entity_rates") or {})
    lines += _curve_lines(s, plots, root)
    lines += _run_lines(s)
    return "\n".join(lines)


def _header_lines(cfg: StudyConfig, s: StudySummary) -> list[str]:
    """The title, the arms and seeds, how every policy was evaluated, the test-split count."""
    e = cfg.eval
    arms = ", ".join(f"`{a}` ({' '.join(v)})" for a, v in cfg.arms.items())
    return [
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


def _arm_lines(s: StudySummary) -> list[str]:
    """Pass@1 and the other figures of the warm start and of each arm pooled over its seeds,
    then of each seed."""
    lines = ["## Pass@1 per arm (pooled over seeds)", ""]
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
    return lines


def _versus_lines(whom: str, versus: Mapping[str, Mapping[str, Result]]) -> list[str]:
    """Each arm minus ``whom`` (the warm start, or the baseline) in every figure, paired over
    questions, with what each Pass@1 comparison can detect; [] when there is none."""
    if not versus:
        return []
    lines = ["", f"## Each arm minus {whom} (paired over questions)", ""]
    lines += [
        "| arm | " + " | ".join(FIGURES.values()) + " |",
        "|---" * (len(FIGURES) + 1) + "|",
    ]
    for arm, d in versus.items():
        lines.append(f"| {arm} | " + " | ".join(_diff(d[f]) for f in FIGURES.values()) + " |")
    return lines + _power_lines(versus)


def _hop_lines(s: StudySummary) -> list[str]:
    """Pass@1 by hop count, each arm minus the warm start; [] when the rows carry no hops."""
    if not s["by_hops"]:
        return []
    lines = ["", "### Pass@1 by hop count, each arm minus the warm start (paired)", ""]
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
    return lines


def _bridge_lines(s: StudySummary) -> list[str]:
    """The entity analysis on the hidden bridge entities, per policy (:func:`~framework.study.
    summary.bridge_analysis`)."""
    lines = [
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
    return lines


def _curve_lines(s: StudySummary, plots: Sequence[Path], root: Path) -> list[str]:
    """The training curves' first and last quarters per arm and metric, and the plots."""
    if not s["curves"]:
        return []
    lines = [
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
    return [*lines, "", *(f"![{p.stem}]({p.relative_to(root)})" for p in plots)]


def _run_lines(s: StudySummary) -> list[str]:
    """Every run's status, times, commit and precision, the failed runs, where the rest is."""
    lines = ["", "## Runs", ""]
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
    return [
        *lines,
        "",
        "Each run's resolved config is `runs/<arm>/seed<S>/config.yaml`, its package versions, CPU, "
        "precision and git commit `versions.json`; the evaluations are in `eval/`.",
        "",
    ]
