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


def graded(q: str, sample: int, *, f1: float, share: float, ok: bool, digest: str) -> EvalRecord:
    return EvalRecord(
        dataset="d",
        question_id=q,
        sample=sample,
        correct=False,
        status="ok" if ok else "format_error",
        f1=f1,
        match_rate=share,
        response_digest=digest,
    )


def test_graded_measures_are_paired_where_pass_at_1_sits_at_the_floor():
    # both policies wrong everywhere; the trained one names more entities and answers closer
    start = [
        graded("q1", 0, f1=0.0, share=0.25, ok=True, digest="a"),
        graded("q2", 0, f1=0.0, share=0.0, ok=False, digest="b"),
        graded("q3", 0, f1=0.5, share=0.5, ok=True, digest="c"),
    ]
    trained = [
        graded("q1", 0, f1=0.5, share=0.75, ok=True, digest="x"),
        graded("q2", 0, f1=0.0, share=0.5, ok=True, digest="b"),
        graded("q3", 0, f1=0.5, share=0.5, ok=True, digest="c"),
    ]
    block = final_comparison(start, trained, n_boot=2000)
    assert block["start"]["answer_f1"] == pytest.approx(1 / 6)
    assert block["trained"]["entity_share"] == pytest.approx(7 / 12)
    diffs = block["differences"]
    # per question: share +0.5, +0.5, 0 -> 1/3; F1 +0.5, 0, 0 -> 1/6; format 0, +1, 0 -> 1/3
    assert diffs["entity_share"]["diff"] == pytest.approx(1 / 3)
    assert diffs["answer_f1"]["diff"] == pytest.approx(1 / 6)
    assert diffs["format_valid"]["diff"] == pytest.approx(1 / 3)
    assert 0.0 <= diffs["entity_share"]["ci"][0] <= 1 / 3 <= diffs["entity_share"]["ci"][1]
    assert block["same_rollouts"] == [2, 3]  # q2 and q3 token for token
    lines = final_lines(block, {})
    assert "Pass@1        0.000 -> 0.000   difference +0.000 [+0.000, +0.000]" in lines[1]
    assert "no question's Pass@1 differs" in lines[1] and "detects" not in lines[1]
    assert lines[2].startswith("  format valid  0.667 -> 1.000   difference +0.333 [")
    assert lines[4].startswith("  answer F1     0.167 -> 0.333   difference +0.167 [")
    assert lines[5].startswith("  entity share  0.250 -> 0.583   difference +0.333 [")
    assert "2 of 3 rollouts are the warm start's" in lines[7]


def test_a_trained_policy_that_generates_the_warm_starts_rollouts_is_said_to_be_unchanged():
    same = [graded(q, 0, f1=0.0, share=0.25, ok=True, digest=q) for q in ("q1", "q2")]
    block = final_comparison(same, list(same), n_boot=100)
    assert block["same_rollouts"] == [2, 2]
    assert any(
        line.startswith("  all 2 rollouts are the warm start's") for line in final_lines(block, {})
    )
