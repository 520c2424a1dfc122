"""Evaluation records: what they keep, byte-reproducible archives, and clear errors."""

from __future__ import annotations

import gzip

import pytest

from framework.eval.records import (
    RECORD_FIELDS,
    RecordsError,
    entity_kinds,
    read_records,
    write_records,
)


def test_entity_kinds_split_anchor_bridges_and_answer():
    # anchor, two bridges, answer: the anchor and one bridge matched
    assert entity_kinds([True, False, True, False]) == {
        "matched_anchor": 1,
        "matched_bridges": 1,
        "bridges": 2,
        "matched_answer": 0,
    }
    one_hop = entity_kinds([False, True])  # anchor and answer, no bridge
    assert one_hop["bridges"] == 0 and one_hop["matched_answer"] == 1
    assert entity_kinds([]) == dict.fromkeys(
        ("matched_anchor", "matched_bridges", "bridges", "matched_answer")
    )


def test_records_round_trip_without_think_text_and_reproducibly(tmp_path):
    rows = [
        {"dataset": "d", "question_id": "q1", "sample": 0, "correct": True, "think_text": "..."},
        {"dataset": "d", "question_id": "q1", "sample": 1, "correct": False, "tool_calls": 2},
    ]
    a = write_records(tmp_path / "a.jsonl.gz", rows)
    b = write_records(tmp_path / "b.jsonl.gz", rows)
    assert a.read_bytes() == b.read_bytes()  # no timestamp: a committed archive stays identical
    back = read_records(a)
    assert [list(r) for r in back] == [sorted(RECORD_FIELDS)] * 2
    assert back[1]["tool_calls"] == 2 and back[0]["tool_calls"] is None
    assert "think_text" not in back[0]


def test_bad_archives_are_clear_errors(tmp_path):
    with pytest.raises(RecordsError, match=r"expected a records\.jsonl\.gz archive"):
        read_records(tmp_path / "missing.jsonl.gz")
    (tmp_path / "plain.jsonl.gz").write_text('{"a": 1}\n')
    with pytest.raises(RecordsError, match="not a readable gzip file"):
        read_records(tmp_path / "plain.jsonl.gz")
    with gzip.open(tmp_path / "cut.jsonl.gz", "wt") as fh:
        fh.write('{"dataset": "d", "question_id": "q", "sample": 0}\n')
    with pytest.raises(RecordsError, match=r"without \['correct'\]"):
        read_records(tmp_path / "cut.jsonl.gz")
    with gzip.open(tmp_path / "bad.jsonl.gz", "wt") as fh:
        fh.write("{not json\n")
    with pytest.raises(RecordsError, match="malformed JSON on line 1"):
        read_records(tmp_path / "bad.jsonl.gz")
