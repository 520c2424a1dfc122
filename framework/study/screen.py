"""The screening table: every registered method trained and evaluated alike, against one baseline.

``seekrl-study study=screen`` (``screen=true``) adds one arm per registered method, found when the
study starts (:func:`framework.study.arms.screen_arms`), so a component registered later, by a
plugin too, appears without editing the study:

- every algorithm bundle (``conf/algorithm/*.yaml``, and plugins' config folders), by its name;
- every advantage estimator, policy loss and sampler that no bundle selects, on the baseline bundle
  with that one component swapped in (``advantage-<name>``, ``loss-<name>``, ``sampler-<name>``);
  a loss that acts only off policy gets its second optimisation pass (``optim.policy_epochs=2``),
  and a loss that trains turn by turn one mini-batch where the screen's settings split batches;
- with ``matched_baselines=true``, the baseline at each number of policy epochs an arm takes
  beyond the baseline's (``grpo-epochs2``): a *reference* arm, no method.

Each arm trains from the same cached warm start on the same questions for the same steps and
rollouts (the study's shared overrides), and is evaluated on the study's split (validation for a
screen). :func:`screen_rows` turns the study's summary and archive into one row per method: Pass@1
with its interval, the paired difference from the baseline with its interval and its p-values
(raw, Holm, Benjamini-Hochberg), tool calls, the shares of format errors and of answers lost to
the budget, response tokens per rollout, what a training step spent (rollouts generated, their
generated tokens, optimiser steps), seconds per training step, peak memory, the CPU it trained on
(a screen may span machines; its times compare only within one), and the health monitors that
fired. Below the table, :func:`screen_markdown` says what the comparisons could detect (the true
difference each finds with 80% power) and how many candidates chance alone would give; when
``reward_collapse`` fired, :func:`shared_fall` says how closely the methods' per-step training
accuracy moves together (the arms share the question order, so a batch of hard questions lowers
every curve at once) and whether the mean of the curves trips the monitor's rule by itself.

What a method's row can and cannot show at the screen's settings:

- **Inert at these settings.** Before anything trains, every component whose arm differs from the
  baseline is asked whether, at these settings, it changes any update (its config class's
  ``screen_inert`` rule, :mod:`framework.config.inert`; :func:`~framework.study.arms.inert_reason`
  asks each of an arm's differing sections). The rules: a loss that sees the policy only through the
  importance ratio (PPO-clip, GSPO, CISPO, ETR) is the baseline's when every optimiser step is on
  policy (one policy epoch, one mini-batch: the ratio is exactly 1); DPPO's pruning acts on no
  rollout with a signal when binary rewards in groups of ``G`` make every nonzero ``|A|`` at least
  ``1/(G-1)`` of the largest and the threshold is below that; DaGRPO masks nothing at a similarity
  threshold of 1 or more (below, the texts decide: not knowable from the config); ``uniform`` with
  ``start_hops`` set is ``hop_curriculum``. Such an arm is listed as *inert at these settings* with
  the reason and is not trained (``inert_arms``; the study's log says so): its row would measure
  nothing about the method, and "no difference shown" would misread it.
- **Identical to the baseline.** A method whose runs came out the baseline's exactly (every
  training curve and every evaluation sample the same, seed for seed) is marked so after the
  fact (:func:`same_as_baseline`): a rule no config shows (DaGRPO's 0.9 threshold, which no pair
  of rollouts met) changed no update.
- **Compute.** A row shows, per training step (the mean over its steps and seeds, from the run's
  logged ``train/generated_rollouts``, ``train/generated_tokens`` and ``train/optimizer_steps``;
  for a run recorded before those, its config's ``optim.policy_epochs``), what the method spent.
  A method that spends more than the baseline (more optimiser steps, more than
  :data:`~framework.study.compute.ROLLOUT_TOLERANCE` more rollouts or more than
  :data:`~framework.study.compute.TOKEN_TOLERANCE` more generated tokens per step,
  :func:`~framework.study.compute.spends_more`) is compared with a reference arm that spends as much
  (the baseline at as many optimiser steps) when the screen has one, else its comparison is
  marked *unmatched* with the reason: a difference at more compute is not the method's alone,
  and it is never a candidate.
- **Noise band.** With a replicated baseline (``baseline_seeds``, at least 3), the spread of the
  baseline's own seeds (their Pass@1, its range and SD, and the paired difference of every pair
  of them with its interval, :func:`noise_band`) stands beside every method's interval: a method
  trained once differs from the baseline by its seed as well as by its method, and a difference
  no wider than the baseline's seeds give each other shows nothing the seed could not. A
  method's comparison pairs its runs with the baseline's runs of the same seeds (the other
  seeds of the baseline give the band, not the comparison).
- **Multiplicity.** Each comparison's two-sided paired-bootstrap p-value is adjusted over the
  table's comparisons against the baseline (methods only: not the baseline, reference arms, inert
  or identical arms), by Holm's step-down (:func:`holm`; family-wise) and by Benjamini-Hochberg's
  step-up (:func:`benjamini_hochberg`; false discovery rate). A method is a *candidate* only when
  its difference is above 0 with a Holm-adjusted p below :data:`ALPHA` at matched compute: the
  chance that any method of the table reads candidate when none differs stays under 5%. A raw
  interval above 0 that Holm does not keep reads "above the baseline before adjustment only"; BH
  beside it is the looser reading (among the rows with BH p < 0.05, at most 5% false leads in
  expectation), for choosing what a next study confirms. A candidate is a lead for a
  confirmatory study with seeds, not a finding: a screen trains one seed per method.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from itertools import combinations
from typing import TypedDict

from framework.eval.paired import QuestionKey, interval_side, paired_bootstrap, pooled_per_question
from framework.health.config import monitor_config
from framework.registry.kinds import HEALTH_MONITORS
from framework.study.archive import StudyArchive, archived_config
from framework.study.compute import arm_compute, reference_arms, spends_more
from framework.study.schema import StudyConfig, all_seeds, arm_seeds
from framework.study.summary import (
    ArmFigures,
    NoiseBand,
    NoisePair,
    Result,
    ScreenRow,
    StudySummary,
    figure_means,
    result_dict,
    summarize_study,
)
from framework.study.types import ArchivedSeries, Method

#: a span of steps and the moving mean over it: ``(first step, last step, mean)``
Span = tuple[int, int, float]


class Fall(TypedDict):
    """Where the mean curve trips ``reward_collapse`` (:func:`shared_fall`)."""

    best: Span
    low: Span
    drop: float


class SharedFall(TypedDict):
    """How the methods' training curves move together (:func:`shared_fall`)."""

    methods: int
    correlation: float | None
    mean: list[float]
    fall: Fall | None


class PartRows(TypedDict):
    """One part of a screen (:func:`screen_parts`): its name, archive, config and rows."""

    archive: str
    name: str | None
    cfg: StudyConfig | None
    rows: list[ScreenRow]


#: the training figure compared across methods under the table (:func:`shared_fall`): accuracy,
#: not reward, because rewards differ in scale between methods
SHARED_METRIC = "rollout/accuracy"


#: the reading of a method whose runs are the baseline's exactly (module docstring)
IDENTICAL = "identical to the baseline (the method changed no update here)"


#: the reading of an arm the config shows to be the baseline's, with its reason
INERT = "inert at these settings, not trained"


#: the Holm-adjusted p-value below which a difference reads as a candidate (or as below)
ALPHA = 0.05


#: the reading of a method above the baseline after Holm's adjustment, at matched compute
CANDIDATE = "candidate (above the baseline after Holm's adjustment; confirm with seeds)"


def holm(p: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of the p-values ``p`` (family-wise error), in their order:
    sorted ascending, the ``i``-th (from 1) becomes ``max_{j <= i} min(1, (m - j + 1) p_(j))``.
    Valid however the tests depend on each other (Holm 1979)."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def benjamini_hochberg(p: Sequence[float]) -> list[float]:
    """Benjamini and Hochberg's step-up adjustment of ``p`` (false discovery rate), in their
    order: sorted ascending, the ``i``-th (from 1) becomes ``min_{j >= i} min(1, m p_(j) / j)``.
    Valid for independent tests and positively dependent ones (Benjamini & Yekutieli 2001), as
    comparisons against one shared baseline are."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out = [0.0] * m
    running = 1.0
    for rank in range(m - 1, -1, -1):
        i = order[rank]
        running = min(running, min(1.0, m * p[i] / (rank + 1)))
        out[i] = running
    return out


def _per_question(archive: StudyArchive, arm: str, seed: int) -> dict[QuestionKey, float]:
    return figure_means(archive.records(arm, seed))


def noise_band(
    archive: StudyArchive, baseline: str, seeds: Sequence[int], n_boot: int
) -> NoiseBand | None:
    """The spread between the baseline's evaluated ``seeds`` (two or more; None otherwise): each
    seed's Pass@1, their range and SD, and the paired difference of every pair (later seed minus
    earlier, bootstrap over questions, with its interval); ``widest``, the largest of those
    differences in size."""
    done = [s for s in seeds if archive.has_eval(baseline, s)]
    if len(done) < 2:
        return None
    pq = {s: _per_question(archive, baseline, s) for s in done}
    pass1 = [statistics.fmean(pq[s].values()) for s in done]
    pairs = []
    for a, b in combinations(done, 2):
        d = result_dict(paired_bootstrap(pq[a], pq[b], n_boot=n_boot))
        pairs.append(NoisePair(seeds=[a, b], **d))
    return {
        "seeds": done,
        "pass@1": pass1,
        "range": max(pass1) - min(pass1),
        "sd": statistics.stdev(pass1),
        "pairs": pairs,
        "widest": max(abs(p["diff"]) for p in pairs),
    }


def _matched_diff(
    summary: StudySummary,
    archive: StudyArchive,
    target: str,
    arm: str,
    mine: Sequence[int],
    theirs: Sequence[int],
    baseline: str,
    n_boot: int,
) -> Result | None:
    """``arm`` minus ``target`` (Pass@1, paired bootstrap over questions) on the seeds both ran,
    each pooled over those seeds; the summary's comparison where it is that already (the baseline
    with the arm's seeds exactly), or where no seed is shared."""
    shared = [s for s in mine if s in theirs]
    summarized = summary["versus_baseline"].get(arm, {}).get("Pass@1")
    if target == baseline and (not shared or list(mine) == list(theirs) == shared):
        return summarized
    if not shared:
        return None
    a = pooled_per_question([_per_question(archive, target, s) for s in shared])
    b = pooled_per_question([_per_question(archive, arm, s) for s in shared])
    try:
        return result_dict(paired_bootstrap(a, b, n_boot=n_boot))
    except ValueError:  # fewer than two questions in common
        return None


#: weakest first: an arm is as close to its papers as its least faithful component
FIDELITY_ORDER = ("reconstructed", "partial", "exact")


def arm_fidelity(methods: Sequence[Method]) -> str:
    """How closely an arm follows its papers: the weakest ``fidelity`` among its components that
    name a paper (``"RECONSTRUCTED"`` loudly, so no reader takes it for the paper's method), with
    those components; ``""`` when none declares one (the formulas of docs/algorithms.md)."""
    for level in FIDELITY_ORDER:
        names = [m["name"] for m in methods if m.get("fidelity") == level]
        if names:
            label = "RECONSTRUCTED" if level == "reconstructed" else level
            return f"{label} ({', '.join(names)})"
    return ""


def same_as_baseline(archive: StudyArchive, arm: str, baseline: str, seeds: Sequence[int]) -> bool:
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


def _inert_row(arm: str, reason: str) -> ScreenRow:
    """The row of an arm listed as inert at these settings and not trained."""
    return {
        "arm": arm,
        "seeds": [],
        "pass@1": None,
        "pass@1_ci": None,
        "minus_baseline": None,
        "detectable": None,
        "tool_calls": None,
        "questions": None,
        "response_tokens": None,
        "seconds_per_step": None,
        "train_seconds": None,
        "peak_gb": None,
        "machines": [],
        "monitors_fired": [],
        "stopped_by": [],
        "identical_to_baseline": False,
        "inert": reason,
        "verdict": f"{INERT} ({reason})",
        "fidelity": "",
        "accuracy_curve": None,
    }


def screen_rows(
    summary: StudySummary,
    archive: StudyArchive,
    arms: Sequence[str],
    baseline: str,
    *,
    cfg: StudyConfig | None = None,
) -> list[ScreenRow]:
    """One row per arm of a screen (module docstring), from the study's summary
    (:func:`~framework.study.summary.summarize_study`) and its archive: an evaluated arm's
    figures, or an inert arm's reason.

    Args:
        cfg: the study config, for its ``inert_arms``, its arms' overrides (the reference arms,
            :func:`~framework.study.compute.reference_arms`), its ``baseline_seeds`` (the noise
            band) and its ``bootstrap``; None for a table of plain rows (the summary's
            comparisons as they are).
    """
    n_boot = int(getattr(cfg, "bootstrap", 10000) or 10000)
    inert = dict(getattr(cfg, "inert_arms", None) or {})
    refs = reference_arms(getattr(cfg, "arms", None) or {}, baseline)
    rows = []
    for arm in arms:
        figures = summary["arms"].get(arm)
        if figures is None:
            if arm in inert:
                rows.append(_inert_row(arm, inert[arm]))
            continue
        row = _evaluated_row(archive, arm, figures, baseline)
        row["inert"] = inert.get(arm)  # predicted inert, yet evaluated (an earlier run)
        row["reference"] = refs.get(arm)
        rows.append(row)
    base_seeds = arm_seeds(cfg, baseline) if cfg is not None else None
    _compare(rows, summary, archive, baseline, n_boot)
    _adjust(rows, baseline)
    band = None
    if base_seeds is not None and len(base_seeds) > 1:
        band = noise_band(archive, baseline, base_seeds, n_boot)
    for r in rows:
        if r["arm"] == baseline:
            r["noise_band"] = band
        d = r.get("minus_baseline")
        r["within_noise"] = (
            None
            if band is None or not d or r.get("compared_with") != baseline
            else abs(float(d["diff"])) <= band["widest"]
        )
        r["verdict"] = _reading(r, baseline)
    return rows


def _evaluated_row(
    archive: StudyArchive, arm: str, figures: ArmFigures, baseline: str
) -> ScreenRow:
    """The row of an evaluated arm before its comparison: its summary ``figures`` and what its
    runs' records say (:func:`_run_facts`); the caller sets ``inert`` and ``reference``."""
    facts = _run_facts(archive, arm, figures["seeds"])
    tokens, steps, seconds, peaks = (
        facts["tokens"],
        facts["steps"],
        facts["seconds"],
        facts["peaks"],
    )
    curve = facts["curve"]
    identical = arm != baseline and same_as_baseline(archive, arm, baseline, figures["seeds"])
    return {
        "arm": arm,
        "seeds": figures["seeds"],
        "pass@1": figures["pass@1"],
        "pass@1_ci": figures["pass@1_ci"],
        "minus_baseline": None,  # set below, against the baseline or a reference
        "detectable": None,
        "tool_calls": figures["tool_calls"],
        # the share of evaluation samples whose output broke the tool-call format
        "format_errors": figures.get("format_error_rate"),
        # the share that ran out of turns, tool calls or tokens without an answer
        "over_budget": figures.get("over_budget_rate"),
        "questions": figures.get("questions"),
        "response_tokens": sum(tokens) / len(tokens) if tokens else None,
        # per training step: rollouts generated, their generated tokens, optimiser steps
        "compute": arm_compute(archive, arm, figures["seeds"]),
        "seconds_per_step": seconds / steps if steps else None,
        "train_seconds": facts["trained"] or None,
        "peak_gb": max(peaks) if peaks else None,
        "peak_last_launch": facts["resumed"],
        "machines": facts["cpus"],
        "monitors_fired": sorted(facts["alarms"]),
        "stopped_by": facts["stopped"],
        "identical_to_baseline": identical,
        "inert": None,
        "reference": None,
        "fidelity": arm_fidelity(facts["methods"]),
        # the first seed's per-step training accuracy, [[step, value], ...]
        "accuracy_curve": sorted(curve) if curve else None,
    }


class _Facts(TypedDict):
    tokens: list[float]
    steps: int
    seconds: float
    trained: float
    peaks: list[float]
    resumed: bool
    cpus: list[str]
    methods: list[Method]
    alarms: set[str]
    stopped: list[str]
    curve: ArchivedSeries | None


def _run_facts(archive: StudyArchive, arm: str, seeds: Sequence[int]) -> _Facts:
    """What the records of the arm's evaluated ``seeds`` say, gathered over them: response tokens,
    training steps and seconds, peaks, whether a peak is a last launch's only, CPUs, methods,
    monitors fired and stopping, and the first seed's training accuracy curve."""
    tokens: list[float] = []
    steps, seconds, peaks, alarms, stopped = 0, 0.0, [], set(), []
    trained = 0.0  # training wall seconds of every seed, every launch
    resumed = False
    cpus: list[str] = []
    methods: list[Method] = []
    curve = None  # the first seed's per-step training accuracy
    for seed in seeds:
        recs = archive.records(arm, seed)
        tokens += [float(r.response_tokens) for r in recs if r.response_tokens]
        run = archive.run(arm, seed) or {}
        if seed == seeds[0]:
            curve = (run.get("curves") or {}).get(SHARED_METRIC)
        if train := run.get("train_seconds"):
            trained += float(train)
            if run_steps := run.get("steps"):
                seconds += float(train)
                steps += int(run_steps)
        if (peak := run.get("peak_gb")) is not None:
            peaks.append(float(peak))
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
            cpus.append(str(cpu))
        methods += [m for m in run.get("methods", []) if m not in methods]
        if stopped_by := run.get("stopped_by"):
            stopped.append(str(stopped_by.get("monitor", "a monitor")))
    return {
        "tokens": tokens,
        "steps": steps,
        "seconds": seconds,
        "trained": trained,
        "peaks": peaks,
        "resumed": resumed,
        "cpus": cpus,
        "methods": methods,
        "alarms": alarms,
        "stopped": stopped,
        "curve": curve,
    }


def _compare(
    rows: list[ScreenRow],
    summary: StudySummary,
    archive: StudyArchive,
    baseline: str,
    n_boot: int,
) -> None:
    """Each evaluated row's comparison (``minus_baseline``, ``compared_with``, ``detectable``):
    against the baseline, or, for a method that spends more than the baseline
    (:func:`spends_more`), against the least costly reference arm that spends as much; with
    none, the baseline, and ``unmatched`` says why."""
    by_arm = {r["arm"]: r for r in rows}
    base = by_arm.get(baseline)
    refs = sorted(
        (r for r in rows if r.get("reference") and r.get("pass@1") is not None),
        key=lambda r: (_optimizer_steps(r) or 0.0, r["arm"]),
    )
    for r in rows:
        r["unmatched"] = None
        r["compared_with"] = None
        if r["arm"] == baseline or r.get("pass@1") is None:
            continue
        target = baseline
        excess = spends_more(r.get("compute"), (base or {}).get("compute"))
        if excess and not r.get("reference"):
            covering = [
                ref for ref in refs if not spends_more(r.get("compute"), ref.get("compute"))
            ]
            if covering:
                target = covering[0]["arm"]
            else:
                r["unmatched"] = (
                    f"spends more than the baseline: {'; '.join(excess)}; no reference arm "
                    "spends as much"
                )
        # the seeds the target has evaluated (a replicated baseline's, or some of them so far)
        theirs = list(by_arm[target]["seeds"]) if target in by_arm else list(r["seeds"])
        d = _matched_diff(summary, archive, target, r["arm"], r["seeds"], theirs, baseline, n_boot)
        r["minus_baseline"] = d
        r["compared_with"] = target if d else None
        r["detectable"] = d.get("detectable") if d else None


def _optimizer_steps(r: ScreenRow) -> float | None:
    compute = r.get("compute")
    return compute.get("optimizer_steps") if compute else None


def _in_family(r: ScreenRow, baseline: str) -> bool:
    """Whether a row is one of the table's comparisons (module docstring, "Multiplicity")."""
    d = r.get("minus_baseline")
    return (
        r["arm"] != baseline
        and not r.get("reference")
        and not r.get("identical_to_baseline")
        and r.get("pass@1") is not None
        and d is not None
        and d.get("p_value") is not None
    )


def _adjust(rows: list[ScreenRow], baseline: str) -> None:
    """Each comparison's raw p-value and its Holm and BH adjustments over the table's
    comparisons (``p_value``, ``p_holm``, ``p_bh``; None outside the family)."""
    family = [r for r in rows if _in_family(r, baseline)]
    raw = [float(d["p_value"]) for r in family if (d := r.get("minus_baseline"))]  # each has one
    for r in rows:
        d = r.get("minus_baseline")
        r["p_value"] = d.get("p_value") if d else None
        r["p_holm"] = r["p_bh"] = None
    for r, h, q in zip(family, holm(raw), benjamini_hochberg(raw), strict=True):
        r["p_holm"], r["p_bh"] = h, q


def _reading(r: ScreenRow, baseline: str) -> str:
    """A row's reading (module docstring): baseline, reference, inert, identical, or the
    comparison read by its Holm-adjusted p-value, with an unmatched comparison said so."""
    if r["arm"] == baseline:
        return "baseline"
    if r.get("pass@1") is None:
        return str(r.get("verdict") or f"{INERT} ({r.get('inert')})")
    if r.get("reference"):
        return f"reference: {r['reference']} (no method; the compute some methods are compared at)"
    if r.get("identical_to_baseline"):
        return IDENTICAL
    d = r.get("minus_baseline")
    if not d:
        return "no comparison (no evaluation in common with the baseline)"
    side = interval_side(d["ci"])
    holm_p = r.get("p_holm")
    kept = side if holm_p is not None and holm_p < ALPHA else 0
    unmatched = r.get("unmatched")
    if kept > 0:
        text = CANDIDATE if not unmatched else "above the baseline, but unmatched: not a candidate"
    elif kept < 0:
        text = "below the baseline"
    elif side:
        where = "above" if side > 0 else "below"
        after = f" (Holm p = {holm_p:.3f})" if holm_p is not None else ""
        text = f"{where} the baseline before adjustment only{after}"
    else:
        text = "no difference shown"
    if r.get("compared_with") not in (None, baseline):
        text += f", at matched compute (against `{r['compared_with']}`)"
    if unmatched:
        text += f"; unmatched ({unmatched})"
    if r.get("inert"):
        text += f"; its config was called inert ({r['inert']}), yet its run differs"
    return text


def row_machines(rows: Sequence[ScreenRow]) -> list[str]:
    """The machines (CPU and precision) the rows' runs trained on, each once, in row order."""
    return list(dict.fromkeys(m for r in rows for m in r.get("machines", [])))


def _pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's r, or None for a constant curve (no correlation to give)."""
    try:
        return statistics.correlation(x, y)
    except statistics.StatisticsError:
        return None


def shared_fall(rows: Sequence[ScreenRow], window: int, drop: float) -> SharedFall | None:
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
        {int(step): float(v) for step, v in r["accuracy_curve"] or []}
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
    fall: Fall | None = None
    best: Span | None = None
    for end, (step, value) in enumerate(zip(steps, mean, strict=True), 1):
        reading = monitor.check(step, {SHARED_METRIC: value}, {})
        if end < window:
            continue
        now = (steps[end - window], step, reading.values["mean"])
        if best is None or now[2] > best[2]:
            best = now
        if reading.alarm:
            fall = {"best": best, "low": now, "drop": reading.values["drop"]}  # best: set
            break
    return {
        "methods": len(series),
        "correlation": statistics.fmean(pairs) if pairs else None,
        "mean": mean,
        "fall": fall,
    }


def screen_parts(cfg: StudyConfig) -> list[PartRows]:
    """The parts of a screen (``cfg.parts``: archives of ``only_arms`` studies run on a basis of
    their own, another precision say): per part, its name, archive folder, study config (as
    archived) and screening rows against its own baseline. A part whose archive holds no
    evaluated run yet gives no rows; one whose folder is missing gives no config either."""
    out: list[PartRows] = []
    for folder in getattr(cfg, "parts", None) or []:
        archive = StudyArchive(folder)
        if not archive.exists():
            out.append({"archive": str(folder), "name": None, "cfg": None, "rows": []})
            continue
        part = archived_config(archive.config(), StudyConfig())
        arms, seeds = list(part.arms), all_seeds(part)
        summary = summarize_study(
            archive, arms, seeds, part.baseline, part.bootstrap, part.min_effect
        )
        rows = screen_rows(summary, archive, arms, part.baseline, cfg=part)
        out.append({"archive": str(folder), "name": part.name, "cfg": part, "rows": rows})
    return out
