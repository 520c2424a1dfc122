"""The coverage run (``seekrl-index coverage``): load the splits, open the retriever, scan its
corpus once, search every question, and write ``coverage.json`` and ``coverage.md``.

The matching and the counting are :mod:`framework.retrieval.coverage`'s.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from framework.data.datasets import data_key
from framework.data.schema import QAItem
from framework.progress import Progress
from framework.registry import DATASETS, RETRIEVERS
from framework.registry.protocols import Describes, Retriever
from framework.retrieval.corpus import CorpusStore
from framework.retrieval.coverage import (
    MATCH_RULE,
    CoverageConfig,
    answer_set,
    gold_answers,
    records_for,
    retrieval_ranks,
    scan_corpus,
    summarize,
)
from framework.retrieval.local import LocalRetrieverConfig, open_store
from framework.retrieval.types import RetrievalError


def _share(share: float | None, count: int) -> str:
    return "-" if share is None else f"{100 * share:.1f}% ({count})"


def summary_table(summary: dict[str, Any], k: int) -> list[str]:
    """A Markdown table of one split's :func:`summarize`: overall, per source, per hop count."""
    lines = [
        f"| questions of | n | corpus support | answer recall@{k} |",
        "|---|---:|---:|---:|",
    ]
    groups = [("all", summary["all"])]
    groups += [(f"data_source {s}", row) for s, row in summary["data_source"].items()]
    groups += [(f"hops {h}", row) for h, row in summary["hops"].items()]
    for label, row in groups:
        support = _share(row["support"], row["supported"])
        recall = _share(row["recall"], row["found"])
        lines.append(f"| {label} | {row['questions']} | {support} | {recall} |")
    return lines


def coverage_markdown(report: dict[str, Any]) -> str:
    """``coverage.md``: what was measured, then one table per split."""
    corpus = report["corpus"]
    lines = [
        f"# Answer coverage of dataset {report['dataset']}",
        "",
        f"Corpus: {corpus['passages']} passages ({corpus['path']}). Retriever: "
        f"{report['retriever'].get('backend', report['retriever_name'])}, top {report['k']} "
        "passages per question.",
        "",
        f"Corpus support: the share of questions for which {report['match']} in some passage of "
        f"the corpus. Answer recall@{report['k']}: the share for which that holds in one of the "
        f"top {report['k']} passages retrieved for the question text. Per-question records: "
        "coverage.json.",
        "",
    ]
    for split, part in report["splits"].items():
        lines += [f"## {split}", "", *summary_table(part["summary"], report["k"]), ""]
    return "\n".join(lines)


def load_splits(cfg: CoverageConfig) -> dict[str, list[QAItem]]:
    """The questions of each split to report (a synthesized dataset not made yet is synthesized
    first, as seekrl-train does)."""
    load = DATASETS.bind(cfg.dataset)
    return {split: load(split) for split in cfg.splits()}


def passage_store(retriever: Retriever, cfg: Any) -> tuple[CorpusStore, bool]:
    """The retriever's passage store, and whether it was opened here (then the caller closes it).

    Raises:
        RetrievalError: a retriever with no store and no local corpus config.
    """
    store = getattr(retriever, "store", None)
    if isinstance(store, CorpusStore):
        return store, False
    if isinstance(cfg, LocalRetrieverConfig):
        return open_store(cfg), True
    raise RetrievalError(
        f"[retriever] got {getattr(cfg, 'name', cfg)!r}, which has no local passage store; "
        "expected a local backend over a corpus. Fix: use retriever=faiss, bm25 or hybrid."
    )


def measure(
    cfg: CoverageConfig, splits: dict[str, list[QAItem]], retriever: Retriever, store: CorpusStore
) -> dict[str, Any]:
    """Scan the corpus once for every split's answers, search each question, count."""
    every = [item for items in splits.values() for item in items]
    answers = answer_set(a for item in every for a in gold_answers(item))
    clock = time.monotonic()
    with Progress("coverage", len(store), "passage", enabled=cfg.progress) as bar:
        supported = scan_corpus(store.iter_texts(), answers, bar)
    scan_s, clock = time.monotonic() - clock, time.monotonic()
    out: dict[str, Any] = {}
    with Progress("recall", len(every), "question", enabled=cfg.progress) as bar:
        for split, items in splits.items():
            ranks = retrieval_ranks(retriever.search, items, cfg.k, cfg.batch_size, bar)
            records = records_for(items, supported, ranks)
            out[split] = {"summary": summarize(records), "records": records}
    return {
        "splits": out,
        "seconds": {"corpus_scan": scan_s, "search": time.monotonic() - clock},
        "answers": {"distinct": len(answers.answers), "in_corpus": len(supported)},
    }


def run_coverage(cfg: CoverageConfig, label: str | None = None) -> dict[str, Any]:
    """Measure, write ``coverage.json`` and ``coverage.md`` into ``cfg.run_dir``, return the report.

    Args:
        cfg: the app's config.
        label: the dataset's name in the report (the command line's ``dataset=`` choice, e.g.
            ``synth_demo``); None = the registered dataset's name (``synth``, ``files``).

    Raises:
        DatasetError, SynthesisError: the dataset cannot be read or made.
        RetrievalError: the retriever cannot be opened or built.
    """
    splits = load_splits(cfg)
    retriever = RETRIEVERS.bind(cfg.retriever)()
    try:
        store, opened = passage_store(retriever, cfg.retriever)
        try:
            measured = measure(cfg, splits, retriever, store)
            corpus = {
                "passages": len(store),
                "fingerprint": store.fingerprint,
                "path": str(store.path),
            }
        finally:
            if opened:
                store.close()
        described = retriever.describe() if isinstance(retriever, Describes) else {}
    finally:
        retriever.close()
    report = {
        "dataset": label or cfg.dataset.name,
        "dataset_key": data_key(cfg.dataset),
        "retriever_name": cfg.retriever.name,
        "retriever": described,
        "k": cfg.k,
        "corpus": corpus,
        "match": MATCH_RULE,
        **measured,
    }
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "coverage.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (run_dir / "coverage.md").write_text(coverage_markdown(report))
    return report


__all__ = ["coverage_markdown", "run_coverage", "summary_table"]


def coverage_text(report: dict[str, Any], run_dir: str) -> str:
    """What ``seekrl-index coverage`` prints: the corpus, then one table per split."""
    passages = report["corpus"]["passages"]
    lines = [
        f"dataset {report['dataset']}, {passages} passages, retriever {report['retriever_name']}"
    ]
    for split, part in report["splits"].items():
        lines += ["", f"{split}:", *summary_table(part["summary"], report["k"])]
    lines += ["", f"written: {run_dir}/coverage.json and coverage.md"]
    return "\n".join(lines)
