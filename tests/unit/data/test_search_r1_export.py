"""seekrl-synth's questions exported in Search-R1's parquet layout, and read back by seekrl."""

from __future__ import annotations

from dataclasses import replace

import pyarrow.parquet as pq
import pytest

from framework.data import search_r1
from framework.data.datasets import FilesDatasetConfig, SynthConfig, files_dataset
from framework.data.schema import COLUMNS, DatasetError, QAItem, read_dataset
from framework.data.search_r1 import export_search_r1, write_search_r1_split
from framework.data.synthesis import SPLITS
from framework.rollout.search_r1 import prompt_text
from tests.unit.data.test_synthesis import grid_articles, synth_cfg, write_corpus

#: Search-R1's make_prefix(template_type="base") for the question "Who wrote Jaws", typed out from
#: scripts/data_process/nq_search.py: its backslash-continued lines joined, each ". " kept
SEARCH_R1_JAWS = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every "
    "time you get new information. After reasoning, if you find you lack some knowledge, you can "
    "call a search engine by <search> query </search> and it will return the top searched results "
    "between <information> and </information>. You can search as many times as your want. If you "
    "find no further external knowledge needed, you can directly provide the answer inside <answer> "
    "and </answer>, without detailed illustrations. For example, <answer> Beijing </answer>. "
    "Question: Who wrote Jaws?\n"
)


def test_prompt_is_search_r1s_instruction():
    # the search_r1 protocol's prompt, which the export writes, is make_prefix's text
    assert prompt_text("Who wrote Jaws?") == SEARCH_R1_JAWS


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    cfg = synth_cfg(root, write_corpus(root / "corpus.jsonl", grid_articles()))
    logs: list[str] = []
    out = export_search_r1(cfg, root / "search_r1", log=logs.append)  # synthesizes first
    return cfg, out, logs


def test_export_writes_search_r1_rows(exported):
    _, out, logs = exported
    assert sorted(p.name for p in out.iterdir()) == [
        "test.parquet",
        "train.parquet",
        "validation.parquet",
    ]
    assert logs[-1].startswith("exported train 8, validation 3, test 3 questions from ")
    rows = pq.read_table(out / "train.parquet").to_pylist()
    assert tuple(rows[0]) == COLUMNS  # id, question, golden_answers, data_source, prompt, ...
    for index, row in enumerate(rows):
        assert row["prompt"] == [{"role": "user", "content": prompt_text(row["question"])}]
        assert row["ability"] == "fact-reasoning" and row["data_source"] == "seekrl_synth"
        assert row["reward_model"] == {
            "style": "rule",
            "ground_truth": {"target": row["golden_answers"]},
        }
        info = row["extra_info"]
        assert (info["split"], info["index"]) == ("train", index)
        assert len(info["entities"]) == info["hops"] + 1 == len(info["chain"])
        assert len(info["clues"]) == len(info["mentions"]) == info["hops"]


def test_export_round_trips_through_the_parquet_loader(exported):
    cfg, out, _ = exported
    for split in SPLITS:
        original = read_dataset(cfg.directory() / f"{split}.jsonl")
        files = FilesDatasetConfig(name="files", **{split: str(out / f"{split}.parquet")})
        back = files_dataset(split, cfg=files)
        # the same questions, answers, entities, hops, chains and annotations (clues, mentions);
        # each read-back item also keeps the exported instruction prompt (agent.prompt=dataset)
        assert [replace(it, prompt=None) for it in back] == original
        assert all(it.prompt == (("user", prompt_text(it.question)),) for it in back), (
            "the exported Search-R1 instruction is kept as the item's prompt"
        )
        assert [it.entities for it in back] == [it.entities for it in original]


def test_export_reuses_the_synthesized_splits(exported, tmp_path, monkeypatch):
    cfg, _, _ = exported

    def again(*args, **kwargs):
        raise AssertionError("synthesized again")

    monkeypatch.setattr(search_r1, "synthesize", again)
    out = export_search_r1(cfg, tmp_path / "again", log=lambda line: None)
    assert (out / "test.parquet").is_file()


def test_synth_app_export_option(exported, tmp_path):
    from framework.cli.synth import synth

    cfg, _, _ = exported
    assert SynthConfig(dataset=cfg).export_search_r1 is None  # off by default
    assert synth(SynthConfig(dataset=cfg, export_search_r1=str(tmp_path / "x"))) == tmp_path / "x"
    # the synthesized folder's own parquet files hold the plain question: not overwritten
    same = SynthConfig(dataset=cfg, export_search_r1=cfg.output_dir)
    assert [p.path for p in same.problems()] == ["export_search_r1"]


def test_an_empty_split_is_refused(tmp_path):
    with pytest.raises(DatasetError, match=r"got 0 test questions"):
        write_search_r1_split([], tmp_path / "test.parquet", "test")
    item = QAItem("a", "Who wrote Jaws?", ("Peter Benchley",), None, None, None, "nq")
    path = write_search_r1_split([item], tmp_path / "t.parquet", "test")
    assert pq.read_table(path).to_pylist()[0]["prompt"][0]["content"] == SEARCH_R1_JAWS
    assert read_dataset(path) == [replace(item, prompt=(("user", SEARCH_R1_JAWS),))]
