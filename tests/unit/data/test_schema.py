"""The QA dataset schema: Search-R1 rows, JSONL / parquet round trips, errors naming file and row."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from framework.data import schema
from framework.data.schema import (
    COLUMNS,
    DatasetError,
    QAItem,
    read_dataset,
    require_entities,
    write_jsonl,
    write_parquet,
    write_split,
)
from tests.unit.rollout.test_protocols import SR1_PREFIX

SEARCH_R1_PREFIX = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first "
    "every time you get new information. ... Question: "
)


def item(i: int = 0, **kw) -> QAItem:
    fields = {
        "id": f"synth-{i}",
        "question": f"Which river flows through the city where question {i} was asked?",
        "golden_answers": ("Rhine", "the Rhine"),
        "entities": (("Basel", "Bâle"), ("Rhine",)),
        "hops": 2,
        "chain": ("Basel", "Rhine"),
        "data_source": "synth",
        "extra": {"answerable": True, "template": "bridge"},
    }
    fields.update(kw)
    return QAItem(**fields)


ITEMS = [
    item(0),
    item(1, question="Qui a écrit « L'Étranger » ? 東京", golden_answers=("Albert Camus",)),
    item(2, entities=None, hops=None, chain=None, extra={}, data_source="nq"),
    item(3, entities=(), extra={"answerable": False}),
]


def nq_search_row(idx: int, question: str, answers: list[str]) -> dict:
    """A row as Search-R1's scripts/data_process/nq_search.py writes it."""
    return {
        "id": f"train_{idx}",
        "question": question,
        "golden_answers": answers,
        "data_source": "nq",
        "prompt": [{"role": "user", "content": SEARCH_R1_PREFIX + question + "\n"}],
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": {"target": answers}},
        "extra_info": {"split": "train", "index": idx},
    }


# --- round trips -----------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_round_trip(tmp_path: Path, suffix: str) -> None:
    jsonl, parquet = write_split(ITEMS, tmp_path, "train")
    assert (jsonl.name, parquet.name) == ("train.jsonl", "train.parquet")
    back = read_dataset(tmp_path / f"train.{suffix}")
    assert back == ITEMS
    assert back[2].entities is None and back[3].entities == ()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.jsonl", "train.parquet"]


def test_item_normalizes_lists_and_is_hashable() -> None:
    a = QAItem("x", "q?", ["a"], [["e", "alias", " "]], 1, ["d"], "nq", {"k": None, "t": "v"})
    assert a.golden_answers == ("a",)
    assert a.entities == (("e", "alias"),)  # blank alias dropped
    assert a.chain == ("d",) and a.extra == {"t": "v"}
    assert QAItem("x", "q?", "a", None, None, None, "nq").golden_answers == ("a",)
    assert hash(a) == hash(QAItem("x", "q?", ("a",), (("e", "alias"),), 1, ("d",), "nq"))


def test_to_row_is_search_r1_layout() -> None:
    row = ITEMS[0].to_row("val", 7)
    assert tuple(row) == COLUMNS
    assert row["prompt"] == [{"role": "user", "content": ITEMS[0].question}]
    assert row["ability"] == "fact-reasoning"
    assert row["reward_model"] == {
        "style": "rule",
        "ground_truth": {"target": ["Rhine", "the Rhine"]},
    }
    assert row["extra_info"] == {
        "split": "val",
        "index": 7,
        "question": ITEMS[0].question,
        "hops": 2,
        "chain": ["Basel", "Rhine"],
        "entities": [["Basel", "Bâle"], ["Rhine"]],
        "answerable": True,
        "template": "bridge",
    }
    json.dumps(row)  # plain types only


def test_jsonl_is_utf8_one_row_per_line(tmp_path: Path) -> None:
    path = write_jsonl(ITEMS, tmp_path / "sub" / "test.jsonl", "test")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(ITEMS)
    assert "東京" in lines[1]  # not \u-escaped
    assert [json.loads(line)["extra_info"]["index"] for line in lines] == [0, 1, 2, 3]


def test_parquet_readable_by_plain_pyarrow(tmp_path: Path) -> None:
    path = write_parquet(ITEMS, tmp_path / "train.parquet", "train")
    table = pq.read_table(path)
    assert tuple(table.column_names) == COLUMNS
    info_type = table.schema.field("extra_info").type
    names = [info_type.field(i).name for i in range(info_type.num_fields)]
    assert names == [
        "split",
        "index",
        "question",
        "hops",
        "chain",
        "entities",
        "answerable",
        "template",
    ]
    assert info_type.field("entities").type == pa.list_(pa.list_(pa.string()))
    rows = table.to_pylist()
    assert rows[0]["extra_info"]["entities"] == [["Basel", "Bâle"], ["Rhine"]]
    assert rows[2]["extra_info"]["entities"] is None and rows[2]["extra_info"]["hops"] is None
    assert rows[1]["prompt"] == [{"role": "user", "content": ITEMS[1].question}]
    assert rows[1]["reward_model"]["ground_truth"]["target"] == ["Albert Camus"]


def test_failed_write_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_parquet(ITEMS[:1], tmp_path / "train.parquet", "train")
    before = path.read_bytes()

    def boom(table, where):
        Path(where).write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(schema.pq, "write_table", boom)
    with pytest.raises(OSError, match="disk full"):
        write_parquet(ITEMS, path, "train")
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["train.parquet"]


def test_write_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"empty\.jsonl: got 0 questions to write"):
        write_jsonl([], tmp_path / "empty.jsonl", "train")
    mixed = [item(0, extra={"answerable": True}), item(1, extra={"answerable": "yes"})]
    with pytest.raises(
        DatasetError, match=r"extra_info\.answerable values of types \['bool', 'str'\]"
    ):
        write_parquet(mixed, tmp_path / "mixed.parquet", "train")
    assert write_jsonl(mixed, tmp_path / "mixed.jsonl", "train").is_file()  # JSONL holds either
    with pytest.raises(DatasetError, match="not plain JSON"):
        write_jsonl([item(0, extra={"obj": object()})], tmp_path / "obj.jsonl", "train")
    with pytest.raises(DatasetError, match="keys \\['split'\\]"):
        item(0, extra={"split": "x"})


# --- Search-R1 rows ----------------------------------------------------------------------------------


def test_reads_nq_search_output(tmp_path: Path) -> None:
    rows = [
        nq_search_row(0, "who wrote hamlet?", ["William Shakespeare", "Shakespeare"]),
        nq_search_row(1, "when did apollo 11 land?", ["1969", "July 20, 1969"]),
    ]
    path = tmp_path / "nq_train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)  # types inferred, as HF datasets would
    items = read_dataset(path)
    assert items[0] == QAItem(
        id="train_0",
        question="who wrote hamlet?",
        golden_answers=("William Shakespeare", "Shakespeare"),
        entities=None,
        hops=None,
        chain=None,
        data_source="nq",
        prompt=tuple((m["role"], m["content"]) for m in rows[0]["prompt"]),  # kept as given
    )
    assert items[1].golden_answers == ("1969", "July 20, 1969")
    with pytest.raises(DatasetError, match=r"nq_train\.parquet row 0 \(id 'train_0'\).*2 of 2"):
        require_entities(items, path)


def test_reads_prompt_and_reward_model_only(tmp_path: Path) -> None:
    rows = [
        {
            "data_source": "hotpotqa",
            "prompt": [
                {"role": "system", "content": "You are helpful."},
                {"role": "user", "content": "Who directed Alien?"},
            ],
            "ability": "fact-reasoning",
            "reward_model": {"style": "rule", "ground_truth": {"target": ["Ridley Scott"]}},
            "extra_info": {"split": "test", "index": 0},
        },
        {
            "data_source": "hotpotqa",
            "prompt": [{"role": "user", "content": SEARCH_R1_PREFIX + "Is Paris in France?"}],
            "reward_model": {"style": "rule", "ground_truth": {"target": "yes"}},
            "extra_info": {
                "split": "test",
                "index": 1,
                "question": "Is Paris in France?",
                "level": "easy",
            },
        },
    ]
    path = tmp_path / "hotpot.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    a, b = read_dataset(path)
    assert (a.id, a.question, a.golden_answers) == (
        "hotpotqa-0",
        "Who directed Alien?",
        ("Ridley Scott",),
    )
    assert (b.id, b.question, b.golden_answers) == ("hotpotqa-1", "Is Paris in France?", ("yes",))
    assert b.extra == {"level": "easy"}


def test_reads_numpy_values_and_top_level_entities() -> None:
    obj = np.empty(2, dtype=object)
    obj[0], obj[1] = np.array(["Paris", "Paris, France"]), np.array(["France"])
    row = {
        "id": np.int64(5),
        "question": np.str_("Capital of France?"),
        "golden_answers": np.array(["Paris"]),
        "data_source": "custom",
        "entities": obj,
        "extra_info": {"split": "train", "index": np.int64(5), "hops": np.float64(1.0)},
    }
    got = QAItem.from_row(row, source="x.parquet", index=5)
    assert got.id == "5" and got.question == "Capital of France?"
    assert got.entities == (("Paris", "Paris, France"), ("France",)) and got.hops == 1
    assert type(got.question) is str


def test_reads_json_array(tmp_path: Path) -> None:
    path = tmp_path / "bamboogle.json"
    path.write_text(json.dumps([{"question": "q?", "golden_answers": ["a"]}]), encoding="utf-8")
    assert read_dataset(path)[0].id == "bamboogle-0"  # data_source falls back to the file stem


# --- malformed rows ----------------------------------------------------------------------------------

GOOD = {"id": "r", "question": "q?", "golden_answers": ["a"], "data_source": "nq"}

MALFORMED = {
    "no question": ({**GOOD, "question": None}, "got no question"),
    "blank question": ({**GOOD, "question": "  "}, "got an empty question"),
    "question not text": ({**GOOD, "question": 3}, "question 3 (int)"),
    "no answers": ({k: v for k, v in GOOD.items() if k != "golden_answers"}, "got no answers"),
    "empty answers": ({**GOOD, "golden_answers": []}, "got no answers"),
    "blank answers": ({**GOOD, "golden_answers": [""]}, "got no answers"),
    "answer not str": ({**GOOD, "golden_answers": [1969]}, "answer 1969 (int)"),
    "answers not list": ({**GOOD, "golden_answers": {"a": 1}}, "golden_answers {'a': 1} (dict)"),
    "entities flat": (
        {**GOOD, "extra_info": {"entities": ["Paris", "France"]}},
        "extra_info.entities[0] 'Paris'",
    ),
    "entities not list": ({**GOOD, "entities": "Paris"}, "entities 'Paris' (str)"),
    "entity empty": ({**GOOD, "entities": [["Paris"], []]}, "entities[1] []"),
    "entity non-str": ({**GOOD, "entities": [["Paris", 3]]}, "with a non-string form"),
    "entity blank": ({**GOOD, "entities": [[""]]}, "blank surface form"),
    "hops zero": ({**GOOD, "extra_info": {"hops": 0}}, "extra_info.hops 0 (int)"),
    "hops str": ({**GOOD, "hops": "2"}, "hops '2' (str)"),
    "hops bool": ({**GOOD, "hops": True}, "hops True (bool)"),
    "chain not list": ({**GOOD, "chain": "Basel"}, "chain 'Basel' (str)"),
    "row not dict": (["q?", "a"], "got a row of type list"),
    "extra_info not dict": ({**GOOD, "extra_info": "x"}, "extra_info 'x' (str)"),
    "prompt wrong": ({**GOOD, "question": None, "prompt": 5}, "prompt 5 (int)"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_row(case: str) -> None:
    row, fragment = MALFORMED[case]
    with pytest.raises(DatasetError) as err:
        QAItem.from_row(row, source="data/nq.parquet", index=17)
    message = str(err.value)
    assert message.startswith("[dataset] data/nq.parquet row 17: got ")
    assert fragment in message and "; expected " in message and ". Fix: " in message
    assert (err.value.source, err.value.row) == ("data/nq.parquet", 17)


def test_malformed_jsonl_row_names_row_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    good = json.dumps(GOOD)
    path.write_text(f"{good}\n\n{good}\n{json.dumps({**GOOD, 'golden_answers': []})}\n")
    with pytest.raises(DatasetError, match=r"bad\.jsonl row 2 \(line 4\): got no answers"):
        read_dataset(path)


def test_malformed_parquet_row_names_row(tmp_path: Path) -> None:
    path = tmp_path / "bad.parquet"
    rows = [GOOD, GOOD, {**GOOD, "question": ""}]
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(DatasetError, match=r"bad\.parquet row 2: got an empty question"):
        read_dataset(path)


# --- file errors --------------------------------------------------------------------------------------


def test_file_errors(tmp_path: Path) -> None:
    cases = {
        "missing.jsonl": (None, "missing.jsonl: got no such file"),
        "data.csv": (b"question,answer\n", "data.csv: got suffix '.csv'"),
        "broken.parquet": (b"not parquet at all", "broken.parquet: got a file pyarrow cannot read"),
        "empty.jsonl": (b"", "empty.jsonl: got 0 rows; expected at least one question"),
        "blank.jsonl": (b"\n  \n", "blank.jsonl: got 0 rows"),
        "notjson.jsonl": (
            json.dumps(GOOD).encode() + b"\n{oops\n",
            "notjson.jsonl row 1 (line 2): got '{oops'; expected one JSON object per line",
        ),
        "latin1.jsonl": (b'{"question": "caf\xe9"}\n', "latin1.jsonl row 0 (line 1)"),
        "scalar.jsonl": (b"42\n", "scalar.jsonl row 0 (line 1): got a row of type int"),
    }
    for name, (content, fragment) in cases.items():
        path = tmp_path / name
        if content is not None:
            path.write_bytes(content)
        with pytest.raises(DatasetError) as err:
            read_dataset(path)
        assert str(err.value).startswith(f"[dataset] {path}"), name
        assert fragment in str(err.value), (name, str(err.value))
        assert "Fix: " in str(err.value)


def test_empty_parquet(tmp_path: Path) -> None:
    path = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"question": pa.array([], pa.string())}), path)
    with pytest.raises(DatasetError, match=r"empty\.parquet: got 0 rows"):
        read_dataset(path)


# --- require_entities ---------------------------------------------------------------------------------


def test_require_entities() -> None:
    require_entities([item(0), item(1)], "data/synth/train.parquet")
    require_entities([], "x.jsonl")
    with pytest.raises(DatasetError) as err:
        require_entities(ITEMS, "data/train.jsonl")
    message = str(err.value)
    assert message.startswith("[dataset] data/train.jsonl row 2 (id 'synth-2'): got no entities")
    assert "2 of 4 questions lack them" in message
    assert "reward=e_grpo needs ground-truth entities" in message
    assert "dataset=synth" in message and "reward=outcome" in message
    assert err.value.row == 2
    with pytest.raises(DatasetError, match=r"entities is an empty list.*because eval needs them"):
        require_entities([ITEMS[3]], "t.jsonl", why="eval needs them")


# --- rows without a question column: the question in an instruction prompt (issue 76) ---------------

#: Search-R1's instruction, written out once from its make_prefix (the protocol tests' oracle)
SEARCH_R1_INSTRUCTION = SR1_PREFIX


def prompt_only_row(source: str, idx: int, question: str, answers: list[str]) -> dict:
    """A Search-R1 row with its prompt but without the question columns it was made from."""
    content = SEARCH_R1_INSTRUCTION.format(question=question)
    return {
        "data_source": source,
        "prompt": [{"role": "user", "content": content}],
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": {"target": answers}},
        "extra_info": {"split": "test", "index": idx},
    }


def test_a_prompt_only_parquet_gives_the_question_after_the_marker_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows = [
        prompt_only_row("nq", 0, "who wrote hamlet?", ["Shakespeare"]),
        prompt_only_row("triviaqa", 0, "Question: a trick with the marker twice?", ["yes"]),
    ]
    path = tmp_path / "test.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    with caplog.at_level("WARNING", logger="framework.data.schema"):
        a, b = read_dataset(path)
    assert (a.question, a.data_source, a.golden_answers) == (
        "who wrote hamlet?",
        "nq",
        ("Shakespeare",),
    )
    # the last marker: the instruction's text never reaches the question
    assert b.question == "a trick with the marker twice?"
    [warning] = [r for r in caplog.records if r.levelname == "WARNING"]
    message = warning.getMessage()
    assert f"[dataset] {path}: 2 of 2 rows have no 'question' column" in message
    assert "after the last 'Question: '" in message and "e.g. row 0: 'who wrote hamlet?'" in message
    assert "Fix: add a 'question' column" in message


def test_one_row_read_alone_warns_itself(caplog: pytest.LogCaptureFixture) -> None:
    row = prompt_only_row("nq", 3, "who wrote hamlet?", ["Shakespeare"])
    with caplog.at_level("WARNING", logger="framework.data.schema"):
        item = QAItem.from_row(row, source="x.jsonl", index=3)
    assert item.question == "who wrote hamlet?" and item.id == "nq-3"
    assert "[dataset] x.jsonl: 1 of 1 rows" in caplog.text and "e.g. row 3" in caplog.text
    cut: list[int] = []
    caplog.clear()
    QAItem.from_row(row, source="x.jsonl", index=3, cut_rows=cut)
    assert cut == [3] and caplog.text == ""  # the caller warns once for its file


def test_an_instruction_prompt_without_the_marker_is_refused(tmp_path: Path) -> None:
    content = SEARCH_R1_INSTRUCTION.replace("Question: {question}\n", "Who wrote Hamlet?")
    row = {
        **prompt_only_row("nq", 0, "unused", ["a"]),
        "prompt": [{"role": "user", "content": content}],
    }
    path = tmp_path / "nq.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError) as err:
        read_dataset(path)
    message = str(err.value)
    assert message.startswith(f"[dataset] {path} row 0 (line 1): got no 'question' column and a ")
    assert "prompt that reads as an instruction ('Answer the given question." in message
    assert "Fix: add a 'question' column with the bare question" in message


def test_a_plain_prompt_is_the_question_without_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    row = {"prompt": [{"role": "user", "content": "Who wrote Hamlet?"}], "golden_answers": ["S"]}
    with caplog.at_level("WARNING", logger="framework.data.schema"):
        item = QAItem.from_row(row, source="nq.jsonl", index=0)
    assert item.question == "Who wrote Hamlet?" and caplog.text == ""
    # a question column wins over any prompt, instruction or not
    full = {**prompt_only_row("nq", 0, "who?", ["S"]), "question": "Who wrote Hamlet?"}
    assert QAItem.from_row(full, source="nq.jsonl", index=0).question == "Who wrote Hamlet?"


def test_a_marker_with_nothing_after_it_is_refused() -> None:
    row = prompt_only_row("nq", 0, "  ", ["a"])
    with pytest.raises(DatasetError, match=r"row 0: got a prompt ending in 'Question: ' with no"):
        QAItem.from_row(row, source="nq.jsonl", index=0)
