"""``seekrl-index``: build (or reuse) the configured retriever's passage store and index.

seekrl-index                                   # FAISS flat over the shipped Wikipedia summaries
seekrl-index retriever=bm25                    # BM25 instead
seekrl-index retriever=hybrid                  # both
seekrl-index retriever.index.type=hnsw retriever.corpus.source=jsonl retriever.corpus.path=c.jsonl
seekrl-index adopt=e5_Flat.index retriever.corpus.source=jsonl retriever.corpus.path=wiki-18.jsonl \
    retriever.encoder.path=/models/e5-base-v2 retriever.encoder.family=e5   # a prebuilt index
seekrl-index coverage dataset=synth_demo       # how many questions the corpus and the retriever answer
seekrl-index coverage dataset=files dataset.test=nq_test.jsonl retriever=bm25 k=5
"""

from __future__ import annotations

import json
import sys
from typing import Any

from hydra.core.hydra_config import HydraConfig

from framework.cli.app import run_app
from framework.data.leakage import LeakError
from framework.data.schema import DatasetError
from framework.data.synthesis import SynthesisError
from framework.interrupt import stop_on_interrupt
from framework.lightning.trainer import INTERRUPTED
from framework.registry import RETRIEVERS
from framework.registry.protocols import Describes
from framework.retrieval.adopt import adopt_and_load
from framework.retrieval.config import IndexConfig
from framework.retrieval.coverage import CoverageConfig
from framework.retrieval.coverage_report import coverage_text, run_coverage
from framework.retrieval.types import RetrievalError, remote_problem

INTERRUPTED_MESSAGE = (
    "[index] interrupted; the passage embeddings computed so far are kept, and the same "
    "command goes on from them."
)


def index(cfg: IndexConfig) -> dict[str, Any]:
    """Open the retriever (building whatever is missing), report where it lives, try one query."""
    remote = remote_problem(
        cfg.retriever,
        "seekrl-index builds an index on this machine",
        "build the index where the server runs (seekrl-index there, then seekrl-serve)",
    )
    if remote is not None:
        print(remote, file=sys.stderr)
        raise SystemExit(2)
    try:
        with stop_on_interrupt(INTERRUPTED_MESSAGE, INTERRUPTED):
            retriever = (
                adopt_and_load(cfg.retriever, cfg.adopt, cfg.adopt_sample, cfg.adopt_min_cosine)
                if cfg.adopt
                else RETRIEVERS.bind(cfg.retriever)()
            )
    except RetrievalError as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(1) from None
    summary = retriever.describe() if isinstance(retriever, Describes) else {}
    print(json.dumps(summary, indent=2, default=str))
    if cfg.smoke_query:
        hits = retriever.search([cfg.smoke_query], 3)[0]
        print(f"query {cfg.smoke_query!r}:")
        for hit in hits:
            print(f"  {hit.score:8.4f}  {hit.title}  ({hit.passage_id})")
    retriever.close()
    return summary


COVERAGE_INTERRUPTED = (
    "[coverage] interrupted; no coverage.json was written (an index or dataset it built is kept, "
    "and the same command goes on from them)."
)


def dataset_choice() -> str | None:
    """The ``dataset=`` option this run composed (``synth_demo``), None outside a Hydra run."""
    if not HydraConfig.initialized():
        return None
    choice = HydraConfig.get().runtime.choices.get("dataset")
    return None if choice is None else str(choice)


def coverage(cfg: CoverageConfig) -> dict[str, Any]:
    """``seekrl-index coverage``: corpus support and answer recall@k of a dataset's questions,
    printed per split and written to the run directory."""
    try:
        with stop_on_interrupt(COVERAGE_INTERRUPTED, INTERRUPTED):
            report = run_coverage(cfg, dataset_choice())
    except (RetrievalError, DatasetError, SynthesisError, LeakError) as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(1) from None
    print(coverage_text(report, cfg.run_dir))
    return report


def main() -> None:
    """``seekrl-index [overrides]`` builds the index; ``seekrl-index coverage [overrides]`` runs
    the coverage app (its own config, ``conf/coverage.yaml``)."""
    if sys.argv[1:2] == ["coverage"]:
        run_app("coverage", coverage, sys.argv[2:])
        return
    run_app("index", index)


if __name__ == "__main__":
    main()
