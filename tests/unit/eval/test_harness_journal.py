"""An interrupted evaluation keeps its finished questions and a rerun rolls out only the rest."""

from __future__ import annotations

import io
import json

import pytest

from framework.data.schema import QAItem
from framework.eval.harness import append_journal, read_journal, rollout_rows, rollout_seed
from framework.progress import Progress
from framework.rollout.types import Trajectory


class Interrupted(Exception):
    pass


class FakeLoop:
    """Answers each question with its own text, ending questions in order; raises once
    ``fail_at`` questions have ended. Records the questions and seeds it was given."""

    def __init__(self, fail_at: int | None = None, tick=None) -> None:
        self.runs: list[list[str]] = []
        self.seeds: dict[str, list[int]] = {}
        self.in_flight: list[int | None] = []
        self.fail_at = fail_at
        self.tick = tick

    def run(self, questions, k, *, max_in_flight=None, seeds=None, on_group_done=None):
        self.runs.append(list(questions))
        self.in_flight.append(max_in_flight)
        out = []
        for g, q in enumerate(questions):
            if self.fail_at is not None and g == self.fail_at:
                raise Interrupted
            if self.tick is not None:
                self.tick()
            group = [
                Trajectory(question=g, group=g, token_ids=[], loss_mask=[], prompt_len=0, answer=q)
                for _ in range(k)
            ]
            self.seeds[q] = list(seeds[g * k : (g + 1) * k])
            out += group
            if on_group_done is not None:
                on_group_done(g, group)
        return out


def judge(inputs):
    return [a == g[0] for a, g in zip(inputs.answers, inputs.golds, strict=True)]


ITEMS = [
    QAItem(f"q{i}", f"a{i}", (f"a{i}" if i % 2 else "other",), None, 1, None, "t") for i in range(7)
]


def test_rerun_rolls_out_only_the_questions_not_in_the_journal_with_the_same_seeds(tmp_path):
    journal = tmp_path / "journal.jsonl"
    args = dict(dataset="d", batch_questions=3, journal=journal, seed=5)
    first = FakeLoop(fail_at=4)
    with pytest.raises(Interrupted):
        rollout_rows(first, ITEMS, 2, judge, **args)
    assert len(journal.read_text().splitlines()) == 4  # q0..q3 kept, one line each
    assert first.in_flight == [6]  # 3 questions x 2 samples in flight
    loop = FakeLoop()
    rows = rollout_rows(loop, ITEMS, 2, judge, **args)
    assert loop.runs == [["a4", "a5", "a6"]]  # only the questions not journaled ran
    whole = FakeLoop()
    uninterrupted = rollout_rows(whole, ITEMS, 2, judge, dataset="d", batch_questions=3, seed=5)
    assert rows == uninterrupted
    for q in ("a4", "a5", "a6"):  # each sample's seed is its own, resumed or not
        assert loop.seeds[q] == whole.seeds[q] == first.seeds.get(q, whole.seeds[q])
    assert first.seeds["a0"] == whole.seeds["a0"]
    assert whole.seeds["a0"] == [rollout_seed(5, "q0", 0), rollout_seed(5, "q0", 1)]
    assert len({s for seeds in whole.seeds.values() for s in seeds}) == 14  # all distinct
    assert rollout_seed(6, "q0", 0) != rollout_seed(5, "q0", 0)
    assert sum(r["correct"] for r in rows) == 6  # q1, q3, q5 x 2 samples
    assert [r["sample"] for r in rows[:2]] == [0, 1]


def test_questions_from_the_journal_do_not_count_in_the_progress_rate(tmp_path):
    journal = tmp_path / "journal.jsonl"
    args = dict(dataset="d", batch_questions=3, journal=journal)
    with pytest.raises(Interrupted):
        rollout_rows(FakeLoop(fail_at=6), ITEMS, 2, judge, **args)
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

    def tick():
        clock[0] += 10.0  # one question in 10 s

    rollout_rows(FakeLoop(tick=tick), ITEMS, 2, judge, progress=progress, **args)
    # 6 questions came from the journal in no time; the 7th took 10 s
    assert out.getvalue().splitlines() == ["[eval] question 7/7  10.0 s/question  ETA 0.0 min"]


def test_other_questions_or_k_are_not_taken_from_the_journal(tmp_path):
    journal = tmp_path / "journal.jsonl"
    rollout_rows(FakeLoop(), ITEMS[:3], 2, judge, dataset="d", journal=journal)
    loop = FakeLoop()
    rollout_rows(loop, ITEMS[3:6], 2, judge, dataset="d", journal=journal)
    assert loop.runs == [["a3", "a4", "a5"]]  # other ids: rolled out
    loop = FakeLoop()
    rollout_rows(loop, ITEMS[:3], 4, judge, dataset="d", journal=journal)
    assert loop.runs == [["a0", "a1", "a2"]]  # same ids, other k: rolled out
    loop = FakeLoop()
    rollout_rows(loop, ITEMS[:6], 2, judge, dataset="d", journal=journal)
    assert loop.runs == []  # every question of k=2 is journaled


def test_duplicate_question_ids_are_refused():
    with pytest.raises(ValueError, match="appears twice"):
        rollout_rows(FakeLoop(), [ITEMS[0], ITEMS[0]], 1, judge, dataset="d")


def test_a_line_cut_short_by_a_kill_is_dropped(tmp_path):
    journal = tmp_path / "journal.jsonl"
    append_journal(journal, {"question": "q0", "k": 2, "rows": []})
    whole = journal.stat().st_size
    with journal.open("a") as f:
        f.write('{"question": "q1", "k": 2, "ro')  # killed mid-write
    assert set(read_journal(journal, 2)) == {"q0"}
    assert journal.stat().st_size == whole  # the torn line is gone: the next append is clean
    append_journal(journal, {"question": "q1", "k": 2, "rows": []})
    assert [json.loads(x)["question"] for x in journal.read_text().splitlines()] == ["q0", "q1"]


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
        def run(self, questions, k, **kwargs):
            group = [
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
            kwargs["on_group_done"](0, group)
            return group

    (row,) = rollout_rows(ThinkLoop(), [item], 1, judge, dataset="d")
    assert row["answer_key"] == "london"
    assert (row["matched_anchor"], row["matched_bridges"], row["bridges"]) == (1, 1, 1)
    assert row["matched_answer"] == 0 and row["match_rate"] == pytest.approx(2 / 3)
