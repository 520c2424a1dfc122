"""The screening table: every registered method trained and evaluated alike, against one baseline.

``seekrl-study study=screen`` (``screen=true``) adds one arm per registered method, found when the
study starts (:func:`framework.cli.study.screen_arms`), so a component registered later, by a plugin
too, appears without editing the study:

- every algorithm bundle (``conf/algorithm/*.yaml``, and plugins' config folders), by its name;
- every advantage estimator, policy loss and sampler that no bundle selects, on the baseline bundle
  with that one component swapped in (``advantage-<name>``, ``loss-<name>``, ``sampler-<name>``);
  a loss that acts only off policy gets its second optimisation pass (``optim.policy_epochs=2``).

Each arm trains from the same cached warm start on the same questions for the same steps and
rollouts (the study's shared overrides), and is evaluated on the study's split (validation for a
screen). :func:`screen_rows` turns the study's summary and archive into one row per method: Pass@1
with its interval, the paired difference from the baseline with its interval, tool calls, the shares
of format errors and of answers lost to the budget, response tokens per rollout, seconds per
training step, peak memory, the CPU it trained on (a screen may span machines; its times compare
only within one), and the health monitors that fired. A method whose difference from the baseline
excludes 0 upwards is a *candidate* for a confirmatory study, not a winner: a screen runs one seed
per method and many comparisons. Below the table, :func:`screen_markdown` says what the comparisons
could detect (the true difference each finds with 80% power) and how many candidates chance alone
would give; when ``reward_collapse`` fired, :func:`shared_fall` says how closely the methods'
per-step training accuracy moves together (the arms share the question order, so a batch of hard
questions lowers every curve at once) and whether the mean of the curves trips the monitor's rule by
itself.

A method whose runs are the baseline's exactly (every training curve and every evaluation sample
the same, seed for seed) is marked *identical to the baseline*: its components never changed an
update at the screen's settings (a pruning rule no binary-reward advantage falls under, a mask
no pair of rollouts met), so its row measures nothing about the method, and "no difference
shown" would misread it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from framework.eval.paired import interval_side
from framework.health.config import monitor_config
from framework.registry.kinds import HEALTH_MONITORS

#: the training figure compared across methods under the table (:func:`shared_fall`): accuracy,
#: not reward, because rewards differ in scale between methods
SHARED_METRIC = "rollout/accuracy"

#: the reading of a method whose runs are the baseline's exactly (module docstring)
IDENTICAL = "identical to the baseline (the method changed no update here)"


def _verdict(diff: Mapping[str, Any] | None) -> str:
    if not diff:
        return "baseline"
    side = interval_side(diff["ci"])
    if side > 0:
        return "candidate (above the baseline; confirm with seeds)"
    return "below the baseline" if side < 0 else "no difference shown"


#: weakest first: an arm is as close to its papers as its least faithful component
FIDELITY_ORDER = ("reconstructed", "partial", "exact")


def arm_fidelity(methods: Sequence[Mapping[str, str]]) -> str:
    """How closely an arm follows its papers: the weakest ``fidelity`` among its components that
    name a paper (``"RECONSTRUCTED"`` loudly, so no reader takes it for the paper's method), with
    those components; ``""`` when none declares one (the formulas of docs/algorithms.md)."""
    for level in FIDELITY_ORDER:
        names = [m["name"] for m in methods if m.get("fidelity") == level]
        if names:
            label = "RECONSTRUCTED" if level == "reconstructed" else level
            return f"{label} ({', '.join(names)})"
    return ""


def same_as_baseline(archive: Any, arm: str, baseline: str, seeds: Sequence[int]) -> bool:
    """Whether every run of ``arm`` is the baseline's of its seed exactly: the same training
    curves (every logged figure at every step) and the same evaluation records, sample for
    sample. False when a run, its curves or the baseline's are missing: nothing is assumed."""
    for seed in seeds:
        ours, theirs = archive.run(arm, seed) or {}, archive.run(baseline, seed) or {}
        if not ours.get("curves") or ours.get("curves") != theirs.get("curves"):
            return False
        if not archive.has_eval(baseline, seed):
            return False
        if archive.records(arm, seed) != archive.records(baseline, seed):
            return False
    return bool(seeds)


def screen_rows(
    summary: Mapping[str, Any], archive: Any, arms: Sequence[str], baseline: str
) -> list[dict[str, Any]]:
    """One row per evaluated arm of a screen (module docstring), from the study's summary
    (:func:`~framework.eval.study_report.summarize_study`) and its archive."""
    rows = []
    for arm in arms:
        figures = summary["arms"].get(arm)
        if figures is None:
            continue
        diff = summary["versus_baseline"].get(arm, {}).get("Pass@1")
        tokens, steps, seconds, peaks, alarms, stopped = [], 0, 0.0, [], set(), []
        trained = 0.0  # training wall seconds of every seed, every launch
        resumed = False
        cpus: list[str] = []
        methods: list[Mapping[str, str]] = []
        curve = None  # the first seed's per-step training accuracy
        for seed in figures["seeds"]:
            recs = archive.records(arm, seed)
            tokens += [float(r["response_tokens"]) for r in recs if r.get("response_tokens")]
            run = archive.run(arm, seed) or {}
            if seed == figures["seeds"][0]:
                curve = (run.get("curves") or {}).get(SHARED_METRIC)
            if run.get("train_seconds"):
                trained += float(run["train_seconds"])
                if run.get("steps"):
                    seconds += float(run["train_seconds"])
                    steps += int(run["steps"])
            if run.get("peak_gb") is not None:
                peaks.append(float(run["peak_gb"]))
            # resumed from a checkpoint written before checkpoints kept the peak: its summary,
            # hence its peak, is its last launch's only
            resumed |= bool((run.get("config") or {}).get("resume")) and (
                run.get("earlier_launches_peak_gb") is None
            )
            alarms |= set(run.get("alarms", []))
            versions = run.get("versions") or {}
            cpu = versions.get("cpu")
            if cpu and versions.get("precision"):  # what the CPU ran: bf16 or fp32 differ
                cpu = f"{cpu}, {versions['precision']}"
            if cpu and cpu not in cpus:
                cpus.append(cpu)
            methods += [m for m in run.get("methods", []) if m not in methods]
            if run.get("stopped_by"):
                stopped.append(str(run["stopped_by"].get("monitor", "a monitor")))
        identical = arm != baseline and same_as_baseline(archive, arm, baseline, figures["seeds"])
        rows.append(
            {
                "arm": arm,
                "seeds": figures["seeds"],
                "pass@1": figures["pass@1"],
                "pass@1_ci": figures["pass@1_ci"],
                "minus_baseline": None if arm == baseline else diff,
                # the true difference this comparison finds with 80% power (paired.py)
                "detectable": diff.get("detectable") if diff and arm != baseline else None,
                "tool_calls": figures["tool_calls"],
                # the share of evaluation samples whose output broke the tool-call format
                "format_errors": figures.get("format_error_rate"),
                # the share that ran out of turns, tool calls or tokens without an answer
                "over_budget": figures.get("over_budget_rate"),
                "questions": figures.get("questions"),
                "response_tokens": sum(tokens) / len(tokens) if tokens else None,
                "seconds_per_step": seconds / steps if steps else None,
                "train_seconds": trained or None,
                "peak_gb": max(peaks) if peaks else None,
                "peak_last_launch": resumed,
                "machines": cpus,
                "monitors_fired": sorted(alarms),
                "stopped_by": stopped,
                "identical_to_baseline": identical,
                "verdict": "baseline"
                if arm == baseline
                else (IDENTICAL if identical else _verdict(diff)),
                "fidelity": arm_fidelity(methods),
                # the first seed's per-step training accuracy, [[step, value], ...]
                "accuracy_curve": sorted(curve) if curve else None,
            }
        )
    return rows


def row_machines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The machines (CPU and precision) the rows' runs trained on, each once, in row order."""
    return list(dict.fromkeys(m for r in rows for m in r.get("machines", [])))


def _methods(n: int) -> str:
    """``1 method``, ``2 methods``: a count in the table's prose."""
    return f"{n} method" if n == 1 else f"{n} methods"


def _num(v: float | None, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def screen_markdown(
    cfg: Any,
    rows: Sequence[Mapping[str, Any]],
    *,
    title: str = "Screening table",
    in_parts: Mapping[str, str] | None = None,
    machines_before: Sequence[str] = (),
) -> str:
    """The screening table as a Markdown section.

    Args:
        title: the section's heading, before its count of methods and its baseline.
        in_parts: arm -> the name of the part of the screen (:func:`screen_parts`) that evaluated
            it, for arms this table lacks: they are listed as evaluated there, not as missing.
        machines_before: machines an earlier table lettered; this one goes on from them.
    """
    seeds = sorted({s for r in rows for s in r["seeds"]})
    # the questions the records hold, which a split smaller than ``eval.questions`` caps
    counts = sorted({int(r["questions"]) for r in rows if r.get("questions")})
    asked = cfg.eval.questions
    if not counts:
        held = f"{asked} {cfg.eval.split} questions"
    else:
        held = f"{counts[0]}" + (f" to {counts[-1]}" if len(counts) > 1 else "")
        held += f" {cfg.eval.split} questions"
        if counts != [asked]:
            held += f" (the evaluated records; `eval.questions` asks for up to {asked})"
    lines = [
        f"## {title} ({_methods(len(rows))} evaluated, baseline `{cfg.baseline}`)",
        "",
        f"Seeds {seeds}, one per method: each interval below is one run's, so a difference says "
        "how this run differed on these questions, not how the method compares in general. "
        f"{held} x {cfg.eval.samples_per_question} "
        "samples; minus the baseline: paired bootstrap over questions. A candidate is a method "
        "whose difference excludes 0 upwards; it needs a confirmatory study with seeds.",
        "",
        "Fidelity: how closely the arm's components follow their papers (the weakest of them; "
        "blank: the formulas of docs/algorithms.md). A RECONSTRUCTED method's row measures our "
        "reading of its abstract, not the paper's method. Format errors: the share of evaluation "
        "samples whose output broke the answer or tool-call format; over budget: the share that "
        "ran out of turns, tool calls or tokens without an answer.",
        "",
    ]
    # a screen part way (longer than one machine's life): which methods the table lacks yet
    done = {r["arm"] for r in rows}
    in_parts = in_parts or {}
    elsewhere = [arm for arm in getattr(cfg, "arms", {}) if arm not in done and arm in in_parts]
    missing = [arm for arm in getattr(cfg, "arms", {}) if arm not in done and arm not in in_parts]
    if elsewhere:
        lines += [
            f"Evaluated in a part of the screen on a basis of its own ({len(elsewhere)} of "
            f"{len(done) + len(elsewhere) + len(missing)} methods; its table, with its own "
            "baseline, is below this one): "
            + ", ".join(f"`{arm}` (`{in_parts[arm]}`)" for arm in elsewhere)
            + ". Compare those rows with that table's baseline, not with this one.",
            "",
        ]
    if missing:
        lines += [
            f"Not evaluated yet ({len(missing)} of {len(done) + len(elsewhere) + len(missing)} "
            "methods): "
            + ", ".join(f"`{arm}`" for arm in missing)
            + f". `seekrl-study study={cfg.name}` trains and evaluates them, skipping what is "
            "archived; until then the table is partial.",
            "",
        ]
    only = list(getattr(cfg, "only_arms", []) or [])
    if only:  # a part of a screen, run on a basis of its own (another precision, say)
        lines += [
            f"A part of the screen: `only_arms` keeps {_methods(len(only))} and the baseline "
            f"`{cfg.baseline}`, trained with the overrides "
            + ", ".join(f"`{o}`" for o in cfg.overrides)
            + ". Its rows compare with this table's baseline only: another table's runs started "
            "from another warm start or ran in another precision.",
            "",
        ]
    # the CPUs the runs trained on (a screen longer than one machine's life spans several):
    # seconds per step and peak memory compare only between rows of one machine
    machines = row_machines(rows)
    lettered = list(dict.fromkeys([*machines_before, *machines]))
    letter = {m: chr(ord("A") + i) for i, m in enumerate(lettered)}
    if machines:
        lines += [
            "Machines (the CPU each run trained on, and its precision; s / step and peak GB "
            "compare only between rows of one machine): "
            + "; ".join(f"{letter[m]} = {m}" for m in machines)
            + ".",
            "",
        ]
    lines += [
        "| method | fidelity | Pass@1 [95% CI] | minus baseline [95% CI] | tool calls "
        "| format errors | over budget | tokens / rollout | s / step | peak GB | machine "
        "| monitors fired | reading |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        low, high = r["pass@1_ci"]
        d = r["minus_baseline"]
        diff = "" if d is None else f"{d['diff']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}]"
        fired = ", ".join(r["monitors_fired"]) or "none"
        if r["stopped_by"]:
            fired += f" (stopped: {', '.join(r['stopped_by'])})"
        lines.append(
            f"| `{r['arm']}` | {r.get('fidelity', '')} | {r['pass@1']:.3f} [{low:.3f}, {high:.3f}] "
            f"| {diff} "
            f"| {_num(r['tool_calls'], '.2f')} | {_num(r.get('format_errors'), '.3f')} "
            f"| {_num(r.get('over_budget'), '.3f')} "
            f"| {_num(r['response_tokens'], '.0f')} "
            f"| {_num(r['seconds_per_step'], '.1f')} | {_num(r['peak_gb'], '.1f')}"
            f"{' (last launch)' if r.get('peak_last_launch') else ''} "
            f"| {', '.join(letter[m] for m in r.get('machines', []))} | {fired} "
            f"| {r['verdict']} |"
        )
    if any(r.get("peak_last_launch") for r in rows):
        lines += [
            "",
            "Peak GB (last launch): the run was resumed from a checkpoint (a session ended "
            "while it trained), and its peak is that of its last launch only; s / step counts "
            "every step of every launch.",
        ]
    same = [r["arm"] for r in rows if r.get("identical_to_baseline")]
    if same:
        lines += [
            "",
            f"Identical to the baseline: {', '.join(f'`{a}`' for a in same)}. Every training "
            "curve and every evaluation sample of these runs is the baseline's: their components "
            "never changed an update at these settings, so their rows say nothing about the "
            "methods (the module of each component, linked from docs/algorithms.md, says why "
            "where it is known).",
        ]
    lines += _cost_lines(rows, letter)
    return "\n".join([*lines, *_power_lines(rows), *_monitor_lines(rows, cfg.baseline)]) + "\n"


def _cost_lines(rows: Sequence[Mapping[str, Any]], letter: Mapping[str, str]) -> list[str]:
    """What the screen's training cost: the runs' training wall time, in all and per machine
    (a run resumed on another machine counts under each of its machines' letters together)."""
    timed = [r for r in rows if r.get("train_seconds")]
    if not timed:
        return []
    by_machine: dict[str, float] = {}
    for r in timed:
        key = ", ".join(letter[m] for m in r.get("machines", [])) or "unrecorded"
        by_machine[key] = by_machine.get(key, 0.0) + float(r["train_seconds"])
    total = sum(by_machine.values())
    where = "; ".join(f"{k}: {v / 3600:.1f} h" for k, v in by_machine.items())
    return [
        "",
        f"Training time: {total / 3600:.1f} h for the runs of {_methods(len(timed))} ({where}; every "
        "launch of every seed, from the runs' records; evaluation not counted).",
    ]


#: the chance that one comparison's two-sided 95% interval excludes 0 upwards when the method
#: is the baseline's equal
CHANCE_UPWARDS = 0.025


def _power_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the screen could detect, and how many candidates chance alone would give: the median
    (and range) over the comparisons of the true difference each finds with 80% power, and the
    expected number of intervals excluding 0 upwards if no method differed (``CHANCE_UPWARDS``
    each; the expectation holds however the comparisons, which share the baseline, correlate).
    Arms identical to the baseline are not comparisons and are left out."""
    found = sorted(
        float(r["detectable"])
        for r in rows
        if r.get("detectable") is not None
        and not math.isnan(r["detectable"])
        and not r.get("identical_to_baseline")
    )
    if not found:
        return []
    n, mid = len(found), statistics.median(found)
    return [
        "",
        f"What the screen can detect: a comparison's interval excludes 0 with 80% probability "
        f"when the true Pass@1 difference is {mid:.3f} or more either way (the median of the "
        f"{n} comparison{'s' if n > 1 else ''}; {found[0]:.3f} to {found[-1]:.3f}), from the "
        "spread of its per-question differences (normal approximation, "
        "`framework.eval.paired.detectable_difference`). A smaller true difference mostly reads "
        f'"no difference shown". If no method differed from the baseline, chance alone would '
        f"still put about {n * CHANCE_UPWARDS:.1f} of the {n} intervals above 0 "
        f"({CHANCE_UPWARDS:.1%} each): a candidate is a lead for a confirmatory study, not a "
        "finding.",
    ]


def _monitor_lines(rows: Sequence[Mapping[str, Any]], baseline: str) -> list[str]:
    """How often each monitor fired across the table, and whether on the baseline too: a monitor
    that fires on most methods and on the baseline (a warning on a noisy curve, say) does not set
    one method apart; the run's curves (its TensorBoard) say what happened."""
    fired: dict[str, list[str]] = {}
    for r in rows:
        for name in r["monitors_fired"]:
            fired.setdefault(name, []).append(r["arm"])
    if not fired:
        return []
    parts = [
        f"`{name}` on {len(arms)} of {len(rows)}"
        + (" (the baseline among them)" if baseline in arms else " (not the baseline)")
        for name, arms in sorted(fired.items())
    ]
    return [
        "",
        "Monitors fired: " + "; ".join(parts) + ". A monitor that fired on the baseline too "
        "does not set a method apart; a run's TensorBoard curves show what it saw.",
        *_shared_lines(rows, "reward_collapse" in fired),
    ]


def _pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's r, or None for a constant curve (no correlation to give)."""
    try:
        return statistics.correlation(x, y)
    except statistics.StatisticsError:
        return None


def shared_fall(
    rows: Sequence[Mapping[str, Any]], window: int, drop: float
) -> dict[str, Any] | None:
    """How much the methods' training curves move together, and whether their mean falls by the
    ``reward_collapse`` rule on its own.

    The arms of a screen draw the same questions in the same order, so a batch of hard questions
    lowers every method's training accuracy at the same step. Over the rows' first-seed
    ``accuracy_curve`` (arms identical to the baseline left out; the steps all curves have):
    ``correlation``, the mean Pearson r over pairs of methods; ``mean``, the mean curve; and
    ``fall``, the step where the registered ``reward_collapse`` monitor, fed the mean curve with
    ``window`` and ``drop`` (its other fields at their defaults), trips, as ``{"best": (first
    step, last step, mean), "low": (...), "drop": share}`` of its moving means, or None.
    None overall when fewer than three curves share ``window`` or more steps."""
    curves = [
        {int(step): float(v) for step, v in r["accuracy_curve"]}
        for r in rows
        if r.get("accuracy_curve") and not r.get("identical_to_baseline")
    ]
    steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
    if len(curves) < 3 or len(steps) < window:
        return None
    series = [[c[s] for s in steps] for c in curves]
    pairs = [
        r
        for i, a in enumerate(series)
        for b in series[i + 1 :]
        if (r := _pearson(a, b)) is not None
    ]
    mean = [statistics.fmean(col) for col in zip(*series, strict=True)]
    fields = {"metric": SHARED_METRIC, "window": window, "drop": drop}
    monitor = HEALTH_MONITORS.bind(monitor_config("reward_collapse", fields))()
    fall, best = None, None
    for end, (step, value) in enumerate(zip(steps, mean, strict=True), 1):
        reading = monitor.check(step, {SHARED_METRIC: value}, {})
        if end < window:
            continue
        now = (steps[end - window], step, reading.values["mean"])
        if best is None or now[2] > best[2]:
            best = now
        if reading.alarm:
            fall = {"best": best, "low": now, "drop": reading.values["drop"]}
            break
    return {
        "methods": len(series),
        "correlation": statistics.fmean(pairs) if pairs else None,
        "mean": mean,
        "fall": fall,
    }


def _shared_lines(rows: Sequence[Mapping[str, Any]], collapse_fired: bool) -> list[str]:
    """Under the monitor line, when ``reward_collapse`` fired: whether the methods' shared
    questions alone explain it (:func:`shared_fall`, with the monitor's default rule)."""
    from framework.health.monitors import CollapseConfig

    rule = CollapseConfig()
    shared = shared_fall(rows, rule.window, rule.drop) if collapse_fired else None
    if shared is None or shared["correlation"] is None:
        return []
    text = (
        f"Training curves: the per-step training accuracy of two methods correlates "
        f"r = {shared['correlation']:.2f} on average ({shared['methods']} methods, their first "
        "seed; the arms share the question order unless a sampler changes it), so a training "
        "curve moves with the questions its batch holds. "
    )
    fall = shared["fall"]
    if fall:
        (b0, b1, bm), (l0, l1, lm) = fall["best"], fall["low"]
        text += (
            f"The mean of their curves falls from a {rule.window}-step mean of {bm:.2f} "
            f"(steps {b0}-{b1}) to {lm:.2f} (steps {l0}-{l1}), {fall['drop']:.0%} down: "
            f"`reward_collapse`'s rule ({rule.drop:.0%} below the best) trips on the shared "
            "questions alone, so its alarm here does not say that a method's policy collapsed."
        )
    else:
        text += (
            f"The mean of their curves does not trip `reward_collapse`'s rule ({rule.drop:.0%} "
            f"below the best {rule.window}-step mean): an alarm here is the method's own."
        )
    return ["", text]


def screen_parts(cfg: Any) -> list[dict[str, Any]]:
    """The parts of a screen (``cfg.parts``: archives of ``only_arms`` studies run on a basis of
    their own, another precision say): per part, its name, archive folder, study config (as
    archived) and screening rows against its own baseline. A part whose archive holds no
    evaluated run yet gives no rows; one whose folder is missing gives no config either."""
    from framework.config.study import StudyConfig
    from framework.eval.study_archive import StudyArchive, archived_config
    from framework.eval.study_report import summarize_study

    out: list[dict[str, Any]] = []
    for folder in getattr(cfg, "parts", None) or []:
        archive = StudyArchive(folder)
        if not archive.exists():
            out.append({"archive": str(folder), "name": None, "cfg": None, "rows": []})
            continue
        part = archived_config(archive.config(), StudyConfig())
        arms, seeds = list(part.arms), list(part.seeds)
        summary = summarize_study(
            archive, arms, seeds, part.baseline, part.bootstrap, part.min_effect
        )
        rows = screen_rows(summary, archive, arms, part.baseline)
        out.append({"archive": str(folder), "name": part.name, "cfg": part, "rows": rows})
    return out


def parts_markdown(parts: Sequence[Mapping[str, Any]], machines_before: Sequence[str]) -> str:
    """The tables of a screen's parts (:func:`screen_parts`), each under its own heading."""
    text = ""
    known = list(machines_before)
    for part in parts:
        if part["cfg"] is None:
            text += (
                f"\n## A part of the screen: `{part['archive']}`\n\nNo records there yet: the "
                "part has not run (or its archive was not committed).\n"
            )
            continue
        text += "\n" + screen_markdown(
            part["cfg"],
            part["rows"],
            title=f"A part of the screen on a basis of its own: `{part['name']}`",
            machines_before=known,
        )
        folder = Path(part["archive"]).parent
        text += (
            f"\nIts records: `{part['archive']}` (`seekrl-study study={part['name']}` runs the "
            f"part; `seekrl-study study={part['name']} out_dir={folder} report_only=true` writes "
            "its full report beside them).\n"
        )
        known = list(dict.fromkeys([*known, *row_machines(part["rows"])]))
    return text
