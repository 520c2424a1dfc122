"""Evaluation records: what they keep, byte-reproducible archives, and clear errors."""

from __future__ import annotations

import gzip

import pytest

from framework.eval.records import (
    RECORD_FIELDS,
    ROW_FIELDS,
    EvalRecord,
    RecordsError,
    entity_kinds,
    load_records,
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


def test_load_records_reads_typed_records_and_names_the_bad_line(tmp_path):
    record = EvalRecord(
        dataset="d", question_id="q1", sample=0, correct=True, hops=2, think_text="x"
    )
    path = write_records(tmp_path / "a.jsonl.gz", [record])
    # the archive keeps RECORD_FIELDS only; the rest read back as None
    assert load_records(path) == [
        EvalRecord(dataset="d", question_id="q1", sample=0, correct=True, hops=2)
    ]
    assert read_records(path) == [record.archived()]
    with gzip.open(tmp_path / "typed.jsonl.gz", "wt") as fh:
        fh.write('{"dataset": "d", "question_id": "q", "sample": 0, "correct": true}\n')
        fh.write('{"dataset": "d", "question_id": "q", "sample": 1, "correct": "yes"}\n')
    with pytest.raises(
        RecordsError,
        match=r"\[records\] .*typed\.jsonl\.gz:2 got correct='yes'; expected bool.*Fix:",
    ):
        load_records(tmp_path / "typed.jsonl.gz")


def test_a_record_and_its_row_convert_both_ways():
    row = {
        "dataset": "d",
        "question_id": "q",
        "sample": 1,
        "correct": False,
        "golden_answers": ["a"],
    }
    record = EvalRecord.from_row(row)
    assert record.golden_answers == ("a",) and record.tool_calls is None
    assert EvalRecord.from_row(record.to_row()) == record
    assert list(record.to_row()) == list(ROW_FIELDS) and record.to_row()["golden_answers"] == ["a"]
