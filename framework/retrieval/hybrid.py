"""Hybrid retrieval: dense and BM25 candidates fused into one ranking."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from framework.config import Problem, check_choice, check_range, option
from framework.registry.kinds import RETRIEVERS
from framework.retrieval.bm25 import BM25Params, BM25Retriever, BM25RetrieverConfig
from framework.retrieval.dense import FaissRetriever, FaissRetrieverConfig
from framework.retrieval.local import LocalRetrieverConfig, StoreBacked
from framework.retrieval.types import check_request
from framework.types import Hit

FUSIONS = ("rrf", "weighted")


@dataclass
class HybridRetrieverConfig(FaissRetrieverConfig):
    bm25: BM25Params = field(default_factory=BM25Params)
    fusion: str = option("rrf", "rrf (reciprocal rank) or weighted (min-max scores)")
    dense_weight: float = option(0.5, "weighted: share of the dense score")
    rrf_k: int = option(60, "rrf: rank offset (Cormack et al. use 60)")
    candidates: int = option(50, "hits taken from each backend to fuse")

    def problems(self) -> list[Problem]:
        out = check_choice(self.fusion, "fusion", FUSIONS)
        out += check_range(self.dense_weight, "dense_weight", low=0.0, high=1.0)
        out += check_range(self.rrf_k, "rrf_k", low=0)
        out += check_range(self.candidates, "candidates", low=1)
        return out


def fuse(
    dense: list[Hit], sparse: list[Hit], k: int, *, fusion: str, dense_weight: float, rrf_k: int
) -> list[Hit]:
    """Merge two ranked lists of one query into the top ``k`` by fused score.

    ``rrf``: ``sum 1 / (rrf_k + rank)`` over the lists a passage appears in (rank from 1).
    ``weighted``: each list's scores min-max scaled to [0, 1] (absent = 0), then
    ``dense_weight * dense + (1 - dense_weight) * bm25``.
    """
    fused: dict[str, float] = {}
    by_id: dict[str, Hit] = {}
    for hits, weight in ((dense, dense_weight), (sparse, 1.0 - dense_weight)):
        if not hits:
            continue
        lo, hi = min(h.score for h in hits), max(h.score for h in hits)
        for rank, hit in enumerate(hits, 1):
            if fusion == "rrf":
                value = 1.0 / (rrf_k + rank)
            else:
                value = weight * ((hit.score - lo) / (hi - lo) if hi > lo else 1.0)
            fused[hit.passage_id] = fused.get(hit.passage_id, 0.0) + value
            by_id.setdefault(hit.passage_id, hit)
    best = sorted(fused, key=lambda pid: (-fused[pid], pid))[:k]
    return [replace(by_id[pid], score=fused[pid]) for pid in best]


@RETRIEVERS.register("hybrid", config=HybridRetrieverConfig)
class HybridRetriever(StoreBacked):
    """Dense (FAISS) and BM25 retrieval over one corpus, fused by ``cfg.fusion``.

    Args:
        cfg: everything the faiss backend takes, plus BM25 parameters and the fusion rule.
    """

    def __init__(self, *, cfg: HybridRetrieverConfig) -> None:
        self.cfg = cfg
        self.dense = FaissRetriever(cfg=cfg)
        # the BM25 side shares every field of the local base (corpus, cache, limits, ...)
        local = {f.name: getattr(cfg, f.name) for f in fields(LocalRetrieverConfig)}
        sparse_cfg = BM25RetrieverConfig(**{**local, "name": "bm25"}, bm25=cfg.bm25)
        try:
            self.sparse = BM25Retriever(cfg=sparse_cfg)
        except BaseException:
            self.dense.close()
            raise
        self.store = self.dense.store

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Top-``k`` fused passages per query (see the Retriever protocol)."""
        queries = check_request(queries, k, self.cfg.limits)
        n = min(max(k, self.cfg.candidates), self.cfg.limits.max_k)
        dense = self.dense.search(queries, n)
        sparse = self.sparse.search(queries, n)
        c = self.cfg
        return [
            fuse(d, s, k, fusion=c.fusion, dense_weight=c.dense_weight, rrf_k=c.rrf_k)
            for d, s in zip(dense, sparse, strict=True)
        ]

    def describe(self) -> dict[str, Any]:
        return {"backend": "hybrid", "dense": self.dense.describe(), "bm25": self.sparse.describe()}

    def close(self) -> None:
        self.dense.close()
        self.sparse.close()
