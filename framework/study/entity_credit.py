"""What E-GRPO's entity term gave (or would have given) the wrong rollouts a run trained on: the
distribution of the normalised entity rate ``γ̂`` over all its training steps, recomputed from the
trajectory records it saved (``runs/<arm>/seed<S>/trajectories/step-*.jsonl``).

The run logs the distribution's summary each step (``rollout/partial_credit_share``,
``rollout/wrong_entity_rate_mean`` / ``_zero`` / ``_full``: :func:`~framework.rollout.metrics.
partial_credit`); the paper finds ``γ̂`` bimodal, which only the whole histogram shows. Each
step's records are scored with the run's own reward settings (its ``config.yaml``): the answer
metric that decides correctness and the entity rule (E_q with or without the entities the question
names), so a GRPO run's figures are what E-GRPO with the default rule would have credited.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import TypedDict

from framework.rollout.metrics import (
    correct_answers,
    correctness_metric,
    entity_rule,
    wrong_entity_rates,
)
from framework.study.layout import saved_config
from framework.study.types import Histogram, PooledHistogram, RunHistogram
from framework.types import STATUS_OK

#: the histogram's interior bins over (0, 1), beside the masses at exactly 0 and at 1
INTERIOR_EDGES = (0.0, 0.25, 0.5, 0.75, 1.0)


class StepRecord(TypedDict, total=False):
    """The fields of a saved trajectory record (``trajectories/step-*.jsonl``) this reads."""

    status: str
    answer: str | None
    golden_answers: list[str]
    think_text: str | None
    entities: list[list[str] | str]
    question: str
    group: int


def reward_config(run: Path) -> object:
    """The run's reward config, typed through the reward registry from its saved ``config.yaml``
    (None when the file or the reward cannot be read: the default rule and exact match apply)."""
    from framework.registry import REWARDS, load_components

    section = (saved_config(run) or {}).get("reward")
    if not isinstance(section, dict):
        return None
    try:
        load_components()
        cls = REWARDS.get(section["name"]).config_cls
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in section.items() if k in names})
    except (LookupError, TypeError, ValueError):  # said in the record ("defaults")
        return None


def step_rates(records: Sequence[StepRecord], cfg: object) -> list[float]:
    """``γ̂`` of each wrong rollout of one training step's records (:func:`~framework.rollout.
    metrics.wrong_entity_rates`); empty when a record carries no entities."""
    if not records or not all(r.get("entities") for r in records):
        return []
    statuses = [r.get("status", "") for r in records]
    correct = correct_answers(
        statuses,
        [r.get("answer") for r in records],
        [r["golden_answers"] for r in records],
        correctness_metric(cfg),
    )
    rates = wrong_entity_rates(
        [r.get("think_text") or "" for r in records],
        [r["entities"] for r in records],
        [r["question"] for r in records],
        [status == STATUS_OK for status in statuses],
        correct,
        [int(r["group"]) for r in records],
        entity_rule(cfg),
    )
    return [float(x) for x in rates]


def run_histogram(run: Path) -> RunHistogram | None:
    """The :func:`histogram` of ``γ̂`` over every wrong rollout of the run's saved steps (rank
    0's), with ``rule`` saying whose settings scored them; None when it saved no trajectories."""
    folder = run / "trajectories"
    files = sorted(f for f in folder.glob("step-*.jsonl") if ".rank" not in f.name)
    if not files:
        return None
    cfg = reward_config(run)
    rates: list[float] = []
    for f in files:
        with f.open() as fh:
            records = [json.loads(line) for line in fh if line.strip()]
        rates += step_rates(records, cfg)
    rule = "the run's reward" if cfg is not None else "defaults (config.yaml unreadable)"
    return RunHistogram(**histogram(rates), steps=len(files), rule=rule)


def histogram(rates: Sequence[float]) -> Histogram:
    """Counts of ``rates``: at exactly 0, in each interior bin ``(a, b]`` of
    :data:`INTERIOR_EDGES` below 1, and at 1 or more."""
    interior = [0] * (len(INTERIOR_EDGES) - 1)
    for x in rates:
        if 0 < x < 1:
            k = next(i for i in range(len(interior)) if x <= INTERIOR_EDGES[i + 1])
            interior[k] += 1
    return {
        "n": len(rates),
        "zero": sum(1 for x in rates if x <= 0),
        "interior": interior,
        "full": sum(1 for x in rates if x >= 1),
        "edges": list(INTERIOR_EDGES),
        "mean": sum(rates) / len(rates) if rates else None,
    }


def pooled(histograms: Sequence[Histogram | None]) -> PooledHistogram | None:
    """The sum of several runs' :func:`histogram` (their rollouts pooled); None for none."""
    hs = [h for h in histograms if h and h["n"]]
    if not hs:
        return None
    n = sum(h["n"] for h in hs)
    return {
        "runs": len(hs),
        "n": n,
        "zero": sum(h["zero"] for h in hs),
        "interior": [sum(col) for col in zip(*(h["interior"] for h in hs), strict=True)],
        "full": sum(h["full"] for h in hs),
        "edges": hs[0]["edges"],
        "mean": sum((h["mean"] or 0.0) * h["n"] for h in hs) / n,  # a histogram of n > 0 has one
    }
