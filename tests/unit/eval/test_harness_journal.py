"""An interrupted evaluation keeps its finished batches and a rerun rolls out only the rest."""

from __future__ import annotations

import io
import json

import pytest

from framework.data.schema import QAItem
from framework.eval.harness import append_journal, read_journal, rollout_rows
from framework.progress import Progress
from framework.rollout.types import Trajectory


class Interrupted(Exception):
    pass


class FakeLoop:
    """Answers each question with its own text; raises once ``fail_at`` batches have run."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.batches: list[list[str]] = []
        self.fail_at = fail_at

    def run(self, questions: list[str], k: int) -> list[Trajectory]:
        if self.fail_at is not None and len(self.batches) == self.fail_at:
            raise Interrupted
        self.batches.append(list(questions))
        return [
            Trajectory(question=g, group=g, token_ids=[], loss_mask=[], prompt_len=0, answer=q)
            for g, q in enumerate(questions)
            for _ in range(k)
        ]


def judge(inputs):
    return [a == g[0] for a, g in zip(inputs.answers, inputs.golds, strict=True)]


ITEMS = [
    QAItem(f"q{i}", f"a{i}", (f"a{i}" if i % 2 else "other",), None, 1, None, "t") for i in range(7)
]


def test_rerun_rolls_out_only_the_batches_not_in_the_journal(tmp_path):
    journal = tmp_path / "journal.jsonl"
    seeds: list[int] = []
    args = dict(dataset="d", batch_questions=3, journal=journal, reseed=seeds.append)
    with pytest.raises(Interrupted):
        rollout_rows(FakeLoop(fail_at=2), ITEMS, 2, judge, **args)
    assert len(journal.read_text().splitlines()) == 2  # batches 0 and 1 kept
    assert seeds == [0, 1, 2]
    loop = FakeLoop()
    seeds.clear()
    rows = rollout_rows(loop, ITEMS, 2, judge, **args)
    assert loop.batches == [["a6"]] and seeds == [2]  # only the last batch (one question) ran
    uninterrupted = rollout_rows(FakeLoop(), ITEMS, 2, judge, dataset="d", batch_questions=3)
    assert [(r["question_id"], r["correct"]) for r in rows] == [
        (r["question_id"], r["correct"]) for r in uninterrupted
    ]
    assert sum(r["correct"] for r in rows) == 6  # q1, q3, q5 x 2 samples


def test_batches_from_the_journal_do_not_count_in_the_progress_rate(tmp_path):
    journal = tmp_path / "journal.jsonl"
    args = dict(dataset="d", batch_questions=3, journal=journal)
    with pytest.raises(Interrupted):
        rollout_rows(FakeLoop(fail_at=2), ITEMS, 2, judge, **args)
    clock = [0.0]
    out = io.StringIO()
    progress = Progress(
        "eval",
        len(ITEMS),
        "question",
        every_s=0,
        min_s=0,
        plain=True,
        stream=out,
        clock=lambda: clock[0],
    )

    class SlowLoop(FakeLoop):
        def run(self, questions, k):
            clock[0] += 10.0  # one question in 10 s
            return super().run(questions, k)

    rollout_rows(SlowLoop(), ITEMS, 2, judge, progress=progress, **args)
    # 6 questions came from the journal in no time; the 7th took 10 s
    assert out.getvalue().splitlines() == ["[eval] question 7/7  10.0 s/question  ETA 0.0 min"]


def test_other_questions_or_k_are_not_taken_from_the_journal(tmp_path):
    journal = tmp_path / "journal.jsonl"
    rollout_rows(FakeLoop(), ITEMS[:3], 2, judge, dataset="d", batch_questions=3, journal=journal)
    loop = FakeLoop()
    rollout_rows(loop, ITEMS[3:6], 2, judge, dataset="d", batch_questions=3, journal=journal)
    assert loop.batches == [["a3", "a4", "a5"]]  # same batch index, other ids: rolled out
    loop = FakeLoop()
    rollout_rows(loop, ITEMS[:3], 4, judge, dataset="d", batch_questions=3, journal=journal)
    assert len(loop.batches) == 1  # same ids, other k: rolled out


def test_a_line_cut_short_by_a_kill_is_dropped(tmp_path):
    journal = tmp_path / "journal.jsonl"
    append_journal(journal, {"batch": 0, "k": 2, "ids": ["q0"], "rows": []})
    whole = journal.stat().st_size
    with journal.open("a") as f:
        f.write('{"batch": 1, "k": 2, "ids": ["q1"], "ro')  # killed mid-write
    assert set(read_journal(journal, 2)) == {0}
    assert journal.stat().st_size == whole  # the torn line is gone: the next append is clean
    append_journal(journal, {"batch": 1, "k": 2, "ids": ["q1"], "rows": []})
    assert [json.loads(x)["batch"] for x in journal.read_text().splitlines()] == [0, 1]


def test_rows_carry_the_answer_key_and_entities_matched_by_kind():
    # a two-hop question: anchor Kent, bridge Thames, answer London; the think text names the
    # anchor and the bridge
    item = QAItem(
        "q",
        "Which city?",
        ("London",),
        (("Kent",), ("Thames",), ("London (city)", "London")),
        2,
        ("d1", "d2", "d3"),
        "t",
    )

    class ThinkLoop:
        def run(self, questions, k):
            return [
                Trajectory(
                    question=0,
                    group=0,
                    token_ids=[],
                    loss_mask=[],
                    prompt_len=0,
                    answer="Paris",
                    think_text="Kent borders the Thames estuary.",
                )
            ] * k

    (row,) = rollout_rows(ThinkLoop(), [item], 1, judge, dataset="d")
    assert row["answer_key"] == "london"
    assert (row["matched_anchor"], row["matched_bridges"], row["bridges"]) == (1, 1, 1)
    assert row["matched_answer"] == 0 and row["match_rate"] == pytest.approx(2 / 3)
