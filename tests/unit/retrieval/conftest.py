"""Fixtures shared by the retrieval tests: a tiny JSONL corpus and an empty cache directory."""

from __future__ import annotations

from pathlib import Path

import faiss
import pytest

from tests.unit.retrieval.corpus_fixtures import write_jsonl


@pytest.fixture
def corpus_path(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "corpus.jsonl")


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def one_faiss_thread():
    """faiss's OpenMP threads spin while they wait: on a busy 2-core machine two threads made the
    builds of the tests that use this several times slower than one."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)
