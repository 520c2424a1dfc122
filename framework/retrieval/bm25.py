"""Sparse retrieval with BM25 (``bm25s``), cached on disk beside the dense indexes.

``bm25s`` is always imported through :func:`framework.accelerators.import_cpu_only`: it pulls in JAX
where JAX is installed, and JAX would otherwise reserve most of a GPU at import.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from framework.accelerators import import_cpu_only
from framework.config import Problem, check_choice, check_range, option
from framework.paths import cache_root
from framework.progress import Progress
from framework.registry.kinds import RETRIEVERS
from framework.retrieval.corpus import CorpusStore
from framework.retrieval.local import IndexBacked, LocalRetrieverConfig, Stopwatch, open_store
from framework.retrieval.types import RetrievalError, check_request
from framework.types import Hit

METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")


@dataclass
class BM25Params:
    """BM25 scoring and tokenisation."""

    k1: float = option(1.5, "term-frequency saturation")
    b: float = option(0.75, "length normalisation")
    method: str = option("lucene", f"one of {METHODS}")
    stopwords: str = option("en", "stopword list ('en' or 'none')")

    def problems(self) -> list[Problem]:
        out = check_range(self.k1, "k1", low=0.0)
        out += check_range(self.b, "b", low=0.0, high=1.0)
        out += check_choice(self.method, "method", METHODS)
        out += check_choice(self.stopwords, "stopwords", ("en", "none"))
        return out


@dataclass
class BM25RetrieverConfig(LocalRetrieverConfig):
    bm25: BM25Params = field(default_factory=BM25Params)


def _tokenize(texts: Sequence[str], params: BM25Params) -> Any:
    bm25s = import_cpu_only("bm25s")

    stop = None if params.stopwords == "none" else params.stopwords
    return bm25s.tokenize(list(texts), stopwords=stop, show_progress=False)


def tokenize_store(store: CorpusStore, params: BM25Params, *, progress: bool = False) -> Any:
    """Every passage of ``store`` tokenised exactly as one ``bm25s.tokenize`` call would (same ids,
    same vocabulary), in store batches so that progress shows in a log too.

    ``bm25s.tokenize`` numbers tokens by first appearance, so a batch's new tokens, taken in its own
    id order, continue the numbering of the batches before it.
    """
    Tokenized = import_cpu_only("bm25s.tokenization").Tokenized

    vocab: dict[str, int] = {}
    ids: list[list[int]] = []
    with Progress("bm25", len(store), "passage", enabled=progress) as bar:
        for texts in store.iter_texts():
            part = _tokenize(texts, params)
            remap = [0] * len(part.vocab)
            for token, local in sorted(part.vocab.items(), key=lambda kv: kv[1]):
                remap[local] = vocab.setdefault(token, len(vocab))
            ids += [[remap[i] for i in doc] for doc in part.ids]
            bar.update(len(texts))
    return Tokenized(ids=ids, vocab=vocab)


def bm25_index_dir(cfg: Any, corpus: str) -> Path:
    """Where the BM25 index of ``cfg`` over the corpus with fingerprint ``corpus`` is cached
    (``cfg``: a :class:`BM25RetrieverConfig`, or any retriever config with its ``bm25`` and
    ``cache_dir`` fields, as the hybrid's)."""
    key = hashlib.blake2b(json.dumps(asdict(cfg.bm25), sort_keys=True).encode(), digest_size=6)
    return cache_root(cfg.cache_dir) / "bm25" / f"{corpus}-{key.hexdigest()}"


@RETRIEVERS.register("bm25", config=BM25RetrieverConfig)
class BM25Retriever(IndexBacked):
    """BM25 over the passage store (title and text); built on first use, then memory-mapped.

    Passages that share no term with a query score 0 and are not returned, so a query may get fewer
    than ``k`` hits.

    Args:
        cfg: corpus, BM25 parameters and limits.
    """

    def __init__(self, *, cfg: BM25RetrieverConfig) -> None:
        self.cfg = cfg
        self.store = open_store(cfg)
        self.manifest = {
            "corpus": {"fingerprint": self.store.fingerprint, "passages": len(self.store)},
            "bm25": asdict(cfg.bm25),
        }
        self.directory = bm25_index_dir(cfg, self.store.fingerprint)
        self.build_seconds: float | None = None
        try:
            self.model = self._load_or_build()
        except BaseException:
            self.store.close()
            raise

    def _load_or_build(self) -> Any:
        bm25s = import_cpu_only("bm25s")

        missing = (
            f"[retriever.bm25] no BM25 index in {self.directory}. Fix: run seekrl-index "
            "retriever=bm25."
        )
        if not self.index_found(
            ("corpus", "bm25"), may_build=self.cfg.build_if_missing, missing=missing
        ):
            return self.build()
        try:
            return bm25s.BM25.load(str(self.directory), mmap=True, show_progress=False)
        except Exception as exc:  # bm25s raises assorted errors on damaged files
            raise RetrievalError(
                f"[retriever.bm25] the BM25 index in {self.directory} is unreadable "
                f"({type(exc).__name__}: {exc}). Fix: delete it and rebuild."
            ) from exc

    def build(self) -> Any:
        """Tokenise every passage, index, and save with a manifest."""
        bm25s = import_cpu_only("bm25s")

        clock = Stopwatch()
        p = self.cfg.bm25
        model = bm25s.BM25(k1=p.k1, b=p.b, method=p.method)
        tokens = tokenize_store(self.store, p, progress=self.cfg.progress)
        model.index(tokens, show_progress=self.cfg.progress and sys.stdout.isatty())
        tmp = self.directory.with_name(self.directory.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        model.save(str(tmp))
        shutil.rmtree(self.directory, ignore_errors=True)
        tmp.rename(self.directory)
        self.finish_build(clock)
        return model

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Top-``k`` passages per query by BM25 score (see the Retriever protocol)."""
        queries = check_request(queries, k, self.cfg.limits)
        docs, scores = self.model.retrieve(
            _tokenize(queries, self.cfg.bm25), k=min(k, len(self.store)), show_progress=False
        )
        return self.store.ranked_hits(docs.tolist(), scores.tolist(), keep=lambda _, s: s > 0)

    def describe(self) -> dict[str, Any]:
        """Where the index is and what it holds (for the index command)."""
        return {
            "backend": "bm25",
            "directory": str(self.directory),
            "passages": len(self.store),
            "bm25": asdict(self.cfg.bm25),
            "built_now": self.build_seconds is not None,
            "build_seconds": self.build_seconds,
            "corpus": str(self.store.path),
        }
