"""Exact re-ranking of approximate candidates (framework/retrieval/refine.py)."""

from __future__ import annotations

import numpy as np

from framework.retrieval.refine import rerank_exact

# four unit vectors in 2-d; the query (1, 0) scores each by its first coordinate
EMB = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0], [0.8, 0.6]], dtype=np.float16)
QUERY = np.array([[1.0, 0.0]], dtype=np.float32)


def test_candidates_are_reordered_by_the_exact_inner_product() -> None:
    # an approximate index returned rows 2, 1, 3, 0 (its order); exact scores 0.0, 0.6, 0.8, 1.0
    scores, ids = rerank_exact(QUERY, np.array([[2, 1, 3, 0]]), EMB, k=2)
    assert ids.tolist() == [[0, 3]]
    np.testing.assert_allclose(scores, [[1.0, 0.8]], atol=1e-3)  # float16 rows: 0.8 is 0.7998


def test_padding_ids_never_come_back_and_short_lists_are_padded_like_faiss() -> None:
    scores, ids = rerank_exact(QUERY, np.array([[1, -1, -1]]), EMB, k=2)
    assert ids.tolist() == [[1, -1]]
    assert scores[0, 0] == np.float32(np.float16(0.6)) and scores[0, 1] == -np.inf
    # fewer candidate columns than k
    scores, ids = rerank_exact(QUERY, np.array([[3]]), EMB, k=2)
    assert ids.tolist() == [[3, -1]] and scores[0, 1] == -np.inf


def test_each_query_is_scored_against_its_own_candidates() -> None:
    queries = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    # the second query (0, 1) prefers row 2 (1.0), then row 1 (0.8), then row 3 (0.6)
    _, ids = rerank_exact(queries, np.array([[2, 0, 1], [3, 2, 1]]), EMB, k=2)
    assert ids.tolist() == [[0, 1], [2, 1]]


def test_no_valid_candidate_at_all() -> None:
    scores, ids = rerank_exact(QUERY, np.array([[-1, -1]]), EMB, k=2)
    assert ids.tolist() == [[-1, -1]] and np.isinf(scores).all()
