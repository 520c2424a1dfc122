"""Exact re-ranking of an approximate index's candidates from the stored passage embeddings.

A compressed index (IVF-PQ) ranks by approximate distances: at 8 dimensions per sub-quantizer its
top 10 shares about 0.57 of the exact top 10 on MiniLM-like vectors (docs/benchmarks/
retrieval_scale.md). Asking it for ``k * refine`` candidates and re-scoring them with the exact
inner product against the embeddings the index was built from (a float16 memory map on disk, read
only at the candidates' rows) recovers most of the rest at the cost of ``k * refine`` row reads per
query, without holding the vectors in memory (FAISS's ``IndexRefineFlat`` keeps them in RAM:
64.6 GB at wiki-18's size in float32).
"""

from __future__ import annotations

import numpy as np


def rerank_exact(
    queries: np.ndarray, ids: np.ndarray, embeddings: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The top ``k`` of each query's candidates by exact inner product.

    Args:
        queries: ``[q, d]`` float32 query embeddings.
        ids: ``[q, c]`` candidate rows per query (``c >= k``), ``-1`` for padding (FAISS's "none").
        embeddings: ``[n, d]`` passage embeddings (any float dtype; a memory map is read only at
            the candidates' rows, in sorted order).
        k: results kept per query.

    Returns:
        ``(scores [q, k] float32, ids [q, k] int64)``, best first; a query with fewer than ``k``
        valid candidates is padded with score ``-inf`` and id ``-1``, as FAISS pads.
    """
    q, c = ids.shape
    valid = ids >= 0
    rows = np.unique(ids[valid])
    vectors = np.asarray(embeddings[rows], dtype=np.float32)  # [u, d], sorted reads
    position = np.searchsorted(rows, np.where(valid, ids, rows[0] if len(rows) else 0))
    scores = np.full((q, c), -np.inf, dtype=np.float32)
    if len(rows):
        exact = np.einsum("qd,qcd->qc", queries.astype(np.float32), vectors[position])
        scores = np.where(valid, exact, -np.inf).astype(np.float32)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    top_scores = np.take_along_axis(scores, order, axis=1)
    top_ids = np.where(np.isfinite(top_scores), np.take_along_axis(ids, order, axis=1), -1)
    if top_ids.shape[1] < k:  # fewer candidates than k: pad as FAISS does
        pad = k - top_ids.shape[1]
        top_scores = np.pad(top_scores, ((0, 0), (0, pad)), constant_values=-np.inf)
        top_ids = np.pad(top_ids, ((0, 0), (0, pad)), constant_values=-1)
    return top_scores, top_ids.astype(np.int64)
