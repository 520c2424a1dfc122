"""Evaluation metrics on hand-made samples."""

from __future__ import annotations

import math

import pytest

from framework.eval.metrics import (
    entity_comparison,
    histogram,
    mean_ci,
    pass_at_k,
    pass_hat_k,
    summarize_samples,
)


def test_pass_at_k_hand_values():
    assert pass_at_k(3, 0, 1) == 0.0 and pass_at_k(3, 3, 3) == 1.0
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert pass_at_k(3, 1, 2) == pytest.approx(1 - 1 / 3)  # 1 - C(2,2)/C(3,2)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # 1 - C(3,3)/C(5,3)
    assert pass_at_k(4, 2, 3) == 1.0  # fewer wrong samples than k


def test_pass_hat_k_hand_values():
    assert pass_hat_k(3, 3, 3) == 1.0 and pass_hat_k(3, 2, 3) == 0.0
    assert pass_hat_k(4, 3, 2) == pytest.approx(3 / 6)  # C(3,2)/C(4,2)
    assert pass_hat_k(5, 1, 1) == pytest.approx(0.2)
    with pytest.raises(ValueError):
        pass_hat_k(2, 3, 1)


def test_pass_at_1_equals_the_mean_over_samples():
    correct = [[True, False, False], [True, True, True], [False, False, False]]
    s = summarize_samples(correct, k=3)
    assert s.pass1.mean == pytest.approx(4 / 9)
    assert s.pass_k == pytest.approx(2 / 3) and s.pass_hat_k == pytest.approx(1 / 3)
    assert s.questions == 3


def test_mean_ci_hand_value():
    est = mean_ci([1.0, 3.0, 2.0])  # sd 1, n 3
    half = 1.96 / math.sqrt(3)
    assert (
        est.mean == 2.0
        and est.low == pytest.approx(2 - half)
        and est.high == pytest.approx(2 + half)
    )
    rates = mean_ci([0.0, 1.0, 1.0, 0.0])  # 0.5 +- 0.566, clipped
    assert (rates.low, rates.high) == (0.0, 1.0)
    assert mean_ci([0.9, 1.0, 1.0]).high == 1.0  # rates are clipped to [0, 1]
    assert mean_ci([0.4]).low == 0.4 and mean_ci([]).n == 0


def test_entity_comparison_counts_questions_with_both_outcomes():
    matched = [[2, 1, 0], [1, 1, 3], [2, 2], [0, 1]]
    correct = [[True, False, False], [True, False, False], [True, True], [True, False]]
    cmp = entity_comparison(matched, correct)
    assert cmp.questions_with_both == 3  # question 3 has no wrong rollout
    assert (cmp.correct_more, cmp.wrong_more, cmp.ties) == (1, 2, 0)
    assert cmp.mean_matched_correct == pytest.approx((2 + 1 + 0) / 3)
    assert cmp.mean_matched_wrong == pytest.approx((0.5 + 2 + 1) / 3)


def test_histogram_bins():
    assert histogram([0.0, 0.05, 0.5, 0.99, 1.0], bins=4) == [2, 0, 1, 2]
