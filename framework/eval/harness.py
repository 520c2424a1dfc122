"""Roll a policy out k times per question and summarise: sampling metrics, tool use, entities.

Pure Python over the agent loop's trajectories; the eval app adds files, plots and logging.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from framework.data.leakage import answer_key
from framework.data.schema import QAItem
from framework.eval.judge import JudgeInputs
from framework.eval.metrics import entity_comparison, histogram, mean_ci, summarize_samples
from framework.eval.records import entity_kinds
from framework.progress import Progress
from framework.rewards.entity import EntityRewardConfig
from framework.rewards.entity_match import entities_found
from framework.rewards.text import exact_match, token_f1


def rollout_rows(
    loop: Any,
    items: Sequence[QAItem],
    k: int,
    judge: Callable[[JudgeInputs], list[bool]],
    *,
    dataset: str,
    entity_cfg: EntityRewardConfig | None = None,
    batch_questions: int = 16,
    progress: Progress | None = None,
    journal: Path | None = None,
    reseed: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per rollout (``k`` per question), with correctness, tool use and entity matches.

    Args:
        journal: a JSONL file that keeps each finished batch of questions: a rerun with the same
            questions, ``k`` and batch size takes those batches from it and rolls out only the rest,
            so an interrupted evaluation loses at most the batch in flight.
        progress: advanced after each batch of questions; batches taken from the journal move its
            position without counting in its rate.
        reseed: called with the batch's index before it is rolled out, so that a batch's sampling
            does not depend on whether the batches before it were rolled out now or taken from the
            journal (e.g. ``lambda i: setattr(backend, "calls", i * 100_000)``).
    """
    entity_cfg = entity_cfg or EntityRewardConfig(name="e_grpo")
    rows: list[dict[str, Any]] = []
    kept = read_journal(journal, k) if journal is not None else {}
    for index, start in enumerate(range(0, len(items), batch_questions)):
        chunk = list(items[start : start + batch_questions])
        ids = [it.id for it in chunk]
        if kept.get(index, {}).get("ids") == ids:
            rows += kept[index]["rows"]
            if progress is not None:  # done by an earlier process: not in the rate
                progress.skip_to(min(start + batch_questions, len(items)))
            continue
        if reseed is not None:
            reseed(index)
        first = len(rows)
        trajs = loop.run([it.question for it in chunk], k)
        verdicts = judge(
            JudgeInputs(
                questions=[chunk[t.group].question for t in trajs],
                answers=[t.answer if t.status == "ok" else None for t in trajs],
                golds=[chunk[t.group].golden_answers for t in trajs],
            )
        )
        for i, (t, ok) in enumerate(zip(trajs, verdicts, strict=True)):
            item = chunk[t.group]
            answer = t.answer if t.status == "ok" else None
            entities = list(item.entities or [])
            flags = entities_found(t.think_text, entities, entity_cfg.matching())
            rate = sum(flags) / len(entities) if entities else None
            rows.append(
                {
                    "dataset": dataset,
                    "question_id": item.id,
                    "answer_key": answer_key(item),
                    "hops": item.hops,
                    "sample": i % k,
                    "status": t.status,
                    "end_reason": t.end_reason,
                    "answer": answer,
                    "golden_answers": list(item.golden_answers),
                    "correct": bool(ok),
                    "em": bool(answer is not None and exact_match(answer, item.golden_answers)),
                    "f1": token_f1(answer, item.golden_answers) if answer is not None else 0.0,
                    "tool_calls": t.stats.get("tool_calls", 0),
                    "queries": t.stats.get("queries", 0),
                    "turns": t.stats.get("turns", 0),
                    "response_tokens": t.stats.get("response_tokens", 0),
                    "entities": len(entities) if entities else None,
                    "matched": round(rate * len(entities)) if rate is not None else None,
                    "match_rate": rate,
                    **entity_kinds(flags),
                    "think_text": t.think_text,
                }
            )
        if journal is not None:
            append_journal(journal, {"batch": index, "k": k, "ids": ids, "rows": rows[first:]})
        if progress is not None:
            progress(min(start + batch_questions, len(items)), len(items))
    _normalise_rates(rows)
    return rows


def read_journal(path: Path, k: int) -> dict[int, dict[str, Any]]:
    """The finished batches in ``path`` by index (none when it is missing). A last line cut short
    by a kill is dropped from the file, so the next batch appends after a whole line."""
    if not path.is_file():
        return {}
    out: dict[int, dict[str, Any]] = {}
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
            if record.get("k") == k:
                out[int(record["batch"])] = record
    if good < path.stat().st_size:
        with path.open("r+b") as f:
            f.truncate(good)
    return out


def append_journal(path: Path, record: dict[str, Any]) -> None:
    """Append one batch as one line, flushed to disk before the next batch starts."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _normalise_rates(rows: list[dict[str, Any]]) -> None:
    """``match_rate_norm``: each rollout's rate over the best rate among its question's samples."""
    best: dict[str, float] = {}
    for r in rows:
        if r["match_rate"] is not None:
            best[r["question_id"]] = max(best.get(r["question_id"], 0.0), r["match_rate"])
    for r in rows:
        rate, top = r["match_rate"], best.get(r["question_id"], 0.0)
        r["match_rate_norm"] = None if rate is None else (rate / top if top > 0 else 0.0)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def summarize(rows: Sequence[dict[str, Any]], k: int) -> dict[str, Any]:
    """Sampling metrics, tool use and the entity analysis of a set of rows (one dataset or a slice)."""
    by_q: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_q.setdefault(r["question_id"], []).append(r)
    groups = [g for g in by_q.values() if len(g) >= k]
    sampling = summarize_samples([[r["correct"] for r in g] for g in groups], k)
    out: dict[str, Any] = {
        "questions": sampling.questions,
        "rollouts": len(rows),
        "k": k,
        "pass@1": sampling.pass1.mean,
        "pass@1_ci": _ci(sampling.pass1),
        f"pass@{k}": sampling.pass_k,
        f"pass^{k}": sampling.pass_hat_k,
        "em": _mean([float(r["em"]) for r in rows]),
        "f1": _mean([r["f1"] for r in rows]),
        "tool_calls": _mean([r["tool_calls"] for r in rows]),
        "queries": _mean([r["queries"] for r in rows]),
        "turns": _mean([r["turns"] for r in rows]),
        "format_error_rate": _mean([float(r["status"] == "format_error") for r in rows]),
        "over_budget_rate": _mean([float(r["status"] == "over_budget") for r in rows]),
    }
    with_entities = [r for r in rows if r["match_rate"] is not None]
    if len(with_entities) == len(rows) and rows:
        cmp = entity_comparison(
            [[r["matched"] for r in g] for g in groups], [[r["correct"] for r in g] for g in groups]
        )
        right = [r["match_rate_norm"] for r in rows if r["correct"]]
        wrong = [r["match_rate_norm"] for r in rows if not r["correct"]]
        out["entity"] = {
            "match_rate": _mean([r["match_rate"] for r in rows]),
            "match_rate_ci": _ci(mean_ci([r["match_rate"] for r in rows])),
            **cmp.as_dict(),
            "norm_rate_hist_correct": histogram(right),
            "norm_rate_hist_wrong": histogram(wrong),
        }
    else:
        out["entity"] = None
    return out


def _ci(est: Any) -> list[float]:
    return [est.low, est.high]


def summarize_by_hops(rows: Sequence[dict[str, Any]], k: int) -> dict[str, dict[str, Any]]:
    """:func:`summarize` per hop count (questions of unknown hops under ``"unknown"``)."""
    out: dict[str, dict[str, Any]] = {}
    hops = sorted({r["hops"] for r in rows}, key=lambda h: (h is None, h or 0))
    for h in hops:
        out[str(h) if h is not None else "unknown"] = summarize(
            [r for r in rows if r["hops"] == h], k
        )
    return out
