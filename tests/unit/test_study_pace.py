"""The study's progress line: runs through, and the time the rest will take at this pace."""

from __future__ import annotations

from framework.cli.study import RESUMED, TRAINED_BEFORE, StudyPace


def test_the_pace_comes_from_the_runs_that_did_work_now():
    now = [0.0]
    pace = StudyPace(total=5, clock=lambda: now[0])
    pace.start()
    now[0] += 1.0  # finished by an earlier invocation: skipped, no line, no pace
    assert pace.finish("grpo seed 0", "done") is None
    pace.start()
    now[0] += 1800.0
    assert pace.finish("e_grpo seed 0", "done") == (
        "seekrl-study: [2/5] e_grpo seed 0 done in 30 min; about 1.5 h left at this pace"
    )
    pace.start()
    now[0] += 5400.0  # a slow run: the pace is the mean, 3600 s, times the 2 runs left
    assert pace.finish("placebo seed 0", "done") == (
        "seekrl-study: [3/5] placebo seed 0 done in 1.5 h; about 2.0 h left at this pace"
    )
    pace.start()
    now[0] += 2.0  # a quick failure still says so
    assert pace.finish("raft seed 0", "failed").startswith("seekrl-study: [4/5] raft seed 0 failed")
    pace.start()
    now[0] += 600.0
    assert pace.finish("grpo seed 1", "done") == "seekrl-study: [5/5] grpo seed 1 done in 10 min"


def test_a_resumed_run_is_reported_but_does_not_set_the_pace():
    """A restarted study's first run is often the remainder of one cut off: 19 minutes of a
    45-minute run made the rest look twice as quick."""
    now = [0.0]
    pace = StudyPace(total=4, clock=lambda: now[0])
    pace.start()
    now[0] += 1140.0
    assert pace.finish("dagrpo seed 0", "done", earlier=RESUMED) == (
        "seekrl-study: [1/4] dagrpo seed 0 done (resumed from a checkpoint) in 19 min; "
        "the pace comes with the first run trained from its start"
    )
    pace.start()
    now[0] += 2700.0
    assert pace.finish("dppo seed 0", "done") == (
        "seekrl-study: [2/4] dppo seed 0 done in 45 min; about 1.5 h left at this pace"
    )


def test_a_run_trained_before_and_only_evaluated_now_does_not_set_the_pace():
    """A study cut off while it evaluated an arm finds that arm trained on its next start: its 9
    minutes of evaluation made the 32 methods left read 5.0 h, not about 24 h."""
    now = [0.0]
    pace = StudyPace(total=42, through=9, clock=lambda: now[0])
    pace.start()
    now[0] += 540.0
    assert pace.finish("e_grpo seed 0", "done", earlier=TRAINED_BEFORE) == (
        "seekrl-study: [10/42] e_grpo seed 0 done (trained before; evaluated now) in 9 min; "
        "the pace comes with the first run trained from its start"
    )
    pace.start()
    now[0] += 2700.0
    assert pace.finish("gigpo seed 0", "done") == (
        "seekrl-study: [11/42] gigpo seed 0 done in 45 min; about 23.2 h left at this pace"
    )
