"""The ``prompt`` column is kept on :class:`QAItem` (for ``agent.prompt=dataset``) when it is more
than the question as one user message, and written back as it was read."""

from __future__ import annotations

import pytest

from framework.data.schema import (
    DatasetError,
    QAItem,
    dataset_columns,
    read_dataset,
    write_jsonl,
    write_parquet,
)

INSTRUCTION = (
    "Answer the given question. ... <answer> Beijing </answer>. Question: who wrote hamlet?\n"
)
ROW = {
    "data_source": "nq",
    "prompt": [{"role": "user", "content": INSTRUCTION}],
    "reward_model": {"style": "rule", "ground_truth": {"target": ["Shakespeare"]}},
}


def test_an_instruction_prompt_is_kept_and_its_question_cut():
    item = QAItem.from_row(ROW, source="train.parquet", index=0, cut_rows=[])
    assert item.question == "who wrote hamlet?"
    assert item.prompt == (("user", INSTRUCTION),)
    assert item.messages() == ROW["prompt"]
    assert "prompt" not in dataset_columns([item])  # not a reward column


def test_a_plain_question_prompt_is_not_kept():
    row = {**ROW, "question": "who wrote hamlet?"}
    row["prompt"] = [{"role": "user", "content": "who wrote hamlet?"}]
    item = QAItem.from_row(row, source="train.jsonl", index=0)
    assert item.prompt is None
    assert item.messages() == [{"role": "user", "content": "who wrote hamlet?"}]


@pytest.mark.parametrize("write", [write_jsonl, write_parquet])
def test_the_prompt_reads_back_as_written(tmp_path, write):
    item = QAItem.from_row(ROW, source="train.parquet", index=0, cut_rows=[])
    plain = QAItem("q1", "who?", ("x",), None, None, None, "nq")
    suffix = ".jsonl" if write is write_jsonl else ".parquet"
    path = write([item, plain], tmp_path / f"train{suffix}", "train")
    back = read_dataset(path)
    assert [b.prompt for b in back] == [item.prompt, None]
    assert back[0].messages() == ROW["prompt"] and back[0].question == "who wrote hamlet?"


def test_a_malformed_prompt_field_is_refused():
    with pytest.raises(DatasetError, match=r"prompt"):
        QAItem("q1", "who?", ("x",), None, None, None, "nq", prompt=(("user",),))
