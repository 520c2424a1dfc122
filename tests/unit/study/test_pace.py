"""The study's progress line: runs through, and the time the rest will take at this pace."""

from __future__ import annotations

import pytest

from framework.study.runner import StudyPace
from framework.study.runs import RESUMED, TRAINED_BEFORE


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


#: a restarted study's first run is often the remainder of one cut off: 19 minutes of a 45-minute
#: run made the rest look twice as quick; and a study cut off while it evaluated an arm finds that
#: arm trained on its next start: its 9 minutes of evaluation made the 32 methods left read 5.0 h,
#: not about 24 h
EARLIER_RUNS = [
    pytest.param(
        4,
        0,
        ("dagrpo", RESUMED, 1140.0),
        "seekrl-study: [1/4] dagrpo seed 0 done (resumed from a checkpoint) in 19 min; ",
        ("dppo", "seekrl-study: [2/4] dppo seed 0 done in 45 min; about 1.5 h left at this pace"),
        id="resumed",
    ),
    pytest.param(
        42,
        9,
        ("e_grpo", TRAINED_BEFORE, 540.0),
        "seekrl-study: [10/42] e_grpo seed 0 done (trained before; evaluated now) in 9 min; ",
        (
            "gigpo",
            "seekrl-study: [11/42] gigpo seed 0 done in 45 min; about 23.2 h left at this pace",
        ),
        id="trained_before",
    ),
]


@pytest.mark.parametrize("total, through, earlier_run, said, next_run", EARLIER_RUNS)
def test_a_run_an_earlier_start_began_is_reported_but_does_not_set_the_pace(
    total, through, earlier_run, said, next_run
):
    now = [0.0]
    pace = StudyPace(total=total, through=through, clock=lambda: now[0])
    arm, earlier, seconds = earlier_run
    pace.start()
    now[0] += seconds
    assert pace.finish(f"{arm} seed 0", "done", earlier=earlier) == (
        said + "the pace comes with the first run trained from its start"
    )
    pace.start()
    now[0] += 2700.0
    assert pace.finish(f"{next_run[0]} seed 0", "done") == next_run[1]
