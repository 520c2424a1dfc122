"""The block a training run ends with, from two hand-made evaluations."""

from __future__ import annotations

import pytest

from framework.eval.final import WHAT_THIS_IS, final_comparison, final_lines
from framework.eval.records import EvalRecord


def rows(correct: dict[str, list[bool]], status="ok", tool_calls=1):
    return [
        EvalRecord(
            dataset="d", question_id=q, sample=i, correct=c, status=status, tool_calls=tool_calls
        )
        for q, cs in correct.items()
        for i, c in enumerate(cs)
    ]


def test_the_final_block_pairs_the_two_policies_by_question():
    # start: q1 half right, q2 wrong, q3 wrong; trained: q1 and q2 right, q3 wrong
    start = rows({"q1": [True, False], "q2": [False, False], "q3": [False, False]}, tool_calls=2)
    trained = rows({"q1": [True, True], "q2": [True, True], "q3": [False, False]})
    block = final_comparison(start, trained, n_boot=2000)
    assert block["questions"] == 3 and block["samples_per_question"] == 2
    assert block["start"] == {"pass@1": pytest.approx(1 / 6), "format_valid": 1.0, "tool_calls": 2}
    assert block["trained"]["pass@1"] == pytest.approx(2 / 3)
    d = block["pass@1_difference"]
    assert d["diff"] == pytest.approx(0.5)  # per question 0.5, 1, 0
    # resamples of 3 questions with differences {0.5, 1, 0}: never below 0, so p = 0 is impossible
    # to beat; the interval holds the mean and stays within [0, 1]
    assert 0.0 <= d["ci"][0] <= 0.5 <= d["ci"][1] <= 1.0
    lines = final_lines(block, {"policy": "/runs/x/policy"})
    assert lines[0].startswith("warm start -> trained, 3 validation questions x 2 samples")
    assert "0.167 -> 0.667   difference +0.500 [" in lines[1]
    assert "tool calls    2.00 -> 1.00" in lines[3]
    assert lines[4] == "  policy        /runs/x/policy" and lines[-1] == f"  {WHAT_THIS_IS}"


def test_two_evaluations_on_different_questions_cannot_be_paired():
    with pytest.raises(ValueError, match="common to both"):
        final_comparison(rows({"q1": [True]}), rows({"q2": [True]}), n_boot=100)
