"""The warm-start SFT cache key: what changes the trained policy changes it, nothing else does."""

from __future__ import annotations

import json
from pathlib import Path

from framework.cli.app import load_config
from framework.sft.warm_start import warm_start_sft


def _key(tmp_path: Path, *overrides: str) -> str:
    data = tmp_path / "q.jsonl"
    if not data.is_file():
        row = {"question": "Which river?", "golden_answers": ["Nile"]}
        data.write_text(json.dumps(row) + "\n")
    cfg = load_config("train", ["dataset=files", f"dataset.train={data}", *overrides])
    return warm_start_sft(cfg)[1].name


def test_how_the_embeddings_are_computed_leaves_the_key_alone(tmp_path: Path) -> None:
    base = _key(tmp_path)
    assert _key(tmp_path, "retriever.encoder.shard_rows=1024") == base
    assert _key(tmp_path, "retriever.encoder.devices=[cpu,cpu]") == base
    # a family resolves to prefixes: the same prefixes set by hand give the same key
    e5 = _key(tmp_path, "retriever.encoder.family=e5")
    by_hand = _key(
        tmp_path,
        "retriever.encoder.query_prefix='query: '",
        "retriever.encoder.passage_prefix='passage: '",
    )
    assert e5 == by_hand != base


def test_what_the_embeddings_are_changes_the_key(tmp_path: Path) -> None:
    assert _key(tmp_path, "retriever.encoder.store_dtype=float32") != _key(tmp_path)
