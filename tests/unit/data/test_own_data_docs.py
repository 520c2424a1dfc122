"""The example rows of docs/own_data.md load through the real loader and mean what the page says."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from framework.data.schema import QAItem, read_dataset
from framework.rewards.entity import EntityRewardConfig
from framework.rewards.entity_match import hidden_entities
from framework.rl.stages import require_hidden_entities
from framework.sft.expert import usable_questions

PAGE = Path(__file__).resolve().parents[3] / "docs" / "own_data.md"
EXAMPLE = re.compile(r"<!-- example: (\w+) -->\n```(json|jsonl)\n(.*?)\n```", re.DOTALL)


def examples() -> dict[str, list[dict]]:
    """Each marked code block of the page as its rows: a ``json`` block is one row, a ``jsonl``
    block one row per line."""
    out = {}
    for name, kind, body in EXAMPLE.findall(PAGE.read_text()):
        rows = [json.loads(body)] if kind == "json" else [json.loads(x) for x in body.splitlines()]
        out[name] = rows
    return out


def load_both(rows: list[dict], tmp_path: Path, name: str) -> list[QAItem]:
    """``rows`` read back from a JSONL file and from a parquet file; both must agree."""
    jsonl = tmp_path / f"{name}.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    parquet = tmp_path / f"{name}.parquet"
    columns = dict.fromkeys(k for r in rows for k in r)  # from_pylist takes the first row's keys
    pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in columns} for r in rows]), parquet)
    items = read_dataset(jsonl)
    assert read_dataset(parquet) == items
    return items


def test_the_page_has_every_example():
    assert sorted(examples()) == ["e_grpo_row", "plain_jsonl", "search_r1_row"]


def test_plain_qa_rows_load(tmp_path):
    rows = examples()
    (r1,) = load_both(rows["search_r1_row"], tmp_path, "nq")
    assert (r1.id, r1.question, r1.golden_answers) == (
        "train_0",
        "who wrote the novel jaws?",
        ("Peter Benchley",),
    )
    assert r1.data_source == "nq" and r1.entities is None and r1.extra == {}
    first, second = load_both(rows["plain_jsonl"], tmp_path, "mine_plain")
    assert first.data_source == "mine_plain" and first.id == "mine_plain-0"  # the file's name
    assert second.golden_answers == ("1969", "July 1969") and second.data_source == "mine"


def test_entity_row_loads_and_serves_the_reward_and_the_expert(tmp_path):
    (row,) = load_both(examples()["e_grpo_row"], tmp_path, "mine")
    assert row.hops == 2 and len(row.entities) == 3 and len(row.chain) == 3
    assert row.extra == {
        "clues": ["ballet company", "city"],
        "mentions": ["Mariinsky Ballet", "Saint Petersburg"],
    }
    # E_q under E-GRPO's defaults: the question names the anchor only, as the page says
    rule = EntityRewardConfig(name="e_grpo")
    hidden = hidden_entities(row.question, row.entities, rule)
    assert [e[0] for e in hidden] == ["Mariinsky Ballet", "Saint Petersburg"]
    assert "1 of 1 train questions hide an entity" in require_hidden_entities([row], rule, "x")
    usable, dropped = usable_questions([row])
    assert usable == [row] and not dropped


@pytest.mark.parametrize("drop", ["clues", "mentions", "chain"])
def test_the_expert_drops_the_entity_row_without_its_walk(tmp_path, drop):
    (raw,) = examples()["e_grpo_row"]
    raw["extra_info"].pop(drop)
    (row,) = load_both([raw], tmp_path, "mine")
    assert usable_questions([row])[0] == []
