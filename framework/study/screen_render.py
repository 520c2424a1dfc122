"""The screening table as Markdown (:func:`screen_markdown`) with the prose under it, and the
tables of a screen's parts (:func:`parts_markdown`); the rows come from
:func:`framework.study.screen.screen_rows`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from framework.study.compute import ROLLOUT_TOLERANCE, TOKEN_TOLERANCE, Compute
from framework.study.schema import StudyConfig
from framework.study.screen import ALPHA, PartRows, row_machines, shared_fall
from framework.study.summary import NoiseBand, ScreenRow


def _methods(n: int) -> str:
    """``1 method``, ``2 methods``: a count in the table's prose."""
    return f"{n} method" if n == 1 else f"{n} methods"


def _num(v: float | None, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def _diff_cell(r: ScreenRow, baseline: str) -> str:
    d = r.get("minus_baseline")
    if not d:
        return ""
    text = f"{d['diff']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}]"
    against = r.get("compared_with")
    return text + (f" vs `{against}`" if against not in (None, baseline) else "")


def _p_cell(r: ScreenRow) -> str:
    p = r.get("p_value")
    if p is None:
        return ""
    if r.get("p_holm") is None:
        return f"{p:.3f}"
    return f"{p:.3f}, {r['p_holm']:.3f}, {r['p_bh']:.3f}"


#: the compute of a row whose runs recorded none
_NO_COMPUTE = Compute(rollouts=None, generated_tokens=None, optimizer_steps=None, from_config=False)


def _compute_cells(r: ScreenRow) -> list[str]:
    if r.get("pass@1") is None:
        return ["-", "-", "-"]
    c: Compute = r.get("compute") or _NO_COMPUTE
    steps = c.get("optimizer_steps")
    if steps is not None and c.get("from_config"):
        shown = f"{steps:.0f} (config)"
    else:
        shown = _num(steps, ".1f")
    return [_num(c.get("rollouts"), ".1f"), _num(c.get("generated_tokens"), ".0f"), shown]


def screen_markdown(
    cfg: StudyConfig,
    rows: Sequence[ScreenRow],
    *,
    title: str = "Screening table",
    in_parts: Mapping[str, str | None] | None = None,
    machines_before: Sequence[str] = (),
) -> str:
    """The screening table as a Markdown section.

    Args:
        title: the section's heading, before its count of methods and its baseline.
        in_parts: arm -> the name of the part of the screen (:func:`screen_parts`) that evaluated
            it, for arms this table lacks: they are listed as evaluated there, not as missing.
        machines_before: machines an earlier table lettered; this one goes on from them.
    """
    evaluated = [r for r in rows if r.get("pass@1") is not None]
    inert = [r for r in rows if r.get("pass@1") is None]
    base_row = next((r for r in rows if r["arm"] == cfg.baseline), None)
    band = (base_row or {}).get("noise_band")
    lines = _intro_lines(cfg, rows, title, base_row)
    lines += _coverage_lines(cfg, rows, in_parts or {})
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
    lines += _table_lines(rows, cfg.baseline, band is not None, letter)
    if any(r.get("peak_last_launch") for r in rows):
        lines += [
            "",
            "Peak GB (last launch): the run was resumed from a checkpoint (a session ended "
            "while it trained), and its peak is that of its last launch only; s / step counts "
            "every step of every launch.",
        ]
    lines += _band_lines(band, cfg.baseline)
    lines += _adjustment_lines(rows, cfg.baseline)
    lines += _compute_lines(rows)
    lines += _unchanged_lines(rows, inert)
    lines += _cost_lines(rows, letter)
    text = [*lines, *_power_lines(rows, cfg.baseline), *_monitor_lines(evaluated, cfg.baseline)]
    return "\n".join(text) + "\n"


def _intro_lines(
    cfg: StudyConfig, rows: Sequence[ScreenRow], title: str, base_row: ScreenRow | None
) -> list[str]:
    """The table's heading (its count of methods, its baseline) and what its figures are: the
    seeds, the questions the records hold, the comparison, a candidate, the columns."""
    evaluated = [r for r in rows if r.get("pass@1") is not None]
    inert = [r for r in rows if r.get("pass@1") is None]
    seeds = sorted({s for r in rows if r["arm"] != cfg.baseline for s in r["seeds"]})
    base_seeds = sorted((base_row or {}).get("seeds") or [])
    if not seeds or base_seeds == seeds or not base_seeds:
        seeds = sorted({s for r in rows for s in r["seeds"]})
        who = f"Seeds {seeds}, one per method"
    else:
        who = (
            f"Seeds {seeds}, one per method, and {base_seeds} for the baseline `{cfg.baseline}` "
            "(their spread is the noise band below)"
        )
    # the questions the records hold, which a split smaller than ``eval.questions`` caps
    counts = sorted({int(q) for r in rows if (q := r.get("questions"))})
    asked = cfg.eval.questions
    if not counts:
        held = f"{asked} {cfg.eval.split} questions"
    else:
        held = f"{counts[0]}" + (f" to {counts[-1]}" if len(counts) > 1 else "")
        held += f" {cfg.eval.split} questions"
        if counts != [asked]:
            held += f" (the evaluated records; `eval.questions` asks for up to {asked})"
    count = f"{_methods(len(evaluated))} evaluated"
    if inert:
        count += f", {len(inert)} inert at these settings"
    return [
        f"## {title} ({count}, baseline `{cfg.baseline}`)",
        "",
        f"{who}: each interval below is one run's, so a difference says how this run differed "
        "on these questions, not how the method compares in general. "
        f"{held} x {cfg.eval.samples_per_question} "
        "samples; minus the baseline: paired bootstrap over questions, a method's runs against "
        "the baseline's runs of the same seeds. A candidate is a method whose difference is above "
        f"0 after Holm's adjustment over the table's comparisons (Holm p < {ALPHA:g}), at the "
        "baseline's compute or against a reference arm that spends as much; it needs a "
        "confirmatory study with seeds.",
        "",
        "Fidelity: how closely the arm's components follow their papers (the weakest of them; "
        "blank: the formulas of docs/algorithms.md). A RECONSTRUCTED method's row measures our "
        "reading of its abstract, not the paper's method. Format errors: the share of evaluation "
        "samples whose output broke the answer or tool-call format; over budget: the share that "
        "ran out of turns, tool calls or tokens without an answer.",
        "",
    ]


def _coverage_lines(
    cfg: StudyConfig, rows: Sequence[ScreenRow], in_parts: Mapping[str, str | None]
) -> list[str]:
    """A screen part way (longer than one machine's life): the methods the table lacks yet, those
    a part of the screen evaluated (``in_parts``), and, for a part itself, what it keeps."""
    lines: list[str] = []
    done = {r["arm"] for r in rows}
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
    return lines


def _table_lines(
    rows: Sequence[ScreenRow], baseline: str, noise_col: bool, letter: Mapping[str, str]
) -> list[str]:
    """The table itself: its header and a row per arm (``noise_col``: the band's column)."""
    header = ["method", "fidelity", "Pass@1 [95% CI]", "minus baseline [95% CI]"]
    header += ["p: raw, Holm, BH", *(["within seed noise"] if noise_col else [])]
    header += ["tool calls", "format errors", "over budget", "tokens / rollout"]
    header += ["rollouts / step", "generated tokens / step", "optimiser steps / step"]
    header += ["s / step", "peak GB", "machine", "monitors fired", "reading"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        if r.get("pass@1") is None:  # inert at these settings: listed, not trained
            cells = [f"`{r['arm']}`", r.get("fidelity", ""), "not trained", "", ""]
            cells += [""] * noise_col + ["-"] * 4 + _compute_cells(r) + ["-"] * 4
            lines.append("| " + " | ".join([*cells, r["verdict"]]) + " |")
            continue
        low, high = r["pass@1_ci"] or (math.nan, math.nan)  # an evaluated arm has one
        fired = ", ".join(r["monitors_fired"]) or "none"
        if r["stopped_by"]:
            fired += f" (stopped: {', '.join(r['stopped_by'])})"
        noise = []
        if noise_col:
            inside = r.get("within_noise")
            noise = ["" if inside is None else ("yes" if inside else "no")]
        cells = [
            f"`{r['arm']}`",
            r.get("fidelity", ""),
            f"{r['pass@1']:.3f} [{low:.3f}, {high:.3f}]",
            _diff_cell(r, baseline),
            _p_cell(r),
            *noise,
            _num(r["tool_calls"], ".2f"),
            _num(r.get("format_errors"), ".3f"),
            _num(r.get("over_budget"), ".3f"),
            _num(r["response_tokens"], ".0f"),
            *_compute_cells(r),
            _num(r["seconds_per_step"], ".1f"),
            _num(r["peak_gb"], ".1f") + (" (last launch)" if r.get("peak_last_launch") else ""),
            ", ".join(letter[m] for m in r.get("machines", [])),
            fired,
            r["verdict"],
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _unchanged_lines(rows: Sequence[ScreenRow], inert: Sequence[ScreenRow]) -> list[str]:
    """Under the table: the arms inert at these settings (not trained) and the arms whose runs
    came out the baseline's exactly, and why neither says anything about its method."""
    lines: list[str] = []
    if inert:
        names = ", ".join(f"`{r['arm']}`" for r in inert)
        lines += [
            "",
            f"Inert at these settings: {names}. The "
            "components' own rules (each config class's `screen_inert`, framework/config/"
            "inert.py) show from the train config alone that these arms would train exactly as "
            "the baseline does (the reason is in the row), so they were not trained: a row "
            "would say nothing about the methods, which may act at other settings.",
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
    return lines


def _band_lines(band: NoiseBand | None, baseline: str) -> list[str]:
    """The noise band under the table: the replicated baseline's seeds and their spread."""
    if not band:
        return []
    seeds = band["seeds"]
    each = ", ".join(f"{v:.3f} (seed {s})" for s, v in zip(seeds, band["pass@1"], strict=True))
    pairs = "; ".join(
        f"seed {p['seeds'][1]} minus seed {p['seeds'][0]} {p['diff']:+.3f} "
        f"[{p['ci'][0]:+.3f}, {p['ci'][1]:+.3f}]"
        for p in band["pairs"]
    )
    return [
        "",
        f"Noise band: the baseline `{baseline}` trained with seeds {list(seeds)}, alike but for "
        f"the seed, has Pass@1 {each}: range {band['range']:.3f}, SD {band['sd']:.3f}. Paired "
        f"over questions: {pairs}. Within seed noise: a method's difference is no larger in size "
        f"than the widest of these ({band['widest']:.3f}), which retraining the baseline alone "
        "gives; its interval covers the evaluation's noise only, this band the training's.",
    ]


def _adjustment_lines(rows: Sequence[ScreenRow], baseline: str) -> list[str]:
    """What the p-values are and which adjustment reads a candidate."""
    family = [r for r in rows if r.get("p_holm") is not None]
    if not family:
        return []
    n = len(family)
    return [
        "",
        "p: each comparison's two-sided paired-bootstrap p-value (0.000: below one in the "
        f"number of resamples), then adjusted over the table's {n} "
        f"comparison{'s' if n > 1 else ''} against the baseline (methods only: not the baseline, "
        "reference, inert or identical arms) by Holm's step-down (the family-wise error) and by "
        "Benjamini-Hochberg (the false discovery rate). A candidate needs Holm's p below "
        f"{ALPHA:g}, so the chance that any method here reads candidate when none differs stays "
        f"under {ALPHA:.0%}; BH below {ALPHA:g} is the looser reading (at most {ALPHA:.0%} false "
        "leads among such rows in expectation), for choosing what a next study confirms.",
    ]


def _compute_lines(rows: Sequence[ScreenRow]) -> list[str]:
    """What the compute columns hold and how a method that spends more is compared."""
    if not any(r.get("compute") for r in rows):
        return []
    config = any((r.get("compute") or _NO_COMPUTE).get("from_config") for r in rows)
    return [
        "",
        "Rollouts, generated tokens and optimiser steps per step: the mean over a run's training "
        "steps (and its seeds) of every rollout it generated (each sampler round's, an "
        "augmenter's), their generated tokens, and its optimiser steps (mini-batches x policy "
        "epochs, or one per turn stage)"
        + (
            "; n/a where the run was recorded before the step logged them, whose optimiser "
            "steps are its config's policy epochs (config)"
            if config
            else ""
        )
        + ". A method spends more than the baseline with more optimiser steps, more than "
        f"{ROLLOUT_TOLERANCE:.0%} more rollouts or more than {TOKEN_TOLERANCE:.0%} more generated "
        "tokens per step (a policy's response length is partly an outcome of its training); it is "
        "then compared with a reference arm that spends as much (the baseline at more policy "
        "epochs), or its comparison is unmatched and it is never a candidate: a difference at "
        "more compute is not the method's alone.",
    ]


def _cost_lines(rows: Sequence[ScreenRow], letter: Mapping[str, str]) -> list[str]:
    """What the screen's training cost: the runs' training wall time, in all and per machine
    (a run resumed on another machine counts under each of its machines' letters together)."""
    timed = [(r, s) for r in rows if (s := r.get("train_seconds"))]
    if not timed:
        return []
    by_machine: dict[str, float] = {}
    for r, seconds in timed:
        key = ", ".join(letter[m] for m in r.get("machines", [])) or "unrecorded"
        by_machine[key] = by_machine.get(key, 0.0) + float(seconds)
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


def _power_lines(rows: Sequence[ScreenRow], baseline: str = "") -> list[str]:
    """What the screen could detect, and how many candidates chance alone would give: the median
    (and range) over the comparisons of the true difference each finds with 80% power, and the
    expected number of intervals excluding 0 upwards if no method differed (``CHANCE_UPWARDS``
    each; the expectation holds however the comparisons, which share the baseline, correlate).
    Arms identical to the baseline, inert and reference arms are not comparisons and are left
    out."""
    found = sorted(
        float(d)
        for r in rows
        if (d := r.get("detectable")) is not None
        and not math.isnan(d)
        and not r.get("identical_to_baseline")
        and not r.get("reference")
        and r["arm"] != baseline
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
        "finding. Holm's adjustment, which a candidate needs, detects less: each comparison "
        "then has to clear the family's bar, not its own.",
    ]


def _monitor_lines(rows: Sequence[ScreenRow], baseline: str) -> list[str]:
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


def _shared_lines(rows: Sequence[ScreenRow], collapse_fired: bool) -> list[str]:
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


def parts_markdown(parts: Sequence[PartRows], machines_before: Sequence[str]) -> str:
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
