"""The study report's statistics (:func:`summarize_study`): per-arm figures, paired differences
three ways, power and sizing, by hop count, and the bridge-entity analysis, from the archive alone.

Pass@1 of an arm pooled over seeds is the mean over questions of the seeds' per-question means.
Every difference (arm minus baseline, arm minus warm start) is given three ways side by side:
resampling questions (paired bootstrap), resampling clusters of questions that share an answer
(clustered bootstrap), and resampling each arm's seeds and then the questions (seed bootstrap);
with the power of each design for the smallest difference that matters (``min_effect``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict

from framework.eval.curves import CurveRow
from framework.eval.metrics import entity_comparison, summarize_samples
from framework.eval.paired import (
    PairedResult,
    QuestionKey,
    cluster_bootstrap,
    paired_bootstrap,
    pooled_per_question,
    power_at,
    question_means,
    seed_bootstrap,
    variance_components,
)
from framework.eval.records import EvalRecord
from framework.study.archive import StudyArchive
from framework.study.compute import Compute
from framework.study.types import JSON, ArchivedSeries, LearningBar, PooledHistogram
from framework.types import STATUS_FORMAT_ERROR, STATUS_OVER_BUDGET

if TYPE_CHECKING:
    from framework.study.integrity import Integrity


class Result(TypedDict):
    """A paired difference ``b - a`` as the report keeps it (:func:`result_dict`)."""

    diff: float
    ci: list[float]
    p_value: float
    questions: int
    a_mean: float
    b_mean: float
    excludes_zero: bool
    sd: float
    se: float
    detectable: float


class PoweredResult(Result):
    """A :class:`Result` with its power for the smallest difference that matters."""

    power_at_min_effect: float


#: the entity analysis on the bridge entities (:func:`bridge_analysis`)
class Bridges(TypedDict):
    questions_with_bridges: int
    questions_with_correct_and_wrong: int
    correct_matches_more: int
    wrong_matches_more: int
    ties: int
    mean_matched_correct: float
    mean_matched_wrong: float
    bridge_match_rate: float
    wrong_with_a_bridge: float | None


#: one evaluation's headline figures (:func:`overall`)
Overall = TypedDict(
    "Overall",
    {
        "pass@1": float,
        "pass@1_ci": list[float],
        "k": int,
        "pass@k": float,
        "questions": int,
        "samples": int,
        "tool_calls": float | None,
        "turns": float | None,
        "format_error_rate": float | None,
        "over_budget_rate": float | None,
        "entity": Bridges | None,
    },
)

_SeedFigures = TypedDict(
    "_SeedFigures",
    {
        "pass@1": float,
        "pass@1_ci": list[float],
        "pass@k": float,
        "tool_calls": float | None,
        "turns": float | None,
        "format_error_rate": float | None,
        "over_budget_rate": float | None,
    },
)


class SeedFigures(_SeedFigures, total=False):
    """One seed's figures in its arm's ``per_seed``; ``minus_start`` where the warm start was
    evaluated."""

    minus_start: Result


#: one arm's figures pooled over its seeds (:func:`_arm_figures`)
ArmFigures = TypedDict(
    "ArmFigures",
    {
        "seeds": list[int],
        "pass@1": float,
        "pass@1_ci": list[float],
        "questions": int,
        "k": int,
        "pass@k": float,
        "tool_calls": float,
        "turns": float,
        "format_error_rate": float,
        "over_budget_rate": float,
        "per_seed": dict[int, SeedFigures],
        "entity": Bridges | None,
    },
)


class Design(TypedDict):
    """One split of the rollout budget into questions x samples (:func:`_sizing`)."""

    samples_per_question: int
    questions: int
    se: float
    detectable: float
    power_at_min_effect: float


class Sizing(TypedDict):
    """The measured variance components of a Pass@1 difference and the designs they size."""

    between: float
    within: float
    budget: int
    designs: list[Design]


class NoisePair(Result):
    """The paired difference of two of the baseline's seeds (later minus earlier)."""

    seeds: list[int]


#: the spread between the baseline's seeds (:func:`noise_band`)
NoiseBand = TypedDict(
    "NoiseBand",
    {
        "seeds": list[int],
        "pass@1": list[float],
        "range": float,
        "sd": float,
        "pairs": list[NoisePair],
        "widest": float,
    },
)


#: a row of the screening table (:func:`screen_rows`); an inert arm's row has fewer keys
ScreenRow = TypedDict(
    "ScreenRow",
    {
        "arm": str,
        "seeds": list[int],
        "pass@1": float | None,
        "pass@1_ci": list[float] | None,
        "minus_baseline": Result | None,
        "detectable": float | None,
        "tool_calls": float | None,
        "format_errors": float | None,
        "over_budget": float | None,
        "questions": int | None,
        "response_tokens": float | None,
        "compute": Compute | None,
        "seconds_per_step": float | None,
        "train_seconds": float | None,
        "peak_gb": float | None,
        "peak_last_launch": bool,
        "machines": list[str],
        "monitors_fired": list[str],
        "stopped_by": list[str],
        "identical_to_baseline": bool,
        "inert": str | None,
        "reference": str | None,
        "verdict": str,
        "fidelity": str,
        "accuracy_curve": ArchivedSeries | None,
        "noise_band": NoiseBand | None,
        "within_noise": bool | None,
        "unmatched": str | None,
        "compared_with": str | None,
        "p_value": float | None,
        "p_holm": float | None,
        "p_bh": float | None,
    },
    total=False,
)


class RunRow(TypedDict):
    """A run in the report's run table (``study.json``'s ``runs``)."""

    arm: str
    seed: int
    status: str
    seconds: float
    train_seconds: float | None
    dir: str
    versions: dict[str, JSON]


class PartRows(TypedDict):
    """A part of a screen in ``study.json`` (``screen_parts``)."""

    name: str | None
    archive: str
    rows: list[ScreenRow]


class _Summary(TypedDict):
    min_effect: float
    arms: dict[str, ArmFigures]
    versus_baseline: dict[str, dict[str, Result]]
    versus_start: dict[str, dict[str, Result]]
    versus_baseline_seeds: dict[str, dict[str, Result]]
    versus_start_seeds: dict[str, dict[str, Result]]
    pass1_three_ways: dict[str, dict[str, PoweredResult]]
    by_hops: dict[str, dict[str, Result]]
    sizing: dict[str, Sizing]
    test_evaluations: dict[str, int]


class StudySummary(_Summary, total=False):
    """Every figure of the report (:func:`summarize_study`; ``study.json``): ``start`` where the
    warm start was evaluated, and what :func:`~framework.study.report.write_report` adds (the
    curves, the entity-rate histograms, the runs, their provenance, a screen's rows)."""

    start: Overall
    curves: list[CurveRow]
    wrong_entity_rates: dict[str, PooledHistogram]
    runs: list[RunRow]
    integrity: Integrity
    screen: list[ScreenRow]
    screen_parts: list[PartRows]
    learning_bar: LearningBar


#: per-rollout figures compared between arms (figure -> label)
FIGURES = {
    "correct": "Pass@1",
    "tool_calls": "tool calls",
    "turns": "turns",
    "format_error": "format errors",
}


def format_error(r: EvalRecord) -> float:
    """1.0 for a rollout whose output broke the tool-call format, else 0.0."""
    return float(r.status == STATUS_FORMAT_ERROR)


def over_budget(r: EvalRecord) -> float:
    """1.0 for a rollout that ran out of turns, tool calls or tokens unanswered, else 0.0."""
    return float(r.status == STATUS_OVER_BUDGET)


#: each figure of :data:`FIGURES`, of one record (None: not known, left out of the means)
FIGURE_OF: dict[str, Callable[[EvalRecord], float | None]] = {
    "correct": lambda r: r.correct,
    "tool_calls": lambda r: r.tool_calls,
    "turns": lambda r: r.turns,
    "format_error": format_error,
}


def figure_means(
    records: Sequence[EvalRecord], figure: str = "correct"
) -> dict[QuestionKey, float]:
    """Per question, the mean of one of :data:`FIGURES` over its records."""
    return question_means(records, FIGURE_OF[figure])


#: samples per question of the sizing table (same rollout budget, other splits of it)
SIZING_SAMPLES = (1, 2, 4, 8)


def _mean_ci(values: Mapping[QuestionKey, float], n_boot: int) -> PairedResult:
    """Mean over questions with its bootstrap interval (a paired comparison against zero)."""
    return paired_bootstrap(dict.fromkeys(values, 0.0), values, n_boot=n_boot)


def overall(rows: Sequence[EvalRecord]) -> Overall:
    """One evaluation's headline figures from its records: Pass@1 (normal interval over
    questions), Pass@k at the smallest number of samples any question has, tool use, format
    errors, samples that ran out of budget unanswered, and the bridge-entity analysis."""
    groups = _grouped(rows)
    k = min(len(g) for g in groups)
    sampling = summarize_samples([[r.correct for r in g] for g in groups], k)
    return {
        "pass@1": sampling.pass1.mean,
        "pass@1_ci": [sampling.pass1.low, sampling.pass1.high],
        "k": k,
        "pass@k": sampling.pass_k,
        "questions": len(groups),
        "samples": len(rows),
        "tool_calls": _mean([r.tool_calls for r in rows]),
        "turns": _mean([r.turns for r in rows]),
        "format_error_rate": _mean([format_error(r) for r in rows]),
        "over_budget_rate": _mean([over_budget(r) for r in rows]),
        "entity": bridge_analysis(groups),
    }


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def bridge_analysis(groups: Sequence[Sequence[EvalRecord]]) -> Bridges | None:
    """The paper's entity analysis on the hidden bridge entities only.

    The anchor is named in the question and the answer is written by every correct rollout, so
    counting them makes "correct rollouts match more entities" close to automatic. Here only the
    bridges (entities between anchor and answer) count: per question with bridges and with both
    correct and wrong rollouts, do the correct ones match more of them? Also: the bridge match
    rate, and the share of wrong rollouts that match at least one bridge (those E-GRPO credits
    for something the question did not give away). None when no question has bridges.
    """
    groups = [g for g in groups if (g[0].bridges or 0) > 0]
    if not groups:
        return None
    # a question with bridges has both counts on every record (entity_kinds)
    cmp = entity_comparison(
        [[r.matched_bridges or 0 for r in g] for g in groups],
        [[r.correct for r in g] for g in groups],
    )
    rows = [r for g in groups for r in g]
    wrong = [r for r in rows if not r.correct]
    return {
        "questions_with_bridges": len(groups),
        "questions_with_correct_and_wrong": cmp.questions_with_both,  # cmp.as_dict()'s keys
        "correct_matches_more": cmp.correct_more,
        "wrong_matches_more": cmp.wrong_more,
        "ties": cmp.ties,
        "mean_matched_correct": cmp.mean_matched_correct,
        "mean_matched_wrong": cmp.mean_matched_wrong,
        "bridge_match_rate": sum(r.matched_bridges or 0 for r in rows)
        / sum(r.bridges or 0 for r in rows),
        "wrong_with_a_bridge": (
            sum((r.matched_bridges or 0) > 0 for r in wrong) / len(wrong) if wrong else None
        ),
    }


def _samples(rows: Sequence[EvalRecord]) -> dict[QuestionKey, list[float]]:
    out: dict[QuestionKey, list[float]] = {}
    for r in rows:
        out.setdefault((r.dataset, r.question_id), []).append(float(r.correct))
    return out


def _clusters(rows: Sequence[EvalRecord]) -> dict[QuestionKey, Hashable]:
    """question -> its answer key (records without one leave the question its own cluster)."""
    return {(r.dataset, r.question_id): r.answer_key for r in rows if r.answer_key is not None}


def _by_hops(
    start: Sequence[EvalRecord], seed_rows: Sequence[Sequence[EvalRecord]], n_boot: int
) -> dict[str, Result]:
    """Pass@1 of the warm start and of the arm (pooled over seeds) on the questions of each hop
    count, with the paired difference; empty when the rows carry no hop counts. A hop count with
    fewer than two questions is left out (no interval to give)."""
    hops = sorted({r.hops for r in start if r.hops is not None})
    out = {}
    for h in hops:
        s = figure_means([r for r in start if r.hops == h])
        a = pooled_per_question([figure_means([r for r in rs if r.hops == h]) for rs in seed_rows])
        if len(set(s) & set(a)) >= 2:  # a bootstrap needs two questions; fewer is left out
            out[str(h)] = result_dict(paired_bootstrap(s, a, n_boot=n_boot))
    return out


def _three_ways(
    a_runs: Sequence[Mapping[QuestionKey, float]],
    b_runs: Sequence[Mapping[QuestionKey, float]],
    clusters: Mapping[QuestionKey, Hashable],
    n_boot: int,
    min_effect: float,
) -> dict[str, PoweredResult]:
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
        name: PoweredResult(**result_dict(r), power_at_min_effect=r.power(min_effect))
        for name, r in out.items()
    }


def _sizing(
    a_rows: Sequence[EvalRecord], b_rows: Sequence[EvalRecord], min_effect: float
) -> Sizing:
    """How the same rollout budget would be best spent, from the measured variance components of
    the Pass@1 difference (:func:`framework.eval.paired.variance_components`)."""
    a, b = _samples(a_rows), _samples(b_rows)
    vc = variance_components(a, b)
    budget = sum(len(v) for v in b.values())  # rollouts of the candidate
    designs: list[Design] = []
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
) -> StudySummary:
    """Every figure of the report, from the study's archive alone."""
    start = archive.records(None) if archive.has_eval(None) else None
    out: StudySummary = {
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
    pooled: dict[str, dict[str, dict[QuestionKey, float]]] = {}
    by_seed: dict[str, dict[str, list[dict[QuestionKey, float]]]] = {}
    all_rows: dict[str, list[EvalRecord]] = {}
    clusters: dict[QuestionKey, Hashable] = {}
    if start is not None:
        out["start"] = overall(start)
        clusters.update(_clusters(start))
    for arm in arms:
        seeds_done = [s for s in seeds if archive.has_eval(arm, s)]
        if not seeds_done:
            continue
        seed_rows = [archive.records(arm, s) for s in seeds_done]
        for rows in seed_rows:
            clusters.update(_clusters(rows))
        figures = {key: [figure_means(rows, key) for rows in seed_rows] for key in FIGURES}
        all_rows[arm] = [r for rows in seed_rows for r in rows]
        pooled[arm] = {key: pooled_per_question(v) for key, v in figures.items()}
        by_seed[arm] = figures
        out["arms"][arm] = _arm_figures(seeds_done, seed_rows, pooled[arm], all_rows[arm], n_boot)
        if start is not None:
            _versus_start(
                out, arm, start, seed_rows, pooled[arm], figures, clusters, n_boot, min_effect
            )
    if baseline in pooled:
        for arm in pooled:
            if arm != baseline:
                _versus_baseline(
                    out, arm, baseline, pooled, by_seed, all_rows, clusters, n_boot, min_effect
                )
    return out


def _arm_figures(
    seeds_done: Sequence[int],
    seed_rows: Sequence[Sequence[EvalRecord]],
    pooled: Mapping[str, Mapping[QuestionKey, float]],
    rows: Sequence[EvalRecord],
    n_boot: int,
) -> ArmFigures:
    """One arm's figures: Pass@1 pooled over its seeds with its interval, the other figures as
    the mean of its seeds', each seed's, and the bridge-entity analysis of all its rows."""
    per_seed: dict[int, SeedFigures] = {}
    results = []
    for s, srows in zip(seeds_done, seed_rows, strict=True):
        o = overall(srows)
        results.append(o)
        per_seed[s] = {
            "pass@1": o["pass@1"],
            "pass@1_ci": o["pass@1_ci"],
            "pass@k": o["pass@k"],
            "tool_calls": o["tool_calls"],
            "turns": o["turns"],
            "format_error_rate": o["format_error_rate"],
            "over_budget_rate": o["over_budget_rate"],
        }
    p1 = _mean_ci(pooled["correct"], n_boot)
    return {
        "seeds": list(seeds_done),
        "pass@1": p1.diff,
        "pass@1_ci": [p1.low, p1.high],
        "questions": p1.n,
        "k": min(r["k"] for r in results),
        "pass@k": sum(r["pass@k"] for r in results) / len(results),
        "tool_calls": _seed_mean([r["tool_calls"] for r in results]),
        "turns": _seed_mean([r["turns"] for r in results]),
        "format_error_rate": _seed_mean([r["format_error_rate"] for r in results]),
        "over_budget_rate": _seed_mean([r["over_budget_rate"] for r in results]),
        "per_seed": per_seed,
        "entity": bridge_analysis(_grouped(rows)),
    }


def _seed_mean(values: Sequence[float | None]) -> float:
    """The mean of the seeds' figures (each known: an archive's records have every field)."""
    known = [v for v in values if v is not None]
    if len(known) < len(values):
        raise ValueError(
            "[summary] got an evaluation without tool calls or turns; expected the records "
            "seekrl-eval archives. Fix: archive the evaluation again (archive_study)."
        )
    return sum(known) / len(known)


def _versus_start(
    out: StudySummary,
    arm: str,
    start: Sequence[EvalRecord],
    seed_rows: Sequence[Sequence[EvalRecord]],
    pooled: Mapping[str, Mapping[QuestionKey, float]],
    figures: Mapping[str, Sequence[Mapping[QuestionKey, float]]],
    clusters: Mapping[QuestionKey, Hashable],
    n_boot: int,
    min_effect: float,
) -> None:
    """Into ``out``: ``arm`` minus the warm start in every figure (its seeds pooled, each seed's
    Pass@1, and with its seeds resampled too), the Pass@1 difference three ways, the sizing of the
    next evaluation and the difference by hop count."""
    start_pq = {key: figure_means(start, key) for key in FIGURES}
    per_seed = out["arms"][arm]["per_seed"]
    out["versus_start"][arm] = {
        label: result_dict(paired_bootstrap(start_pq[key], pooled[key], n_boot=n_boot))
        for key, label in FIGURES.items()
    }
    for s, seed_p1 in zip(per_seed, figures["correct"], strict=True):
        per_seed[s]["minus_start"] = result_dict(
            paired_bootstrap(start_pq["correct"], seed_p1, n_boot=n_boot)
        )
    if len(per_seed) > 1:
        out["versus_start_seeds"][arm] = {
            label: result_dict(seed_bootstrap([start_pq[key]], figures[key], n_boot=n_boot))
            for key, label in FIGURES.items()
        }
    out["pass1_three_ways"][f"{arm} - start"] = _three_ways(
        [start_pq["correct"]], figures["correct"], clusters, n_boot, min_effect
    )
    out["sizing"][f"{arm} - start"] = _sizing(
        start, [r for rs in seed_rows for r in rs], min_effect
    )
    by_hops = _by_hops(start, seed_rows, n_boot)
    if by_hops:
        out["by_hops"][arm] = by_hops


def _versus_baseline(
    out: StudySummary,
    arm: str,
    baseline: str,
    pooled: Mapping[str, Mapping[str, Mapping[QuestionKey, float]]],
    by_seed: Mapping[str, Mapping[str, Sequence[Mapping[QuestionKey, float]]]],
    all_rows: Mapping[str, Sequence[EvalRecord]],
    clusters: Mapping[QuestionKey, Hashable],
    n_boot: int,
    min_effect: float,
) -> None:
    """Into ``out``: ``arm`` minus the baseline in every figure (pooled, and with the seeds
    resampled too where either has several), the Pass@1 difference three ways and the sizing."""
    out["versus_baseline"][arm] = {
        label: result_dict(paired_bootstrap(pooled[baseline][key], pooled[arm][key], n_boot=n_boot))
        for key, label in FIGURES.items()
    }
    if len(by_seed[arm]["correct"]) > 1 or len(by_seed[baseline]["correct"]) > 1:
        out["versus_baseline_seeds"][arm] = {
            label: result_dict(
                seed_bootstrap(by_seed[baseline][key], by_seed[arm][key], n_boot=n_boot)
            )
            for key, label in FIGURES.items()
        }
    out["pass1_three_ways"][f"{arm} - {baseline}"] = _three_ways(
        by_seed[baseline]["correct"], by_seed[arm]["correct"], clusters, n_boot, min_effect
    )
    out["sizing"][f"{arm} - {baseline}"] = _sizing(all_rows[baseline], all_rows[arm], min_effect)


def _grouped(rows: Sequence[EvalRecord]) -> list[list[EvalRecord]]:
    by_q: dict[str, list[EvalRecord]] = {}
    for r in rows:
        by_q.setdefault(r.question_id, []).append(r)
    return list(by_q.values())


def result_dict(r: PairedResult) -> Result:
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
