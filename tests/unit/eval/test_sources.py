"""Evaluation per data_source with the macro average (Search-R1's tables), from a merged file of
several sources, through the harness's records; figures derived by hand in the comments."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from framework.eval.answer_rule import ANSWER_RULE, answer_rule_markdown
from framework.eval.config import EvalConfig
from framework.eval.harness import rollout_records, summarize
from framework.eval.metrics import macro_mean_ci
from framework.eval.records import EvalRecord, load_records, write_records
from framework.eval.report import MACRO, source_lines, source_markdown, source_table_rows, write_csv
from framework.eval.run import EvalError, dataset_names, load_datasets
from framework.eval.sources import by_source
from framework.rewards.text import exact_match
from framework.types import STATUS_FORMAT_ERROR, STATUS_OK, Trajectory

K = 2
#: (data_source, id, question, gold, the two sampled answers; None: a format error)
ROWS = [
    (
        "nq",
        "test_0",
        "who wrote hamlet?",
        "William Shakespeare",
        ["William Shakespeare", "Shakespeare"],
    ),
    ("nq", "test_1", "capital of france?", "Paris", ["Paris", "paris."]),
    ("triviaqa", "test_0", "largest planet?", "Jupiter", ["Saturn", "the planet Jupiter"]),
    ("hotpotqa", "test_0", "is paris in france?", "yes", ["yes", "no"]),
    ("hotpotqa", "test_1", "who directed alien?", "Ridley Scott", ["James Cameron", None]),
]
ANSWERS = {question: answers for _, _, question, _, answers in ROWS}


def merged_parquet(path: Path) -> Path:
    """Search-R1's merged test layout (qa_search_test_merge.py): each source keeps its own ids."""
    rows = [
        {
            "id": qid,
            "question": question,
            "golden_answers": [gold],
            "data_source": source,
            "prompt": [{"role": "user", "content": f"Answer... Question: {question}\n"}],
            "ability": "fact-reasoning",
            "reward_model": {"style": "rule", "ground_truth": {"target": [gold]}},
            "extra_info": {"split": "test", "index": i},
        }
        for i, (source, qid, question, gold, _) in enumerate(ROWS)
    ]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


class ScriptedLoop:
    """Answers sample j of each question with ``ANSWERS[question][j]``."""

    def run(
        self, questions, k, *, max_in_flight=None, seeds=None, on_group_done=None, prompts=None
    ):
        out = []
        for g, q in enumerate(questions):
            group = [
                Trajectory(
                    question=g,
                    group=g,
                    token_ids=[],
                    loss_mask=[],
                    prompt_len=0,
                    answer=a,
                    status=STATUS_OK if a is not None else STATUS_FORMAT_ERROR,
                )
                for a in ANSWERS[q][:k]
            ]
            out += group
            if on_group_done is not None:
                on_group_done(g, group)
        return out


def judge(inputs):
    return [a is not None and exact_match(a, g) for a, g in zip(inputs.answers, inputs.golds)]


@pytest.fixture
def evaluated(tmp_path):
    """The merged file's records, as seekrl-eval files=[<it>] questions=0 rolls them out."""
    cfg = EvalConfig(
        dataset=None, files=[str(merged_parquet(tmp_path / "test.parquet"))], questions=0
    )
    sets, notices = load_datasets(cfg)
    [(name, items)] = sets.items()
    return name, items, notices, rollout_records(ScriptedLoop(), items, K, judge, dataset=name)


def test_only_the_files_are_evaluated_and_repeated_ids_are_read_per_source(evaluated):
    name, items, notices, _ = evaluated
    # dataset=None: the configured dataset is never built when files= names any
    assert name == "test"
    assert [it.id for it in items] == [
        "nq/test_0",
        "nq/test_1",
        "triviaqa/test_0",
        "hotpotqa/test_0",
        "hotpotqa/test_1",
    ]
    assert any("ids repeat across its data sources" in n for n in notices)


def test_records_carry_their_source(evaluated):
    *_, records = evaluated
    assert [r.data_source for r in records] == [s for s, *_ in ROWS for _ in range(K)]
    assert records[0].to_row()["data_source"] == "nq"
    assert records[0].archived()["data_source"] == "nq"


def test_one_row_per_source_and_the_macro_average(evaluated):
    *_, records = evaluated
    got = by_source(records, K)
    rows = {r["data_source"]: r["summary"] for r in got["rows"]}
    assert list(rows) == ["nq", "triviaqa", "hotpotqa"]  # in the order of the file
    assert {r["dataset"] for r in got["rows"]} == {"test"}
    # nq: per-question accuracy [1/2, 1] -> Pass@1 0.75; EM 3/4 samples; F1 of "Shakespeare"
    # against "William Shakespeare" is 2 * 1 * (1/2) / (1 + 1/2) = 2/3, so F1 (1 + 2/3 + 1 + 1) / 4
    nq = rows["nq"]
    assert (nq["questions"], nq["pass@1"], nq["em"]) == (2, 0.75, 0.75)
    assert nq["f1"] == pytest.approx(11 / 12)
    assert nq["pass@2"] == 1.0
    # triviaqa: both wrong; "the planet Jupiter" -> "planet jupiter": F1 2 * (1/2) * 1 / (3/2) = 2/3
    trivia = rows["triviaqa"]
    assert (trivia["pass@1"], trivia["em"]) == (0.0, 0.0)
    assert trivia["f1"] == pytest.approx(1 / 3)
    # hotpotqa: accuracies [1/2, 0] -> 0.25; one format error in 4 samples; F1 (1 + 0 + 0 + 0) / 4
    hotpot = rows["hotpotqa"]
    assert (hotpot["pass@1"], hotpot["em"], hotpot["f1"]) == (0.25, 0.25, 0.25)
    assert hotpot["format_error_rate"] == 0.25 and hotpot["pass@2"] == 0.5
    macro = got["macro"]
    # each source counts once: (0.75 + 0 + 0.25) / 3, not the 5 questions' mean (0.4)
    assert summarize(records, K)["pass@1"] == pytest.approx(0.4)
    assert (macro["sources"], macro["questions"], macro["rollouts"]) == (3, 5, 10)
    assert macro["pass@1"] == pytest.approx(1 / 3) and macro["em"] == pytest.approx(1 / 3)
    # F1: (11/12 + 4/12 + 3/12) / 3 = 0.5; Pass@2: (1 + 0 + 0.5) / 3 = 0.5
    assert macro["f1"] == pytest.approx(0.5) and macro["pass@2"] == pytest.approx(0.5)
    assert macro["format_error_rate"] == pytest.approx(0.25 / 3)
    # interval: variances of the means 0.125/2 (nq) + 0 (one question) + 0.125/2 (hotpotqa)
    # = 0.125; half-width 1.96 * sqrt(0.125) / 3 = 0.230988
    assert macro["pass@1_ci"] == pytest.approx([1 / 3 - 0.230988, 1 / 3 + 0.230988], abs=1e-6)
    assert macro["entity"] is None  # no source has entities


def test_the_csv_and_the_report_table_hold_every_source_and_the_macro_row(evaluated, tmp_path):
    *_, records = evaluated
    got = by_source(records, K)
    write_csv(tmp_path / "by_source.csv", source_table_rows(got), ["dataset", "data_source"])
    rows = list(csv.DictReader((tmp_path / "by_source.csv").open()))
    assert [r["data_source"] for r in rows] == ["nq", "triviaqa", "hotpotqa", MACRO]
    assert [r["em"] for r in rows] == ["0.75", "0.0", "0.25", "0.3333"]
    assert rows[-1]["dataset"] == "" and rows[-1]["f1"] == "0.5"
    table = source_markdown(got, K)
    assert "| test | nq | 2 | 0.750 [" in "\n".join(table)
    assert f"|  | **{MACRO}** | 5 | 0.333 [0.102, 0.564] | 0.500 | 0.333 | 0.500 | 0.00 |" in table
    assert source_lines(got)[-1] == f"  {MACRO} over 3 sources: Pass@1 0.333, EM 0.333, F1 0.500"
    json.dumps(got)  # results.json holds it as it is


def test_old_records_without_a_source_read_back_and_fall_back_to_their_dataset(evaluated, tmp_path):
    """An archive from before data_source was kept reads back with None; such records make one
    row per dataset."""
    *_, records = evaluated
    old = [{k: v for k, v in r.archived().items() if k != "data_source"} for r in records]
    assert {r.data_source for r in load_records(write_records(tmp_path / "old.jsonl.gz", old))} == {
        None
    }
    got = by_source([dataclasses.replace(r, data_source=None) for r in records], K)
    assert [(r["dataset"], r["data_source"]) for r in got["rows"]] == [("test", "test")]
    assert got["macro"]["pass@1"] == pytest.approx(0.4)  # one source: the macro is the mean


def test_macro_mean_ci_by_hand():
    # means 0.75 and 0.25; variances of the means 0.125/2 each; 1.96 * sqrt(0.125) / 2 = 0.346482
    est = macro_mean_ci([[0.5, 1.0], [0.5, 0.0]])
    assert (est.mean, est.n) == (0.5, 2)
    assert (est.low, est.high) == pytest.approx((0.5 - 0.346482, 0.5 + 0.346482), abs=1e-6)
    assert macro_mean_ci([[1.0], [1.0, 1.0]]).low == 1.0  # no spread: a zero-width interval
    assert math.isnan(macro_mean_ci([]).mean) and math.isnan(macro_mean_ci([[1.0], []]).mean)


def test_questions_subsample_each_source(tmp_path):
    path = merged_parquet(tmp_path / "test.parquet")
    sets, _ = load_datasets(EvalConfig(dataset=None, files=[str(path)], questions=1, seed=3))
    assert sorted(it.data_source for it in sets["test"]) == ["hotpotqa", "nq", "triviaqa"]


def test_file_names_stay_apart_and_a_repeated_file_is_refused(tmp_path):
    for d in ("nq", "hotpotqa"):
        (tmp_path / d).mkdir()
    a, b = tmp_path / "nq" / "test.parquet", tmp_path / "hotpotqa" / "test.parquet"
    assert list(dataset_names([str(a), str(b)])) == ["nq/test", "hotpotqa/test"]
    assert list(dataset_names([str(a), str(tmp_path / "dev.jsonl")])) == ["test", "dev"]
    with pytest.raises(EvalError, match=r"\[files\] got .*test\.parquet twice"):
        dataset_names([str(a), str(tmp_path / "nq" / ".." / "nq" / "test.parquet")])


def test_an_id_repeated_within_one_source_is_refused(tmp_path):
    path = merged_parquet(tmp_path / "test.parquet")
    table = pq.read_table(path).to_pylist()
    table[1]["id"] = "test_0"  # two nq rows with one id
    pq.write_table(pa.Table.from_pylist(table), path)
    with pytest.raises(EvalError, match=r"got question id 'test_0' twice in data_source 'nq'"):
        load_datasets(EvalConfig(dataset=None, files=[str(path)], questions=0))


def test_the_answer_rule_is_stated_with_its_search_r1_counterpart():
    assert ANSWER_RULE["name"] == "last_answer_span_of_response"
    assert "first and the last <answer> span" in ANSWER_RULE["rule"]
    assert "at least two" in ANSWER_RULE["search_r1"] and "qa_em.py" in ANSWER_RULE["search_r1"]
    assert answer_rule_markdown(ANSWER_RULE)[0].startswith("Answers: the stripped body")


def test_a_record_keeps_its_source_through_a_samples_row():
    r = EvalRecord(dataset="d", question_id="q", sample=0, correct=True, data_source="nq")
    assert EvalRecord.from_row(r.to_row()) == r
