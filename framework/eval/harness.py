"""Roll a policy out k times per question and summarise: sampling metrics, tool use, entities.

Pure Python over the agent loop's trajectories; the eval app adds files, plots and logging.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypedDict, TypeVar

from framework.data.leakage import answer_key
from framework.data.schema import QAItem
from framework.eval.judge import JudgeInputs
from framework.eval.metrics import (
    Estimate,
    entity_comparison,
    histogram,
    mean_ci,
    summarize_samples,
)
from framework.eval.records import EvalRecord, entity_kinds
from framework.progress import Progress
from framework.rewards.entity import EntityRewardConfig
from framework.rewards.entity_match import entities_found
from framework.rewards.text import exact_match, token_f1
from framework.types import STATUS_OK, STATUSES, Trajectory


class RolloutLoop(Protocol):
    """What the harness needs of an agent loop (:class:`~framework.rollout.engine.AgentLoop`)."""

    def run(
        self,
        questions: Sequence[str],
        group_size: int,
        *,
        max_in_flight: int | None = None,
        seeds: Sequence[int] | None = None,
        on_group_done: Callable[[int, list[Trajectory]], None] | None = None,
        prompts: Sequence[Sequence[Mapping[str, str]] | None] | None = None,
    ) -> list[Trajectory]: ...


class Schedule(TypedDict):
    """The settings a wave's rows depend on (a journal line is taken only with equal ones)."""

    k: int
    seed: int
    batch_questions: int
    wave_questions: int


class DatasetResults(TypedDict):
    """What ``results.json`` holds per dataset: its :func:`summarize` and
    :func:`summarize_by_hops`."""

    overall: dict[str, object]
    by_hops: dict[str, dict[str, object]]


Judge = Callable[[JudgeInputs], list[bool]]
T = TypeVar("T")


def rollout_seed(seed: int, question_id: str, sample: int) -> int:
    """The sampling seed of sample ``sample`` of question ``question_id`` in an evaluation seeded
    ``seed``: a 63-bit hash, so its random numbers are the same whichever batch, slot or process
    rolls it out (its tokens, only for the same batches: :func:`rollout_records`)."""
    text = f"{seed}/{question_id}/{sample}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") >> 1


def rollout_records(
    loop: RolloutLoop,
    items: Sequence[QAItem],
    k: int,
    judge: Judge,
    *,
    dataset: str,
    entity_cfg: EntityRewardConfig | None = None,
    batch_questions: int = 16,
    wave_questions: int = 0,
    progress: Progress | None = None,
    journal: Path | None = None,
    seed: int = 0,
    waves: dict[str, int] | None = None,
) -> list[EvalRecord]:
    """One record per rollout (``k`` per question), with correctness, tool use and entity matches.

    The questions are rolled out in consecutive waves of ``wave_questions`` (0: ``batch_questions``)
    in the order given. A wave starts from an empty decoder state (:func:`restart_backend`), runs
    with continuous batching (``batch_questions * k`` rollouts in flight, a finished one's place
    taken by the next waiting rollout of the wave) and ends when all its rollouts have. Sample
    ``j`` of question ``q`` draws its tokens with :func:`rollout_seed` ``(seed, q, j)``, so its
    random numbers depend on nothing else; its logits do depend, in their last bits, on the rows it
    decodes beside (matrix kernels and attention sum in an order set by the batch's rows and
    padding), so a token whose draw falls at a boundary of its distribution can change with them.
    A wave's rows are therefore a function of its questions and these settings alone, and an
    evaluation resumed from its journal, which takes whole waves from it and rolls out the rest,
    gives the rows of an uninterrupted one byte for byte (taking single questions, as this did
    before, made the rest decode beside other rollouts than they had: issue 74).
    ``batch_questions`` and ``wave_questions`` are settings of the evaluation like ``seed``: other
    values give other draws.

    Args:
        journal: a JSONL file that keeps each wave as soon as its questions are judged: a rerun
            with the same ``k``, ``seed``, ``batch_questions`` and ``wave_questions`` takes the
            waves it holds (the same questions in the same order) and rolls out only the others,
            so an interrupted evaluation loses only the wave in flight.
        progress: advanced as questions finish; questions taken from the journal move its position
            without counting in its rate.
        seed: the evaluation's sampling seed.
        waves: if given, filled with ``waves`` (how many), ``from_journal`` (how many were taken
            from the journal) and ``questions_from_journal``.

    Raises:
        ValueError: two items with the same question id (rows and journal are keyed by it).
    """
    entity_cfg = entity_cfg or EntityRewardConfig(name="e_grpo")
    ids = [it.id for it in items]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"[{dataset}] question id {dup!r} appears twice; ids must be unique")
    size = wave_questions or batch_questions
    schedule = Schedule(k=k, seed=seed, batch_questions=batch_questions, wave_questions=size)
    parts = [list(items[i : i + size]) for i in range(0, len(items), size)]
    kept = read_journal(journal, schedule) if journal is not None else {}
    by_id: dict[str, list[EvalRecord]] = {}
    taken = 0
    for part in parts:
        got = kept.get(tuple(it.id for it in part))
        if got is not None:
            records = [EvalRecord.from_row(r, f"[journal] {journal}") for r in got]
            for it in part:
                by_id[it.id] = [r for r in records if r.question_id == it.id]
            taken += 1
    if waves is not None:
        waves.update(waves=len(parts), from_journal=taken, questions_from_journal=len(by_id))
    if progress is not None and by_id:  # done by an earlier process: not in the rate
        progress.skip_to(len(by_id))

    def finished(item: QAItem, trajs: list[Trajectory]) -> None:
        by_id[item.id] = question_rows(item, trajs, judge, dataset, entity_cfg)
        if progress is not None:
            progress(len(by_id), len(items))

    for index, part in enumerate(parts):
        if part[0].id in by_id:
            continue
        _roll_wave(loop, part, k, batch_questions * k, seed, finished)
        if journal is not None:
            rows = [_journal_row(r) for it in part for r in by_id[it.id]]
            line = {"wave": index, **schedule, "questions": [it.id for it in part], "rows": rows}
            append_journal(journal, line)
    return _normalise_rates([r for i in ids for r in by_id[i]])


def _journal_row(record: EvalRecord) -> dict[str, object]:
    """A record's row in the journal: before the rates are normalised, so without that field."""
    row = record.to_row()
    del row["match_rate_norm"]
    return row


def _roll_wave(
    loop: RolloutLoop,
    part: Sequence[QAItem],
    k: int,
    in_flight: int,
    seed: int,
    finished: Callable[[QAItem, list[Trajectory]], None],
) -> None:
    """Roll out one wave from a restarted backend; ``finished`` gets each question as it ends."""
    restart_backend(loop)
    loop.run(
        [it.question for it in part],
        k,
        max_in_flight=in_flight,
        seeds=[rollout_seed(seed, it.id, j) for it in part for j in range(k)],
        on_group_done=lambda group, trajs: finished(part[group], trajs),
        prompts=[it.messages() for it in part],
    )


def restart_backend(loop: object) -> None:
    """Make ``loop``'s backend start as a new one would (its ``restart()``, where it has one: the
    transformers backend empties its KV prefix cache and its per-call seed count), so that what
    it computes next does not depend on what it computed before."""
    restart = getattr(getattr(loop, "backend", None), "restart", None)
    if callable(restart):
        restart()


def question_rows(
    item: QAItem,
    trajs: Sequence[Trajectory],
    judge: Judge,
    dataset: str,
    entity_cfg: EntityRewardConfig,
) -> list[EvalRecord]:
    """The records of one question's samples, in sample order, judged together (the one place
    an :class:`EvalRecord` is built from a rollout)."""
    verdicts = judge(
        JudgeInputs(
            questions=[item.question] * len(trajs),
            answers=[t.answer if t.status == STATUS_OK else None for t in trajs],
            golds=[item.golden_answers] * len(trajs),
        )
    )
    records = []
    entities = list(item.entities or [])
    for i, (t, ok) in enumerate(zip(trajs, verdicts, strict=True)):
        answer = t.answer if t.status == STATUS_OK else None
        flags = entities_found(t.think_text, entities, entity_cfg.matching())
        rate = sum(flags) / len(entities) if entities else None
        kinds = entity_kinds(flags)
        records.append(
            EvalRecord(
                dataset=dataset,
                question_id=item.id,
                data_source=item.data_source,
                answer_key=answer_key(item),
                hops=item.hops,
                sample=i,
                status=t.status,
                end_reason=t.end_reason,
                answer=answer,
                golden_answers=tuple(item.golden_answers),
                correct=bool(ok),
                em=bool(answer is not None and exact_match(answer, item.golden_answers)),
                f1=token_f1(answer, item.golden_answers) if answer is not None else 0.0,
                tool_calls=t.stats.get("tool_calls", 0),
                queries=t.stats.get("queries", 0),
                turns=t.stats.get("turns", 0),
                response_tokens=t.stats.get("response_tokens", 0),
                entities=len(entities) if entities else None,
                matched=round(rate * len(entities)) if rate is not None else None,
                match_rate=rate,
                matched_anchor=kinds["matched_anchor"],
                matched_bridges=kinds["matched_bridges"],
                bridges=kinds["bridges"],
                matched_answer=kinds["matched_answer"],
                think_text=t.think_text,
                response_digest=response_digest(t),
            )
        )
    return records


def response_digest(traj: Trajectory) -> str:
    """A 16-hex-digit digest of every token after the prompt (generated and tool responses): two
    sample rows with the same digest are the same rollout, token for token."""
    text = ",".join(map(str, traj.token_ids[traj.prompt_len :])).encode()
    return hashlib.blake2b(text, digest_size=8).hexdigest()


def read_journal(path: Path, schedule: Schedule) -> dict[tuple[str, ...], list[dict[str, object]]]:
    """The finished waves in ``path`` (none when it is missing), by their question ids in order,
    each with its rows. A last line cut short by a kill is dropped from the file, so the next wave
    appends after a whole line. Lines of another ``schedule`` (``k``, ``seed``,
    ``batch_questions``, ``wave_questions``), and the per-question or batch-wise lines earlier
    versions wrote, are ignored: their rows came from other batches."""
    if not path.is_file():
        return {}
    out: dict[tuple[str, ...], list[dict[str, object]]] = {}
    good = 0
    with path.open("rb") as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                break
            if not line.endswith(b"\n"):
                break
            good += len(line)
            if (
                isinstance(record, dict)
                and "wave" in record
                and all(record.get(key) == value for key, value in schedule.items())
            ):
                out[tuple(str(q) for q in record["questions"])] = record["rows"]
    if good < path.stat().st_size:
        with path.open("r+b") as f:
            f.truncate(good)
    return out


def append_journal(path: Path, record: Mapping[str, object]) -> None:
    """Append one wave as one line, flushed to disk before the loop goes on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _normalise_rates(records: Sequence[EvalRecord]) -> list[EvalRecord]:
    """``match_rate_norm``: each rollout's rate over the best rate among its question's samples."""
    best: dict[str, float] = {}
    for r in records:
        if r.match_rate is not None:
            best[r.question_id] = max(best.get(r.question_id, 0.0), r.match_rate)
    out = []
    for r in records:
        rate, top = r.match_rate, best.get(r.question_id, 0.0)
        norm = None if rate is None else (rate / top if top > 0 else 0.0)
        out.append(dataclasses.replace(r, match_rate_norm=norm))
    return out


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _present(values: Sequence[T | None], what: str) -> list[T]:
    """``values`` when none is None (a record the harness built has every field it summarises)."""
    known = [v for v in values if v is not None]
    if len(known) < len(values):
        raise ValueError(
            f"[summarize] got records without {what}; expected the records the harness rolled "
            "out. Fix: summarize rollout_records' records (an archive keeps fewer fields)."
        )
    return known


def summarize(records: Sequence[EvalRecord], k: int) -> dict[str, object]:
    """Sampling metrics, tool use and the entity analysis of a set of records (one dataset or a
    slice): the JSON object ``results.json`` holds per dataset (``pass@{k}`` keys name ``k``;
    :func:`~framework.eval.report.flat` reads it as a typed table row)."""
    by_q: dict[str, list[EvalRecord]] = {}
    for r in records:
        by_q.setdefault(r.question_id, []).append(r)
    groups = [g for g in by_q.values() if len(g) >= k]
    sampling = summarize_samples([[r.correct for r in g] for g in groups], k)
    out: dict[str, object] = {
        "questions": sampling.questions,
        "rollouts": len(records),
        "k": k,
        "pass@1": sampling.pass1.mean,
        "pass@1_ci": _ci(sampling.pass1),
        f"pass@{k}": sampling.pass_k,
        f"pass^{k}": sampling.pass_hat_k,
        "em": _mean(_present([r.em for r in records], "em")),
        "f1": _mean(_present([r.f1 for r in records], "f1")),
        "tool_calls": _mean(_present([r.tool_calls for r in records], "tool_calls")),
        "queries": _mean(_present([r.queries for r in records], "queries")),
        "turns": _mean(_present([r.turns for r in records], "turns")),
        **{
            f"{s}_rate": _mean([float(r.status == s) for r in records])
            for s in STATUSES
            if s != STATUS_OK
        },
    }
    rates = [r.match_rate for r in records if r.match_rate is not None]
    if len(rates) == len(records) and records:
        cmp = entity_comparison(
            [_present([r.matched for r in g], "matched") for g in groups],
            [[r.correct for r in g] for g in groups],
        )
        right = _present([r.match_rate_norm for r in records if r.correct], "match_rate_norm")
        wrong = _present([r.match_rate_norm for r in records if not r.correct], "match_rate_norm")
        out["entity"] = {
            "match_rate": _mean(rates),
            "match_rate_ci": _ci(mean_ci(rates)),
            **cmp.as_dict(),
            "norm_rate_hist_correct": histogram(right),
            "norm_rate_hist_wrong": histogram(wrong),
        }
    else:
        out["entity"] = None
    return out


def _ci(est: Estimate) -> list[float]:
    return [est.low, est.high]


def summarize_by_hops(records: Sequence[EvalRecord], k: int) -> dict[str, dict[str, object]]:
    """:func:`summarize` per hop count (questions of unknown hops under ``"unknown"``)."""
    out: dict[str, dict[str, object]] = {}
    hops = sorted({r.hops for r in records}, key=lambda h: (h is None, h or 0))
    for h in hops:
        out[str(h) if h is not None else "unknown"] = summarize(
            [r for r in records if r.hops == h], k
        )
    return out
