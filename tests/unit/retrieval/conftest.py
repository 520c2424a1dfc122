"""Fixtures shared by the retrieval tests: a tiny JSONL corpus and an empty cache directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.retrieval.corpus_fixtures import write_jsonl


@pytest.fixture
def corpus_path(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "corpus.jsonl")


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"
