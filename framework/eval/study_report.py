"""The study's report: per-arm tables, paired differences, entity analysis, curves, provenance.

Reads what ``seekrl-study`` left in its directory (``eval/start``, ``eval/<arm>/seed<S>``,
``runs/<arm>/seed<S>``) and writes ``study.md``, ``study.json`` and ``curves/*.png``. Pass@1 of an
arm pooled over seeds is the mean over questions of the seeds' per-question means; its interval and
every difference (arm minus baseline, arm minus warm start) resample questions (paired bootstrap).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from framework.eval.curves import curve_table, plot_arms, read_scalars
from framework.eval.paired import (
    PairedResult,
    load_samples,
    paired_bootstrap,
    per_question,
    pooled_per_question,
    questions_needed,
    seed_bootstrap,
)

#: training curves drawn per arm (mean over seeds, band = min..max)
CURVE_TAGS = (
    "rollout/reward",
    "rollout/accuracy",
    "rollout/entity_match_rate",
    "rollout/zero_variance_groups",
    "rollout/response_length",
    "rollout/tool_calls",
    "loss/entropy",
)

#: per-rollout figures compared between arms (key in samples.jsonl -> label)
FIGURES = {
    "correct": "Pass@1",
    "tool_calls": "tool calls",
    "turns": "turns",
    "format_error": "format errors",
}


def _rows(eval_dir: Path) -> list[dict[str, Any]]:
    rows = load_samples(eval_dir)
    for r in rows:
        r["format_error"] = float(r.get("status") == "format_error")
    return rows


def _mean_ci(values: Mapping[Any, float], n_boot: int) -> PairedResult:
    """Mean over questions with its bootstrap interval (a paired comparison against zero)."""
    return paired_bootstrap(dict.fromkeys(values, 0.0), values, n_boot=n_boot)


def _entity(results: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The paper's analysis summed over seeds: matched entities in correct vs wrong rollouts."""
    ents = [r["entity"] for r in results if r.get("entity")]
    if not ents:
        return None
    both = sum(e["questions_with_correct_and_wrong"] for e in ents)
    return {
        "questions_with_correct_and_wrong": both,
        "correct_matches_more": sum(e["correct_matches_more"] for e in ents),
        "wrong_matches_more": sum(e["wrong_matches_more"] for e in ents),
        "ties": sum(e["ties"] for e in ents),
        "match_rate": sum(e["match_rate"] for e in ents) / len(ents),
        "mean_matched_correct": _nanmean([e["mean_matched_correct"] for e in ents]),
        "mean_matched_wrong": _nanmean([e["mean_matched_wrong"] for e in ents]),
    }


def _nanmean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None and v == v]
    return sum(vals) / len(vals) if vals else None


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


def train_seconds(run: Path) -> float | None:
    """Seconds the run's steps took, summed over every step it logged (``timing/step``): the
    whole run, also when it was resumed by a later process; None without logged steps."""
    steps = read_scalars(run).get("timing/step", []) if (run / "tensorboard").is_dir() else []
    return sum(v for _, v in steps) if steps else None


def _overall(eval_dir: Path) -> dict[str, Any]:
    datasets = json.loads((eval_dir / "results.json").read_text())["datasets"]
    if len(datasets) != 1:
        raise ValueError(f"[study] {eval_dir} evaluated {len(datasets)} datasets; expected one.")
    return next(iter(datasets.values()))["overall"]


def summarize_study(
    root: Path, arms: Sequence[str], seeds: Sequence[int], baseline: str, n_boot: int
) -> dict[str, Any]:
    """Every figure of the report, from the evaluation directories under ``root``."""
    start_dir = root / "eval" / "start"
    start = _rows(start_dir) if (start_dir / "samples.jsonl").is_file() else None
    out: dict[str, Any] = {
        "arms": {},
        "versus_baseline": {},
        "versus_start": {},
        "versus_baseline_seeds": {},
        "versus_start_seeds": {},
        "by_hops": {},
    }
    pooled: dict[str, dict[str, dict[Any, float]]] = {}
    by_seed: dict[str, dict[str, list[dict[Any, float]]]] = {}
    if start is not None:
        o = _overall(start_dir)
        out["start"] = {
            "pass@1": o["pass@1"],
            "pass@1_ci": o["pass@1_ci"],
            "k": o["k"],
            f"pass@{o['k']}": o[f"pass@{o['k']}"],
            "tool_calls": o["tool_calls"],
            "turns": o["turns"],
            "format_error_rate": o["format_error_rate"],
            "entity": o.get("entity"),
        }
    # the warm start's per-question figures, shared by every arm's comparisons
    start_pq = {key: per_question(start, key) for key in FIGURES} if start is not None else {}
    for arm in arms:
        seeds_done = [
            s for s in seeds if (root / "eval" / arm / f"seed{s}" / "samples.jsonl").is_file()
        ]
        if not seeds_done:
            continue
        per_seed = {}
        figures: dict[str, list[dict[Any, float]]] = {k: [] for k in FIGURES}
        results, seed_rows = [], []
        for s in seeds_done:
            d = root / "eval" / arm / f"seed{s}"
            rows = _rows(d)
            seed_rows.append(rows)
            o = _overall(d)
            results.append(o)
            k = o["k"]
            per_seed[s] = {
                "pass@1": o["pass@1"],
                "pass@1_ci": o["pass@1_ci"],
                f"pass@{k}": o[f"pass@{k}"],
                "tool_calls": o["tool_calls"],
                "turns": o["turns"],
                "format_error_rate": o["format_error_rate"],
            }
            for key in FIGURES:
                figures[key].append(per_question(rows, key))
        pooled[arm] = {key: pooled_per_question(v) for key, v in figures.items()}
        by_seed[arm] = figures
        p1 = _mean_ci(pooled[arm]["correct"], n_boot)
        k = results[0]["k"]
        out["arms"][arm] = {
            "seeds": seeds_done,
            "pass@1": p1.diff,
            "pass@1_ci": [p1.low, p1.high],
            "questions": p1.n,
            f"pass@{k}": sum(r[f"pass@{k}"] for r in results) / len(results),
            "tool_calls": sum(r["tool_calls"] for r in results) / len(results),
            "turns": sum(r["turns"] for r in results) / len(results),
            "format_error_rate": sum(r["format_error_rate"] for r in results) / len(results),
            "per_seed": per_seed,
            "entity": _entity(results),
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
    return out


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
        "detectable": r.detectable,
    }


def write_study(root: Path, cfg: Any, states: Sequence[Any]) -> dict[str, Any]:
    """``study.md``, ``study.json`` and ``curves/`` for the study in ``root``."""
    arms, seeds = list(cfg.arms), list(cfg.seeds)
    summary = summarize_study(root, arms, seeds, cfg.baseline, cfg.bootstrap)
    runs = {
        arm: [
            root / "runs" / arm / f"seed{s}"
            for s in seeds
            if (root / "runs" / arm / f"seed{s}" / "tensorboard").is_dir()
        ]
        for arm in arms
    }
    runs = {a: r for a, r in runs.items() if r}
    plots = plot_arms(runs, list(CURVE_TAGS), root / "curves", title_prefix=f"{cfg.name}: ")
    table = curve_table(runs, list(CURVE_TAGS))
    summary["curves"] = table
    summary["runs"] = [
        {
            "arm": s.arm,
            "seed": s.seed,
            "status": s.status,
            "seconds": s.seconds,
            "train_seconds": train_seconds(root / "runs" / s.arm / f"seed{s.seed}"),
            "dir": str(root / "runs" / s.arm / f"seed{s.seed}"),
            "versions": _read_json(root / "runs" / s.arm / f"seed{s.seed}" / "versions.json"),
        }
        for s in states
    ]
    (root / "study.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    (root / "study.md").write_text(_markdown(cfg, summary, plots, root))
    return summary


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


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


def _partial_lines(cfg: Any, s: dict[str, Any]) -> list[str]:
    """A warning when some (arm, seed) of the study is not evaluated yet: the tables cover only
    the evaluated ones, and arms pooled over different seeds are compared as they are."""
    status = {(r["arm"], r["seed"]): r["status"] for r in s.get("runs", [])}
    missing = [
        f"{arm} seed {seed} ({status.get((arm, seed), 'pending')})"
        for arm in cfg.arms
        for seed in cfg.seeds
        if seed not in s["arms"].get(arm, {}).get("seeds", [])
    ]
    if not missing:
        return []
    return [
        f"**Partial report:** {len(missing)} of {len(cfg.arms) * len(cfg.seeds)} runs not "
        f"evaluated yet, left out of every table: {', '.join(missing)}. An arm is pooled "
        "over its evaluated seeds only (the `seeds` column), so arms with different seeds are "
        "compared on different seed sets.",
        "",
    ]


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


def _markdown(cfg: Any, s: dict[str, Any], plots: Sequence[Path], root: Path) -> str:
    e = cfg.eval
    arms = ", ".join(f"`{a}` ({' '.join(v)})" for a, v in cfg.arms.items())
    lines = [
        f"# Study `{cfg.name}`",
        "",
        f"Arms: {arms}; seeds "
        f"{list(cfg.seeds)}; shared overrides: `{' '.join(cfg.overrides) or '(none)'}`.",
        f"Evaluation: {e.questions or 'all'} {e.split} questions x {e.samples_per_question} samples, "
        f"sampling seed {e.seed}, the same for every policy. Intervals: 95% percentile bootstrap "
        f"over questions ({cfg.bootstrap} resamples); differences are paired by question.",
        "",
    ]
    lines += _partial_lines(cfg, s)
    lines += ["## Pass@1 per arm (pooled over seeds)", ""]
    k = e.samples_per_question
    lines += [
        f"| policy | seeds | Pass@1 [95% CI] | Pass@{k} | tool calls | turns | format errors |",
        "|---|---|---|---|---|---|---|",
    ]
    if "start" in s:
        st = s["start"]
        lines.append(
            f"| warm start | - | {st['pass@1']:.3f} {_ci(st['pass@1_ci'])} | "
            f"{st[f'pass@{k}']:.3f} | {st['tool_calls']:.2f} | {st['turns']:.2f} | "
            f"{st['format_error_rate']:.3f} |"
        )
    for arm, a in s["arms"].items():
        lines.append(
            f"| {arm} | {len(a['seeds'])} | {a['pass@1']:.3f} {_ci(a['pass@1_ci'])} | "
            f"{a[f'pass@{k}']:.3f} | {a['tool_calls']:.2f} | {a['turns']:.2f} | "
            f"{a['format_error_rate']:.3f} |"
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
    lines += [
        "",
        "## Entity analysis (the paper's: entities matched in correct vs wrong rollouts)",
        "",
        "| policy | questions with both | correct matches more | wrong matches more | ties | "
        "mean matched (correct) | mean matched (wrong) | match rate |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ents = ([("warm start", s["start"].get("entity"))] if "start" in s else []) + [
        (arm, a["entity"]) for arm, a in s["arms"].items()
    ]
    for label, en in ents:
        if en:
            lines.append(
                f"| {label} | {en['questions_with_correct_and_wrong']} | {en['correct_matches_more']} | "
                f"{en['wrong_matches_more']} | {en['ties']} | {_pct(en['mean_matched_correct'])} | "
                f"{_pct(en['mean_matched_wrong'])} | {en['match_rate']:.3f} |"
            )
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
