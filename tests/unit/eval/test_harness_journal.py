"""An interrupted evaluation keeps its finished waves of questions and a rerun rolls out only the
other waves (whole waves: a wave's rows depend on the rollouts it decoded beside)."""

from __future__ import annotations

import io
import json

import pytest

from framework.data.schema import QAItem
from framework.eval.harness import append_journal, read_journal, rollout_records, rollout_seed
from framework.progress import Progress
from framework.types import Trajectory


def rollout_rows(*args, **kwargs):
    """The ``samples.jsonl`` rows of :func:`rollout_records` (:meth:`EvalRecord.to_row`)."""
    return [r.to_row() for r in rollout_records(*args, **kwargs)]


class Interrupted(Exception):
    pass


class FakeLoop:
    """Answers each question with its own text, ending questions in order; raises once
    ``fail_at`` questions have ended (over all its runs). Records the questions, seeds and
    rollouts in flight it was given, and each restart of its backend."""

    def __init__(self, fail_at: int | None = None, tick=None) -> None:
        self.runs: list[list[str]] = []
        self.seeds: dict[str, list[int]] = {}
        self.in_flight: list[int | None] = []
        self.fail_at = fail_at
        self.tick = tick
        self.ended = 0
        self.backend = self
        self.restarts = 0

    def restart(self) -> None:
        self.restarts += 1

    def run(
        self, questions, k, *, max_in_flight=None, seeds=None, on_group_done=None, prompts=None
    ):
        self.runs.append(list(questions))
        self.in_flight.append(max_in_flight)
        out = []
        for g, q in enumerate(questions):
            if self.fail_at is not None and self.ended == self.fail_at:
                raise Interrupted
            if self.tick is not None:
                self.tick()
            group = [
                Trajectory(question=g, group=g, token_ids=[], loss_mask=[], prompt_len=0, answer=q)
                for _ in range(k)
            ]
            self.seeds[q] = list(seeds[g * k : (g + 1) * k])
            out += group
            self.ended += 1
            if on_group_done is not None:
                on_group_done(g, group)
        return out


def judge(inputs):
    return [a == g[0] for a, g in zip(inputs.answers, inputs.golds, strict=True)]


ITEMS = [
    QAItem(f"q{i}", f"a{i}", (f"a{i}" if i % 2 else "other",), None, 1, None, "t") for i in range(7)
]


def test_rerun_rolls_out_only_the_waves_not_in_the_journal_with_the_same_seeds(tmp_path):
    journal = tmp_path / "journal.jsonl"
    args = dict(dataset="d", batch_questions=3, journal=journal, seed=5)
    first = FakeLoop(fail_at=4)
    with pytest.raises(Interrupted):
        rollout_rows(first, ITEMS, 2, judge, **args)
    # q0..q2 (the first wave) kept in one line; q3 ended, but its wave had not
    assert [json.loads(x)["questions"] for x in journal.read_text().splitlines()] == [
        ["q0", "q1", "q2"]
    ]
    assert first.in_flight == [6, 6]  # 3 questions x 2 samples in flight, wave by wave
    assert first.restarts == 2  # every wave starts from a restarted backend
    loop = FakeLoop()
    waves: dict[str, int] = {}
    rows = rollout_rows(loop, ITEMS, 2, judge, waves=waves, **args)
    assert loop.runs == [["a3", "a4", "a5"], ["a6"]]  # the whole second wave again, then the third
    assert waves == {"waves": 3, "from_journal": 1, "questions_from_journal": 3}
    whole = FakeLoop()
    uninterrupted = rollout_rows(whole, ITEMS, 2, judge, dataset="d", batch_questions=3, seed=5)
    assert whole.runs == [["a0", "a1", "a2"], ["a3", "a4", "a5"], ["a6"]]
    assert rows == uninterrupted
    for q in ("a3", "a4", "a5", "a6"):  # each sample's seed is its own, resumed or not
        assert loop.seeds[q] == whole.seeds[q] == first.seeds.get(q, whole.seeds[q])
    assert first.seeds["a0"] == whole.seeds["a0"]
    assert whole.seeds["a0"] == [rollout_seed(5, "q0", 0), rollout_seed(5, "q0", 1)]
    assert len({s for seeds in whole.seeds.values() for s in seeds}) == 14  # all distinct
    assert rollout_seed(6, "q0", 0) != rollout_seed(5, "q0", 0)
    assert sum(r["correct"] for r in rows) == 6  # q1, q3, q5 x 2 samples
    assert [r["sample"] for r in rows[:2]] == [0, 1]


def test_waves_may_hold_more_questions_than_are_in_flight():
    loop = FakeLoop()
    rollout_rows(loop, ITEMS, 2, judge, dataset="d", batch_questions=2, wave_questions=5)
    assert loop.runs == [["a0", "a1", "a2", "a3", "a4"], ["a5", "a6"]]
    assert loop.in_flight == [4, 4]


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
    # 6 questions (two waves) came from the journal in no time; the 7th took 10 s
    assert out.getvalue().splitlines() == ["[eval] question 7/7  10.0 s/question  ETA 0.0 min"]


def test_other_questions_or_settings_are_not_taken_from_the_journal(tmp_path):
    journal = tmp_path / "journal.jsonl"
    args = dict(dataset="d", batch_questions=3, journal=journal)
    rollout_rows(FakeLoop(), ITEMS[:3], 2, judge, **args)
    loop = FakeLoop()
    rollout_rows(loop, ITEMS[3:6], 2, judge, **args)
    assert loop.runs == [["a3", "a4", "a5"]]  # other ids: rolled out
    for other in (
        dict(k=4),  # same questions, other k
        dict(seed=1),  # other sampling seed
        dict(batch_questions=2, wave_questions=3),  # other rollouts in flight
    ):
        loop = FakeLoop()
        k = other.pop("k", 2)
        rollout_rows(loop, ITEMS[:3], k, judge, **{**args, **other})
        assert loop.runs == [["a0", "a1", "a2"]], other
    loop = FakeLoop()
    rollout_rows(loop, ITEMS[1:4], 2, judge, **args)
    assert loop.runs == [["a1", "a2", "a3"]]  # a wave of other questions, though all journaled
    loop = FakeLoop()
    rollout_rows(loop, ITEMS[:6], 2, judge, **args)
    assert loop.runs == []  # both waves of k=2 are journaled


def test_lines_of_the_per_question_journal_are_not_taken(tmp_path):
    """A question journaled alone (the format before waves) decoded beside other rollouts than it
    would in its wave: rolled out again."""
    journal = tmp_path / "journal.jsonl"
    for it in ITEMS[:3]:
        append_journal(journal, {"question": it.id, "k": 2, "rows": []})
    loop = FakeLoop()
    rollout_rows(loop, ITEMS[:3], 2, judge, dataset="d", batch_questions=3, journal=journal)
    assert loop.runs == [["a0", "a1", "a2"]]


def test_duplicate_question_ids_are_refused():
    with pytest.raises(ValueError, match="appears twice"):
        rollout_rows(FakeLoop(), [ITEMS[0], ITEMS[0]], 1, judge, dataset="d")


def test_a_line_cut_short_by_a_kill_is_dropped(tmp_path):
    journal = tmp_path / "journal.jsonl"
    schedule = {"k": 2, "seed": 0, "batch_questions": 1, "wave_questions": 1}
    append_journal(journal, {"wave": 0, **schedule, "questions": ["q0"], "rows": []})
    whole = journal.stat().st_size
    with journal.open("a") as f:
        f.write('{"wave": 1, "k": 2, "ro')  # killed mid-write
    assert set(read_journal(journal, schedule)) == {("q0",)}
    assert journal.stat().st_size == whole  # the torn line is gone: the next append is clean
    append_journal(journal, {"wave": 1, **schedule, "questions": ["q1"], "rows": []})
    lines = journal.read_text().splitlines()
    assert [json.loads(x)["questions"] for x in lines] == [["q0"], ["q1"]]
