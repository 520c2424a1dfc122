"""The screening table: every registered method trained and evaluated alike, against one baseline.

``seekrl-study study=screen`` (``screen=true``) adds one arm per registered method, found when the
study starts (:func:`framework.cli.study.screen_arms`), so a component registered later, by a plugin
too, appears without editing the study:

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
  ``screen_inert`` rule, :mod:`framework.config.inert`; :func:`inert_reason` asks each of an arm's
  differing sections). The rules: a loss that sees the policy only through the importance ratio
  (PPO-clip, GSPO, CISPO, ETR) is the baseline's when every optimiser step is on policy (one
  policy epoch, one mini-batch: the ratio is exactly 1); DPPO's pruning acts on no rollout with a
  signal when binary rewards in groups of ``G`` make every nonzero ``|A|`` at least ``1/(G-1)`` of
  the largest and the threshold is below that; DaGRPO masks nothing at a similarity threshold of
  1 or more (below, the texts decide: not knowable from the config); ``uniform`` with
  ``start_hops`` set is ``hop_curriculum``. Such an arm is listed as *inert at these settings*
  with the reason and is not trained (``inert_arms``; the study's log says so): its row would
  measure nothing about the method, and "no difference shown" would misread it.
- **Identical to the baseline.** A method whose runs came out the baseline's exactly (every
  training curve and every evaluation sample the same, seed for seed) is marked so after the
  fact (:func:`same_as_baseline`): a rule no config shows (DaGRPO's 0.9 threshold, which no pair
  of rollouts met) changed no update.
- **Compute.** A row shows, per training step (the mean over its steps and seeds, from the run's
  logged ``train/generated_rollouts``, ``train/generated_tokens`` and ``train/optimizer_steps``;
  for a run recorded before those, its config's ``optim.policy_epochs``), what the method spent.
  A method that spends more than the baseline (more optimiser steps, more than
  :data:`ROLLOUT_TOLERANCE` more rollouts or more than :data:`TOKEN_TOLERANCE` more generated
  tokens per step, :func:`spends_more`) is compared with a reference arm that spends as much
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

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import is_dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from framework.config.inert import config_leaves, declared_rule
from framework.eval.paired import interval_side
from framework.health.config import monitor_config
from framework.registry.kinds import HEALTH_MONITORS

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
#: more rollouts per step than the baseline's by this share spends more (a sampler that draws a
#: reserve group now and then is not flagged; dynamic sampling's extra rounds are)
ROLLOUT_TOLERANCE = 0.05
#: more generated tokens per step than the baseline's by this share spends more: a policy's
#: response length is an outcome of its training too (the v1 screen's methods answered in 30%
#: fewer to 28% more tokens per rollout than GRPO), so only a larger excess, an augmenter's or a
#: budget's, counts
TOKEN_TOLERANCE = 0.5


# -- inert at these settings: known from the config --------------------------------------------------
#: train config keys that name an arm, not what it trains
LABEL_KEYS = ("algorithm",)


def inert_reason(arm: Any, baseline: Any) -> str | None:
    """Why the train config ``arm`` trains exactly as ``baseline`` does, from the two configs
    alone, or None when it may not (module docstring, "Inert at these settings").

    Every section in which the two differ (``advantage``, ``loss``, ``sampler``, ...; the bundle's
    label ``algorithm`` aside) must be a component whose config class declares a ``screen_inert``
    rule (:mod:`framework.config.inert`) that says its differences change no update at ``arm``'s
    settings; a difference anywhere else (``optim``, ``reward``, a component without a rule, a rule
    that says None) leaves the arm to be trained. The reasons are joined, section by section."""
    from omegaconf import OmegaConf

    a = config_leaves(OmegaConf.to_container(OmegaConf.structured(arm)))
    b = config_leaves(OmegaConf.to_container(OmegaConf.structured(baseline)))
    missing = object()
    keys = sorted(
        k
        for k in a.keys() | b.keys()
        if k.split(".")[0] not in LABEL_KEYS and a.get(k, missing) != b.get(k, missing)
    )
    if not keys:
        return "its train config is the baseline's"
    reasons = []
    for name in dict.fromkeys(k.split(".")[0] for k in keys):
        section = getattr(arm, name, None)
        rule = declared_rule(type(section)) if is_dataclass(section) else None
        why = rule(section, arm, baseline) if rule is not None else None
        if why is None:
            return None
        reasons.append(f"{name}={getattr(section, 'name', '?')}: {why}")
    return "; ".join(reasons)


# -- multiplicity ----------------------------------------------------------------------------------
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


# -- compute ----------------------------------------------------------------------------------------
def _series_mean(series: Mapping[str, Any], tag: str) -> float | None:
    values = [float(v) for _, v in series.get(tag) or []]
    return statistics.fmean(values) if values else None


def run_compute(run: Mapping[str, Any]) -> dict[str, Any]:
    """What one run spent per training step, the mean over its steps, from its record's
    ``compute`` series (:data:`framework.eval.study_archive.COMPUTE_TAGS`): ``rollouts`` (every
    rollout generated: ``train/generated_rollouts``, else the trained ``train/rollouts``),
    ``generated_tokens`` (``train/generated_tokens``, else ``rollout/generated_tokens`` x
    ``train/rollouts``) and ``optimizer_steps`` (``train/optimizer_steps``, else
    ``loss/optimizer_steps``, else the saved config's ``optim.policy_epochs`` when its batches
    were one mini-batch and its loss is not turn-staged: ``from_config`` then). None where
    nothing says."""
    series = run.get("compute") or {}
    rollouts = _series_mean(series, "train/generated_rollouts")
    if rollouts is None:
        rollouts = _series_mean(series, "train/rollouts")
    tokens = _series_mean(series, "train/generated_tokens")
    if tokens is None and series.get("rollout/generated_tokens") and series.get("train/rollouts"):
        trained = {int(s): float(v) for s, v in series["train/rollouts"]}
        per = [float(v) * trained[int(s)] for s, v in series["rollout/generated_tokens"]]
        tokens = statistics.fmean(per) if per else None
    steps = _series_mean(series, "train/optimizer_steps")
    if steps is None:
        steps = _series_mean(series, "loss/optimizer_steps")
    from_config = False
    if steps is None:
        steps = _configured_steps(run.get("config") or {})
        from_config = steps is not None
    return {
        "rollouts": rollouts,
        "generated_tokens": tokens,
        "optimizer_steps": steps,
        "from_config": from_config,
    }


def _configured_steps(config: Mapping[str, Any]) -> float | None:
    """Optimiser steps per batch from a saved train config: its policy epochs, when it trained
    on whole batches (no ``mini_batch_size``, or 0) with a loss that is not turn-staged."""
    optim = config.get("optim") or {}
    loss = (config.get("loss") or {}).get("name")
    if "policy_epochs" not in optim or optim.get("mini_batch_size") or loss is None:
        return None
    from framework.registry import ALL, load_components

    load_components()
    entry = ALL["loss"].get(loss) if loss in ALL["loss"] else None
    if entry is None or getattr(entry.config_cls, "stages_per_turn", False):
        return None
    return float(optim["policy_epochs"])


def arm_compute(archive: Any, arm: str, seeds: Sequence[int]) -> dict[str, Any] | None:
    """:func:`run_compute` of the arm's runs, each figure the mean over the seeds that have it;
    None without a run record."""
    found = [run_compute(run) for s in seeds if (run := archive.run(arm, s))]
    if not found:
        return None
    out: dict[str, Any] = {}
    for key in ("rollouts", "generated_tokens", "optimizer_steps"):
        values = [c[key] for c in found if c[key] is not None]
        out[key] = statistics.fmean(values) if values else None
    out["from_config"] = any(c["from_config"] for c in found)
    return out


def spends_more(mine: Mapping[str, Any] | None, theirs: Mapping[str, Any] | None) -> list[str]:
    """How ``mine`` (a row's compute, :func:`arm_compute`) spends more per step than ``theirs``,
    one phrase per figure: more optimiser steps (any excess), more rollouts (above
    :data:`ROLLOUT_TOLERANCE`) or more generated tokens (above :data:`TOKEN_TOLERANCE`); a figure
    either lacks is not compared. Empty when it spends no more."""
    if not mine or not theirs:
        return []
    out = []

    def both(key: str) -> tuple[float, float] | None:
        a, b = mine.get(key), theirs.get(key)
        return None if a is None or b is None else (float(a), float(b))

    if (s := both("optimizer_steps")) and s[0] > s[1] + 1e-9:
        out.append(f"{s[0]:.1f} optimiser steps per batch against {s[1]:.1f}")
    if (r := both("rollouts")) and r[0] > r[1] * (1 + ROLLOUT_TOLERANCE):
        out.append(f"{r[0]:.1f} rollouts per step against {r[1]:.1f}")
    if (t := both("generated_tokens")) and t[0] > t[1] * (1 + TOKEN_TOLERANCE):
        out.append(f"{t[0]:.0f} generated tokens per step against {t[1]:.0f}")
    return out


def reference_arms(arms: Mapping[str, Sequence[str]], baseline: str) -> dict[str, str]:
    """The screen's reference arms: arm -> what it is. A reference is the baseline bundle with
    ``optim`` settings only (``grpo-epochs2``: ``[algorithm=grpo, optim.policy_epochs=2]``), the
    baseline at another compute for the methods that spend more to be compared with; no method."""
    out = {}
    head = f"algorithm={baseline}"
    for arm, args in arms.items():
        rest = list(args)[1:]
        optim_only = all(str(a).startswith("optim.") for a in rest)
        if arm != baseline and list(args)[:1] == [head] and rest and optim_only:
            out[arm] = f"the baseline with {' '.join(rest)}"
    return out


# -- the noise band: the replicated baseline's seeds -------------------------------------------------
def _per_question(archive: Any, arm: str, seed: int) -> dict[Any, float]:
    from framework.eval.paired import per_question

    return per_question(archive.records(arm, seed))


def noise_band(
    archive: Any, baseline: str, seeds: Sequence[int], n_boot: int
) -> dict[str, Any] | None:
    """The spread between the baseline's evaluated ``seeds`` (two or more; None otherwise): each
    seed's Pass@1, their range and SD, and the paired difference of every pair (later seed minus
    earlier, bootstrap over questions, with its interval); ``widest``, the largest of those
    differences in size."""
    from framework.eval.paired import paired_bootstrap
    from framework.eval.study_report import _as_dict

    done = [s for s in seeds if archive.has_eval(baseline, s)]
    if len(done) < 2:
        return None
    pq = {s: _per_question(archive, baseline, s) for s in done}
    pass1 = [statistics.fmean(pq[s].values()) for s in done]
    pairs = []
    for a, b in combinations(done, 2):
        d = _as_dict(paired_bootstrap(pq[a], pq[b], n_boot=n_boot))
        pairs.append({"seeds": [a, b], **d})
    return {
        "seeds": done,
        "pass@1": pass1,
        "range": max(pass1) - min(pass1),
        "sd": statistics.stdev(pass1),
        "pairs": pairs,
        "widest": max(abs(p["diff"]) for p in pairs),
    }


def _matched_diff(
    summary: Mapping[str, Any],
    archive: Any,
    target: str,
    arm: str,
    mine: Sequence[int],
    theirs: Sequence[int],
    baseline: str,
    n_boot: int,
) -> dict[str, Any] | None:
    """``arm`` minus ``target`` (Pass@1, paired bootstrap over questions) on the seeds both ran,
    each pooled over those seeds; the summary's comparison where it is that already (the baseline
    with the arm's seeds exactly), or where no seed is shared."""
    from framework.eval.paired import paired_bootstrap, pooled_per_question
    from framework.eval.study_report import _as_dict

    shared = [s for s in mine if s in theirs]
    summarized = summary["versus_baseline"].get(arm, {}).get("Pass@1")
    if target == baseline and (not shared or list(mine) == list(theirs) == shared):
        return summarized
    if not shared:
        return None
    a = pooled_per_question([_per_question(archive, target, s) for s in shared])
    b = pooled_per_question([_per_question(archive, arm, s) for s in shared])
    try:
        return _as_dict(paired_bootstrap(a, b, n_boot=n_boot))
    except ValueError:  # fewer than two questions in common
        return None


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


def _inert_row(arm: str, reason: str) -> dict[str, Any]:
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
    summary: Mapping[str, Any],
    archive: Any,
    arms: Sequence[str],
    baseline: str,
    *,
    cfg: Any = None,
) -> list[dict[str, Any]]:
    """One row per arm of a screen (module docstring), from the study's summary
    (:func:`~framework.eval.study_report.summarize_study`) and its archive: an evaluated arm's
    figures, or an inert arm's reason.

    Args:
        cfg: the study config, for its ``inert_arms``, its arms' overrides (the reference arms,
            :func:`reference_arms`), its ``baseline_seeds`` (the noise band) and its
            ``bootstrap``; None for a table of plain rows (the summary's comparisons as they are).
    """
    from framework.config.study import arm_seeds

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
                "train_seconds": trained or None,
                "peak_gb": max(peaks) if peaks else None,
                "peak_last_launch": resumed,
                "machines": cpus,
                "monitors_fired": sorted(alarms),
                "stopped_by": stopped,
                "identical_to_baseline": identical,
                "inert": inert.get(arm),  # predicted inert, yet evaluated (an earlier run)
                "reference": refs.get(arm),
                "fidelity": arm_fidelity(methods),
                # the first seed's per-step training accuracy, [[step, value], ...]
                "accuracy_curve": sorted(curve) if curve else None,
            }
        )
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


def _compare(
    rows: list[dict[str, Any]],
    summary: Mapping[str, Any],
    archive: Any,
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
        key=lambda r: ((r.get("compute") or {}).get("optimizer_steps") or 0.0, r["arm"]),
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


def _in_family(r: Mapping[str, Any], baseline: str) -> bool:
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


def _adjust(rows: list[dict[str, Any]], baseline: str) -> None:
    """Each comparison's raw p-value and its Holm and BH adjustments over the table's
    comparisons (``p_value``, ``p_holm``, ``p_bh``; None outside the family)."""
    family = [r for r in rows if _in_family(r, baseline)]
    raw = [float(r["minus_baseline"]["p_value"]) for r in family]
    for r in rows:
        d = r.get("minus_baseline")
        r["p_value"] = d.get("p_value") if d else None
        r["p_holm"] = r["p_bh"] = None
    for r, h, q in zip(family, holm(raw), benjamini_hochberg(raw), strict=True):
        r["p_holm"], r["p_bh"] = h, q


def _reading(r: Mapping[str, Any], baseline: str) -> str:
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


def row_machines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The machines (CPU and precision) the rows' runs trained on, each once, in row order."""
    return list(dict.fromkeys(m for r in rows for m in r.get("machines", [])))


def _methods(n: int) -> str:
    """``1 method``, ``2 methods``: a count in the table's prose."""
    return f"{n} method" if n == 1 else f"{n} methods"


def _num(v: float | None, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def _diff_cell(r: Mapping[str, Any], baseline: str) -> str:
    d = r.get("minus_baseline")
    if not d:
        return ""
    text = f"{d['diff']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}]"
    against = r.get("compared_with")
    return text + (f" vs `{against}`" if against not in (None, baseline) else "")


def _p_cell(r: Mapping[str, Any]) -> str:
    p = r.get("p_value")
    if p is None:
        return ""
    if r.get("p_holm") is None:
        return f"{p:.3f}"
    return f"{p:.3f}, {r['p_holm']:.3f}, {r['p_bh']:.3f}"


def _compute_cells(r: Mapping[str, Any]) -> list[str]:
    if r.get("pass@1") is None:
        return ["-", "-", "-"]
    c = r.get("compute") or {}
    steps = c.get("optimizer_steps")
    if steps is not None and c.get("from_config"):
        shown = f"{steps:.0f} (config)"
    else:
        shown = _num(steps, ".1f")
    return [_num(c.get("rollouts"), ".1f"), _num(c.get("generated_tokens"), ".0f"), shown]


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
    evaluated = [r for r in rows if r.get("pass@1") is not None]
    inert = [r for r in rows if r.get("pass@1") is None]
    base_row = next((r for r in rows if r["arm"] == cfg.baseline), None)
    band = (base_row or {}).get("noise_band")
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
    counts = sorted({int(r["questions"]) for r in rows if r.get("questions")})
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
    lines = [
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
    noise_col = band is not None
    header = ["method", "fidelity", "Pass@1 [95% CI]", "minus baseline [95% CI]"]
    header += ["p: raw, Holm, BH", *(["within seed noise"] if noise_col else [])]
    header += ["tool calls", "format errors", "over budget", "tokens / rollout"]
    header += ["rollouts / step", "generated tokens / step", "optimiser steps / step"]
    header += ["s / step", "peak GB", "machine", "monitors fired", "reading"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        if r.get("pass@1") is None:  # inert at these settings: listed, not trained
            cells = [f"`{r['arm']}`", r.get("fidelity", ""), "not trained", "", ""]
            cells += [""] * noise_col + ["-"] * 4 + _compute_cells(r) + ["-"] * 4
            lines.append("| " + " | ".join([*cells, r["verdict"]]) + " |")
            continue
        low, high = r["pass@1_ci"]
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
            _diff_cell(r, cfg.baseline),
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
    lines += _cost_lines(rows, letter)
    text = [*lines, *_power_lines(rows, cfg.baseline), *_monitor_lines(evaluated, cfg.baseline)]
    return "\n".join(text) + "\n"


def _band_lines(band: Mapping[str, Any] | None, baseline: str) -> list[str]:
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


def _adjustment_lines(rows: Sequence[Mapping[str, Any]], baseline: str) -> list[str]:
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


def _compute_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the compute columns hold and how a method that spends more is compared."""
    if not any(r.get("compute") for r in rows):
        return []
    config = any((r.get("compute") or {}).get("from_config") for r in rows)
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


def _power_lines(rows: Sequence[Mapping[str, Any]], baseline: str = "") -> list[str]:
    """What the screen could detect, and how many candidates chance alone would give: the median
    (and range) over the comparisons of the true difference each finds with 80% power, and the
    expected number of intervals excluding 0 upwards if no method differed (``CHANCE_UPWARDS``
    each; the expectation holds however the comparisons, which share the baseline, correlate).
    Arms identical to the baseline, inert and reference arms are not comparisons and are left
    out."""
    found = sorted(
        float(r["detectable"])
        for r in rows
        if r.get("detectable") is not None
        and not math.isnan(r["detectable"])
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
    from framework.config.study import StudyConfig, all_seeds
    from framework.eval.study_archive import StudyArchive, archived_config
    from framework.eval.study_report import summarize_study

    out: list[dict[str, Any]] = []
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
