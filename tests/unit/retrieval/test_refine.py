"""Exact re-ranking of approximate candidates (framework/retrieval/refine.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from framework.retrieval.dense import FaissRetriever
from framework.retrieval.refine import rerank_exact
from framework.retrieval.types import RetrievalError
from tests.unit.retrieval.corpus_fixtures import FakeEncoder, faiss_cfg, write_jsonl

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


# --- through the retriever --------------------------------------------------------------------------

# 60 alphabetic words (the fake encoder ignores tokens with digits)
VOCAB = [a + b + "x" for a in "bcdfghjklm" for b in "aeiouy"]


def _docs(n: int) -> list[tuple[str, str, str]]:
    """``n`` passages of 12 words drawn from a 60-word vocabulary (fixed seed)."""
    rng = np.random.default_rng(0)
    return [(f"p{i}", f"T{i}", " ".join(rng.choice(VOCAB, 12))) for i in range(n)]


def _top(retriever, queries: list[str], k: int) -> list[list[str]]:
    # the fixtures' limits take 4 queries a call
    return [[h.passage_id for h in retriever.search([q], k)[0]] for q in queries]


def test_refine_brings_ivfpq_back_to_the_exact_neighbours(tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", _docs(400))
    queries = [" ".join(np.random.default_rng(s).choice(VOCAB, 4)) for s in range(40)]
    enc = FakeEncoder()
    with FaissRetriever(cfg=faiss_cfg(corpus, tmp_path / "cache"), encoder=enc) as flat:
        exact = _top(flat, queries, 5)
    # 4 sub-quantizers of 16 dims at 4 bits: coarse codes, so the approximate top 5 misses some
    pq = {"type": "ivfpq", "nlist": 4, "nprobe": 4, "pq_m": 4, "pq_bits": 4, "train_size": 400}
    recall = {}
    for refine in (1, 8):
        cfg = faiss_cfg(corpus, tmp_path / "cache", **pq, refine=refine)
        with FaissRetriever(cfg=cfg, encoder=enc) as ivfpq:
            got = _top(ivfpq, queries, 5)
        recall[refine] = np.mean([len(set(a) & set(b)) / 5 for a, b in zip(got, exact)])
    # refine 8 re-ranks 40 candidates with the exact scores of the stored embeddings
    assert recall[1] < 0.5 and recall[8] > 0.7, recall  # measured: 0.285 and 0.79


def test_refine_without_stored_embeddings_is_refused_at_load(tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl")
    enc = FakeEncoder()
    with FaissRetriever(cfg=faiss_cfg(corpus, tmp_path / "cache"), encoder=enc) as built:
        stored = built._embeddings_path()
    stored.unlink()  # as for an adopted index, which brings no embeddings
    cfg = faiss_cfg(corpus, tmp_path / "cache", refine=4)
    with pytest.raises(RetrievalError, match=r"^\[retriever.index.refine\] got 4 .* Fix: set"):
        FaissRetriever(cfg=cfg, encoder=enc)
