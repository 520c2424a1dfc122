"""Does RL learn in this study's regime? Issue 79's bar, computed from the study's archive alone.

A regime "learns" (docs/study.md, "Does it learn?") when, for the seeds of the learning arm
(``learning_bar.arm``, GRPO in the shipped studies):

1. its training reward over the last quarter of the steps exceeds that of the first quarter, in
   every seed;
2. its last quarter's training reward exceeds the control arm's (``learning_bar.control``, the
   placebo: the same rollouts and updates with the rewards shuffled across the batch) over the
   same steps, seed by seed (same seed, so the same questions in the same order);
3. its held-out Pass@1 gains at least ``min_gain`` over the warm start, pooled over seeds, with a
   95% interval that excludes 0: the seed bootstrap (each seed resampled, then the questions)
   where there are two seeds or more, the question bootstrap for one seed;
4. that gain is positive in at least ``ceil(min_positive_share x seeds)`` seeds (4 of 5);
5. its Pass@1 on ``hops``-hop questions, pooled over seeds, reaches ``min_hop_pass1``;
6. every run of the two arms, training plus its evaluation, took at most ``max_run_minutes``.

Choices the issue leaves open, made here: a quarter is ``max(1, n // 4)`` of the run's ``n``
logged steps (a step logged twice by a resumed run counts once, its last value); criterion 2
compares the last quarters' means (both arms start from the same warm start on the same
questions, so their first quarters differ by the sampling alone; the rises are shown too); a
run's minutes are ``max(seconds, train_seconds)`` (the last launch's wall time, or the sum of the
step times where a resumed run's steps outlast its last launch) plus its evaluation's seconds.
The section also gives what a later confirmatory study is sized from: the per-seed gains' mean
with a seed-level Student t interval and their between-seed standard deviation.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from framework.study.archive import StudyArchive
from framework.study.schema import LearningBarConfig
from framework.study.summary import StudySummary, figure_means
from framework.study.types import Criterion, LearningBar, RunRecord, SeedRow


def quarter_means(series: Sequence[tuple[int, float]]) -> tuple[float, float] | None:
    """The mean of the first and of the last quarter of a curve's steps (``max(1, n // 4)`` steps
    each; a step logged twice keeps its last value); None for an empty curve."""
    by_step = dict(series)  # in logged order: a later duplicate of a step overwrites the earlier
    values = [by_step[s] for s in sorted(by_step)]
    if not values:
        return None
    q = max(1, len(values) // 4)
    return sum(values[:q]) / q, sum(values[-q:]) / q


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """The Student t interval of the mean of ``values`` (n - 1 degrees of freedom); None for
    fewer than two values."""
    n = len(values)
    if n < 2:
        return None
    from scipy.stats import t  # a dependency of sentence-transformers, declared in pyproject

    mean = statistics.fmean(values)
    half = float(t.ppf(0.5 + level / 2, n - 1)) * sample_sd(values) / math.sqrt(n)
    return mean - half, mean + half


def sample_sd(values: Sequence[float]) -> float:
    """The standard deviation with the n - 1 denominator (0.0 for fewer than two values)."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def run_minutes(record: RunRecord | None) -> float | None:
    """Training plus evaluation of an archived run, in minutes (module docstring); None when its
    evaluation time was not recorded."""
    if record is None or record.get("eval_seconds") is None:
        return None
    train = max(float(record.get("seconds") or 0.0), float(record.get("train_seconds") or 0.0))
    return (train + float(record["eval_seconds"] or 0.0)) / 60.0


def _hop_pass1(archive: StudyArchive, arm: str | None, seed: int | None, hops: int) -> float | None:
    """Pass@1 of one evaluation (``arm`` None: the warm start's) on its ``hops``-hop questions."""
    if not archive.has_eval(arm, seed):
        return None
    means = figure_means([r for r in archive.records(arm, seed) if r.hops == hops])
    return sum(means.values()) / len(means) if means else None


def _finished_curve(
    archive: StudyArchive, arm: str, seed: int, tag: str
) -> list[tuple[int, float]]:
    """A run's training curve once it has finished training (an unfinished run's quarters would
    judge it on the steps it has made so far); empty before."""
    run = archive.run(arm, seed)
    if run is None or run.get("status") != "done":
        return []
    return archive.curves(arm, seed).get(tag, [])


def _row(archive: StudyArchive, s: StudySummary, bar: LearningBarConfig, seed: int) -> SeedRow:
    mine = quarter_means(_finished_curve(archive, bar.arm, seed, bar.reward_tag))
    theirs = quarter_means(_finished_curve(archive, bar.control, seed, bar.reward_tag))
    arm = s["arms"].get(bar.arm)
    figures = arm["per_seed"].get(seed) if arm else None
    gain = figures.get("minus_start") if figures else None
    return {
        "seed": seed,
        "reward_first": mine[0] if mine else None,
        "reward_last": mine[1] if mine else None,
        "control_first": theirs[0] if theirs else None,
        "control_last": theirs[1] if theirs else None,
        "gain": gain["diff"] if gain else None,
        "gain_ci": list(gain["ci"]) if gain else None,
        "hop_pass1": _hop_pass1(archive, bar.arm, seed, bar.hops),
        "minutes": run_minutes(archive.run(bar.arm, seed)),
        "control_minutes": run_minutes(archive.run(bar.control, seed)),
    }


def learning_bar(
    archive: StudyArchive, s: StudySummary, bar: LearningBarConfig, seeds: Sequence[int]
) -> LearningBar:
    """The bar's figures and criteria for ``bar.arm`` over ``seeds``, from the archive and the
    study's summary ``s`` (its per-seed and pooled differences from the warm start)."""
    rows = [_row(archive, s, bar, seed) for seed in seeds]
    pooled = s["versus_start"].get(bar.arm, {}).get("Pass@1")
    by_seeds = s["versus_start_seeds"].get(bar.arm, {}).get("Pass@1")
    interval = by_seeds or pooled
    gains = [r["gain"] for r in rows if r["gain"] is not None]
    t_ci = t_interval(gains)
    hop = s["by_hops"].get(bar.arm, {}).get(str(bar.hops))
    out: LearningBar = {
        "arm": bar.arm,
        "control": bar.control,
        "seeds": list(seeds),
        "hops": bar.hops,
        "rows": rows,
        "gain": pooled["diff"] if pooled else None,
        "gain_ci": list(interval["ci"]) if interval else None,
        "gain_interval": "seed bootstrap" if by_seeds else "question bootstrap (one seed)",
        "gain_t_ci": list(t_ci) if t_ci else None,
        "gain_sd": sample_sd(gains) if len(gains) > 1 else None,
        "hop_pass1": hop["b_mean"] if hop else None,
        "hop_start": _hop_pass1(archive, None, None, bar.hops),
        "criteria": [],
        "met": None,
    }
    out["criteria"] = criteria(out, bar)
    out["met"] = _all([c["met"] for c in out["criteria"]])
    return out


def _all(values: Sequence[bool | None]) -> bool | None:
    """True when every value is True, False when one is False, None when unknown."""
    if not values or None in values:
        return False if False in values else None
    return all(values)


def _at_least(values: Sequence[bool | None], need: int) -> bool | None:
    """Whether at least ``need`` of ``values`` are True; None while the unknown ones decide it."""
    yes, unknown = sum(1 for v in values if v), sum(1 for v in values if v is None)
    if yes >= need:
        return True
    return None if yes + unknown >= need else False


def _fmt(v: float | None, spec: str = ".3f") -> str:
    return "n/a" if v is None else format(v, spec)


def criteria(b: LearningBar, bar: LearningBarConfig) -> list[Criterion]:
    """The six lines of the bar (module docstring) for the figures in ``b``."""
    rows = b["rows"]

    def gt(x: float | None, y: float | None) -> bool | None:
        return None if x is None or y is None else x > y

    rises = [gt(r["reward_last"], r["reward_first"]) for r in rows]
    above = [gt(r["reward_last"], r["control_last"]) for r in rows]
    positive = [None if r["gain"] is None else r["gain"] > 0 for r in rows]
    need = math.ceil(bar.min_positive_share * len(rows) - 1e-9)
    n_pos = sum(1 for p in positive if p)
    minutes = [m for r in rows for m in (r["minutes"], r["control_minutes"])]
    gain, ci = b["gain"], b["gain_ci"]
    return [
        {
            "rule": "training reward: last quarter above the first, every seed",
            "measured": ", ".join(
                f"{_fmt(r['reward_first'])} -> {_fmt(r['reward_last'])}" for r in rows
            ),
            "met": _all(rises),
        },
        {
            "rule": f"training reward: last quarter above `{bar.control}`'s, every seed",
            "measured": ", ".join(
                f"{_fmt(r['reward_last'])} vs {_fmt(r['control_last'])}" for r in rows
            ),
            "met": _all(above),
        },
        {
            "rule": f"Pass@1 gain over the warm start at least {bar.min_gain:+.2f}, "
            f"interval excluding 0 ({b['gain_interval']})",
            "measured": "n/a"
            if gain is None or ci is None
            else f"{gain:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]",
            "met": None if gain is None or ci is None else gain >= bar.min_gain and ci[0] > 0,
        },
        {
            "rule": f"gain positive in at least {need} of {len(rows)} seeds",
            "measured": f"{n_pos} of {len(rows)}",
            "met": _at_least(positive, need),
        },
        {
            "rule": f"{bar.hops}-hop Pass@1 at least {bar.min_hop_pass1:.2f}",
            "measured": f"{_fmt(b['hop_pass1'])} (the warm start: {_fmt(b['hop_start'])})",
            "met": None if b["hop_pass1"] is None else b["hop_pass1"] >= bar.min_hop_pass1,
        },
        {
            "rule": f"every run, training plus evaluation, at most {bar.max_run_minutes:.0f} min",
            "measured": _longest(minutes),
            "met": _all([None if m is None else m <= bar.max_run_minutes for m in minutes]),
        },
    ]


def _longest(minutes: Sequence[float | None]) -> str:
    known = [m for m in minutes if m is not None]
    return f"longest {max(known):.0f} min" if known else "n/a"


def bar_lines(b: LearningBar | None) -> list[str]:
    """The report's section for the bar (empty without one)."""
    if b is None:
        return []
    verdict = {True: "**met**", False: "**not met**", None: "not decided yet"}[b["met"]]
    lines = [
        f"## Does `{b['arm']}` learn here? (the learning bar: {verdict})",
        "",
        "| criterion | measured | met |",
        "|---|---|---|",
    ]
    mark = {True: "yes", False: "**no**", None: "not yet"}
    lines += [f"| {c['rule']} | {c['measured']} | {mark[c['met']]} |" for c in b["criteria"]]
    lines += [
        "",
        f"| seed | reward, first -> last quarter | `{b['control']}`, first -> last | "
        f"Pass@1 gain [95% CI] | {b['hops']}-hop Pass@1 | minutes (run / control) |",
        "|---|---|---|---|---|---|",
    ]
    for r in b["rows"]:
        ci = r["gain_ci"]
        gain = (
            "n/a"
            if r["gain"] is None or ci is None
            else (f"{r['gain']:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]")
        )
        lines.append(
            f"| {r['seed']} | {_fmt(r['reward_first'])} -> {_fmt(r['reward_last'])} | "
            f"{_fmt(r['control_first'])} -> {_fmt(r['control_last'])} | {gain} | "
            f"{_fmt(r['hop_pass1'])} | {_fmt(r['minutes'], '.0f')} / "
            f"{_fmt(r['control_minutes'], '.0f')} |"
        )
    lines.append("")
    if b["gain_t_ci"] is not None and b["gain_sd"] is not None:
        lo, hi = b["gain_t_ci"]
        n = sum(1 for r in b["rows"] if r["gain"] is not None)
        lines += [
            f"Per-seed gains: mean {(lo + hi) / 2:+.3f}, seed-level t interval [{lo:+.3f}, {hi:+.3f}] "
            f"({n - 1} degrees of freedom), between-seed SD {b['gain_sd']:.3f} (what a "
            "confirmatory study is sized from).",
            "",
        ]
    return lines
