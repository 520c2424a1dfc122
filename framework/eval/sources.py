"""Evaluation figures per ``data_source`` and their macro average, as Search-R1's tables give them.

Search-R1 evaluates one merged test file of seven QA sets (NQ, TriviaQA, PopQA, HotpotQA, 2Wiki,
MuSiQue, Bamboogle: its ``data_source`` column says which) and reports EM per source and the
unweighted mean over the sources. :func:`by_source` gives the same from an evaluation's records: one
row per (evaluated dataset, ``data_source``) pair, in the order their questions first appear, each a
:func:`~framework.eval.harness.summarize` of its records, and :func:`macro_average` over the rows,
where each source counts once whatever its size. Seven separate files give the same seven rows
(each file one source), and the macro average is then across the files.

``results.json`` holds it under ``by_source`` (:class:`BySource`); ``by_source.csv``, the report's
table and the printed lines are rendered from it by :mod:`framework.eval.report`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypedDict

from framework.eval.harness import summarize
from framework.eval.metrics import macro_mean_ci
from framework.eval.records import EvalRecord, source_of


class SourceRow(TypedDict):
    """One source of one evaluated dataset: its records' :func:`summarize`."""

    dataset: str
    data_source: str
    summary: dict[str, object]


class BySource(TypedDict):
    """What ``results.json`` holds under ``by_source``."""

    rows: list[SourceRow]
    macro: dict[str, object]


def by_source(records: Sequence[EvalRecord], k: int) -> BySource:
    """The summary of each (dataset, source) pair of ``records`` and their macro average.

    A record's source is its ``data_source`` (its ``dataset`` for records from before it was
    kept: :func:`~framework.eval.records.source_of`). Question ids need only be unique within a
    dataset: a pair's questions are grouped by id within the pair.

    Raises:
        ValueError: no records.
    """
    if not records:
        raise ValueError("[by_source] got no records; expected an evaluation's records")
    groups: dict[tuple[str, str], list[EvalRecord]] = {}
    for r in records:
        groups.setdefault((r.dataset, source_of(r)), []).append(r)
    rows = [
        SourceRow(dataset=dataset, data_source=source, summary=summarize(group, k))
        for (dataset, source), group in groups.items()
    ]
    accuracies = [question_accuracies(group, k) for group in groups.values()]
    return BySource(rows=rows, macro=macro_average([r["summary"] for r in rows], accuracies, k))


def question_accuracies(records: Sequence[EvalRecord], k: int) -> list[float]:
    """Per question (in first-seen order) the share of its samples judged correct, over the
    questions with at least ``k`` samples (those :func:`summarize`'s Pass@1 averages)."""
    by_q: dict[str, list[bool]] = {}
    for r in records:
        by_q.setdefault(r.question_id, []).append(r.correct)
    return [sum(c) / len(c) for c in by_q.values() if len(c) >= k]


#: figures of a summary that the macro average averages (with every ``*_rate`` key)
_AVERAGED = ("em", "f1", "tool_calls", "queries", "turns")


def macro_average(
    summaries: Sequence[Mapping[str, object]], accuracies: Sequence[Sequence[float]], k: int
) -> dict[str, object]:
    """The unweighted mean over sources of their summaries, in :func:`summarize`'s layout (so
    :func:`~framework.eval.report.flat` reads it), with ``sources`` added.

    Args:
        summaries: one :func:`summarize` per source.
        accuracies: per source its per-question accuracies (:func:`question_accuracies`), for
            the 95% interval of the macro Pass@1 (:func:`~framework.eval.metrics.macro_mean_ci`).
        k: the evaluation's samples per question.

    Returns:
        ``questions`` and ``rollouts`` summed; Pass@1 (with its interval), Pass@k, pass^k, EM, F1,
        tool use and every status rate averaged over sources; ``entity`` holds the mean entity
        match rate when every source has one, else None.
    """
    n = len(summaries)

    def mean(key: str) -> float:
        return sum(_number(s[key]) for s in summaries) / n

    pass1 = macro_mean_ci(accuracies)
    rates = [key for key in summaries[0] if key.endswith("_rate")]
    entities = [s.get("entity") for s in summaries]
    match_rates = [e.get("match_rate") for e in entities if isinstance(e, Mapping)]
    entity = {"match_rate": sum(map(_number, match_rates)) / n} if len(match_rates) == n else None
    return {
        "sources": n,
        "questions": sum(int(_number(s["questions"])) for s in summaries),
        "rollouts": sum(int(_number(s["rollouts"])) for s in summaries),
        "k": k,
        "pass@1": pass1.mean,
        "pass@1_ci": [pass1.low, pass1.high],
        f"pass@{k}": mean(f"pass@{k}"),
        f"pass^{k}": mean(f"pass^{k}"),
        **{key: mean(key) for key in (*_AVERAGED, *rates)},
        "entity": entity,
    }


def _number(value: object) -> float:
    """A summary's figure as a float (summaries hold ints and floats only where averaged)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"[by_source] got {value!r}; expected a number in a summary")
    return float(value)
