"""Paired bootstrap comparison of two evaluations, on hand-made per-question values."""

from __future__ import annotations

import json
import math

import pytest

from framework.eval.paired import (
    PairedResult,
    detectable_difference,
    load_samples,
    paired_bootstrap,
    per_question,
    pooled_per_question,
    questions_needed,
    seed_bootstrap,
)


def _qs(values):
    return {("synth", f"q{i}"): v for i, v in enumerate(values)}


def test_identical_inputs_give_zero_difference_and_a_zero_interval():
    a = _qs([1.0, 0.5, 0.0, 0.25, 0.75])
    r = paired_bootstrap(a, dict(a), n_boot=500)
    assert (r.diff, r.low, r.high) == (0.0, 0.0, 0.0)
    assert r.p_value == 1.0 and not r.excludes_zero and r.n == 5 and r.unpaired == 0


def test_constant_shift_gives_a_degenerate_interval_at_the_shift():
    a = _qs([0.0, 0.25, 0.5, 0.75])
    b = _qs([0.25, 0.5, 0.75, 1.0])  # +0.25 on every question: every resample's mean is 0.25
    r = paired_bootstrap(a, b, n_boot=500)
    assert r.diff == pytest.approx(0.25)
    assert r.low == pytest.approx(0.25) and r.high == pytest.approx(0.25)
    assert r.excludes_zero and r.p_value == 0.0  # no resample at or below 0


def test_hand_computed_four_questions():
    a = _qs([1.0, 0.5, 0.0, 0.25])
    b = _qs([1.0, 1.0, 0.5, 0.0])
    # b - a = [0, 0.5, 0.5, -0.25] -> mean 0.75 / 4 = 0.1875
    # a_mean = 1.75 / 4 = 0.4375, b_mean = 2.5 / 4 = 0.625
    r = paired_bootstrap(a, b, n_boot=2000)
    assert r.diff == pytest.approx(0.1875)
    assert r.a_mean == pytest.approx(0.4375) and r.b_mean == pytest.approx(0.625)
    assert r.diff == pytest.approx(r.b_mean - r.a_mean)
    # a resample's mean lies between the smallest and largest difference
    assert -0.25 <= r.low < r.diff < r.high <= 0.5
    assert r.n == 4 and isinstance(r, PairedResult)


def test_interval_of_a_known_case_matches_the_normal_approximation():
    # 200 questions; b - a is +1 on 30 of them and 0 elsewhere: mean 0.15,
    # sd = sqrt(0.15 * 0.85 * 200 / 199) ~ 0.358, 95% width 2 * 1.96 * sd / sqrt(200) ~ 0.0992
    n, hits = 200, 30
    a = _qs([0.0] * n)
    b = _qs([1.0] * hits + [0.0] * (n - hits))
    r = paired_bootstrap(a, b, n_boot=20000, seed=1)
    sd = math.sqrt(0.15 * 0.85 * n / (n - 1))
    width = 2 * 1.96 * sd / math.sqrt(n)
    assert r.diff == pytest.approx(0.15)
    assert r.low < 0.15 < r.high
    assert (r.high - r.low) == pytest.approx(width, rel=0.15)
    assert r.excludes_zero and r.p_value < 1e-3  # z ~ 6: no resample reaches 0


def test_p_value_is_large_without_an_effect():
    # +1 on 16 questions, -1 on 15: mean 0.005 against a standard error ~ 0.028 (z ~ 0.18)
    n = 200
    a = _qs([0.0] * n)
    b = _qs([1.0] * 16 + [-1.0] * 15 + [0.0] * (n - 31))
    r = paired_bootstrap(a, b, n_boot=5000)
    assert r.diff == pytest.approx(0.005)
    assert r.p_value > 0.5 and not r.excludes_zero
    assert r.low < 0 < r.high


def test_unpaired_questions_are_dropped_and_counted():
    a = _qs([1.0, 0.0, 1.0, 0.0, 1.0])  # q0..q4
    b = {("synth", f"q{i}"): 1.0 for i in range(2, 8)}  # q2..q7
    r = paired_bootstrap(a, b, n_boot=200)
    # common q2, q3, q4: a = [1, 0, 1], b = [1, 1, 1]; q0, q1 only in a, q5..q7 only in b
    assert r.n == 3 and r.unpaired == 5
    assert r.a_mean == pytest.approx(2 / 3) and r.diff == pytest.approx(1 / 3)
    # the same id in another dataset is another question
    other = {("nq", "q0"): 1.0, ("nq", "q1"): 0.0}
    with pytest.raises(ValueError, match="at least 2"):
        paired_bootstrap(a, other)


def test_seeded_determinism_and_independence_from_dict_order():
    a = _qs([1.0, 0.0, 0.5, 0.0, 1.0, 0.25, 0.0, 0.75])
    b = _qs([1.0, 1.0, 0.5, 0.0, 0.0, 0.75, 1.0, 1.0])
    first = paired_bootstrap(a, b, n_boot=1000, seed=7)
    assert paired_bootstrap(a, b, n_boot=1000, seed=7) == first
    reordered = paired_bootstrap(dict(reversed(a.items())), b, n_boot=1000, seed=7)
    assert reordered == first
    other = paired_bootstrap(a, b, n_boot=1000, seed=8)
    assert other.diff == first.diff and (other.low, other.high) != (first.low, first.high)


def test_bad_arguments_are_rejected():
    a = _qs([1.0, 0.0])
    with pytest.raises(ValueError, match="n_boot"):
        paired_bootstrap(a, a, n_boot=0)
    with pytest.raises(ValueError, match="level"):
        paired_bootstrap(a, a, level=1.0)


def _row(qid, correct, rate=None, dataset="synth"):
    return {"dataset": dataset, "question_id": qid, "correct": correct, "match_rate": rate}


def test_per_question_averages_samples_and_skips_missing_values():
    rows = [
        _row("a", True, 0.5),
        _row("a", False, None),
        _row("a", False, 1.0),
        _row("b", True, None),
        _row("b", True, None),
        _row("a", True, 0.0, dataset="nq"),
    ]
    assert per_question(rows) == {
        ("synth", "a"): pytest.approx(1 / 3),
        ("synth", "b"): 1.0,
        ("nq", "a"): 1.0,
    }
    # match_rate: (0.5 + 1.0) / 2 for synth/a; synth/b has no value at all and is left out
    assert per_question(rows, key="match_rate") == {("synth", "a"): 0.75, ("nq", "a"): 0.0}
    with pytest.raises(ValueError, match="turns"):
        per_question(rows, key="turns")


def test_pooled_per_question_averages_seeds_over_common_questions():
    run1 = {("s", "q1"): 1.0, ("s", "q2"): 0.0, ("s", "q3"): 0.5}
    run2 = {("s", "q2"): 0.5, ("s", "q1"): 0.0}
    assert pooled_per_question([run1, run2]) == {("s", "q1"): 0.5, ("s", "q2"): 0.25}
    assert pooled_per_question([run1]) == run1
    with pytest.raises(ValueError, match="no runs"):
        pooled_per_question([])


def test_load_samples_round_trip_and_paired_comparison(tmp_path):
    rows = [_row(f"q{i}", i % 2 == 0) for i in range(4)]
    (tmp_path / "samples.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    loaded = load_samples(tmp_path)
    assert loaded == rows
    a = per_question(loaded)
    b = {q: 1.0 for q in a}
    r = paired_bootstrap(a, b, n_boot=100)
    assert r.diff == pytest.approx(0.5) and r.a_mean == 0.5 and r.b_mean == 1.0


def test_load_samples_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"samples\.jsonl.*Fix:"):
        load_samples(tmp_path)
    (tmp_path / "samples.jsonl").write_text('{"dataset": "s"}\n{"dataset": \n')
    with pytest.raises(ValueError, match=r"line 2 .*Fix:"):
        load_samples(tmp_path)
    (tmp_path / "samples.jsonl").write_text('{"dataset": "s"}\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"got a list on line 2"):
        load_samples(tmp_path)


# z_0.975 + z_0.8 = 1.959964 + 0.841621 = 2.801585 (standard normal quantiles)
Z_SUM = 2.801585


def test_detectable_difference_is_2_8_standard_errors_at_the_defaults():
    # docs/study.md item 18: SD 0.174 over 100 questions -> 2.801585 * 0.0174 = 0.04875
    assert detectable_difference(0.174, 100) == pytest.approx(0.048748, abs=1e-6)
    # level 0.9, power 0.5: z_0.95 + z_0.5 = 1.644854 + 0 -> 1.644854 * 1 / 2
    assert detectable_difference(1.0, 4, level=0.9, power=0.5) == pytest.approx(0.822427, 1e-6)
    assert detectable_difference(0.0, 10) == 0.0


def test_questions_needed_inverts_detectable_difference():
    # (2.801585 * 0.174 / 0.018) ** 2 = 733.4 -> 734 (item 18's "about 730")
    assert questions_needed(0.174, 0.018) == 734
    assert questions_needed(0.174, -0.018) == 734  # either sign
    n = questions_needed(0.3, 0.05)
    assert detectable_difference(0.3, n) <= 0.05 < detectable_difference(0.3, n - 1)
    assert questions_needed(0.01, 1.0) == 2  # never fewer than a bootstrap needs


def test_paired_result_carries_the_sd_of_the_differences():
    a, b = _qs([0.0, 0.0, 0.0]), _qs([1.0, 0.0, 0.5])
    r = paired_bootstrap(a, b, n_boot=200)
    assert r.sd == pytest.approx(0.5)  # differences 1, 0, 0.5: sample SD 0.5
    assert r.detectable == pytest.approx(Z_SUM * 0.5 / math.sqrt(3), rel=1e-6)
    assert math.isnan(PairedResult(0.0, 0.0, 0.0, 5, 1.0, 0.0, 0.0).detectable)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: detectable_difference(0.1, 1), "n >= 2"),
        (lambda: detectable_difference(-0.1, 10), "sd >= 0"),
        (lambda: detectable_difference(0.1, 10, level=1.0), "level=1.0"),
        (lambda: detectable_difference(0.1, 10, power=0.0), "power=0.0"),
        (lambda: questions_needed(0.1, 0.0), "non-zero difference"),
        (lambda: questions_needed(float("nan"), 0.1), "finite sd"),
    ],
)
def test_detectable_difference_rejects_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# -- seed_bootstrap: resample each arm's seeds, then the questions ----------------------------------


def test_seed_bootstrap_with_one_run_per_arm_is_the_paired_bootstrap():
    a = _qs([0.0, 0.25, 0.5, 1.0, 0.75, 0.0])
    b = _qs([0.5, 0.25, 1.0, 1.0, 0.25, 0.5])
    assert seed_bootstrap([a], [b], n_boot=3000, seed=7) == paired_bootstrap(
        a, b, n_boot=3000, seed=7
    )


def test_seed_bootstrap_of_identical_seeds_is_the_paired_bootstrap_of_one():
    # copies of one run: every draw of seeds averages to that run, and the question draws are the
    # paired bootstrap's (same generator), so the interval is exactly the same
    a = _qs([0.0, 0.25, 0.5, 1.0])
    b = _qs([0.5, 0.75, 0.5, 1.0])
    got = seed_bootstrap([a, a], [b, b, b], n_boot=2000, seed=3)
    assert got == paired_bootstrap(a, b, n_boot=2000, seed=3)


def test_seed_bootstrap_hand_derived_two_disagreeing_seeds():
    # a: one run, 0 everywhere. b: seed 0 right on every question, seed 1 on none, so every
    # question of b pools to 0.5 and resampling questions changes nothing. Drawing b's 2 seeds with
    # replacement gives seed 0 a share of 0, 1/2 or 1 with probability 1/4, 1/2, 1/4: the
    # resampled difference is 0, 0.5 or 1, so the 95% interval is [0, 1] and the p-value
    # 2 * P(diff <= 0) = 1/2. Holding the seeds fixed (paired_bootstrap of the pooled means)
    # the interval is the single point 0.5.
    a = _qs([0.0] * 5)
    b0, b1 = _qs([1.0] * 5), _qs([0.0] * 5)
    got = seed_bootstrap([a], [b0, b1], n_boot=20000, seed=0)
    assert got.diff == pytest.approx(0.5) and got.n == 5
    assert (got.low, got.high) == (0.0, 1.0)
    assert got.p_value == pytest.approx(0.5, abs=0.03)
    fixed = paired_bootstrap(a, pooled_per_question([b0, b1]), n_boot=2000)
    assert (fixed.low, fixed.high, fixed.p_value) == (0.5, 0.5, 0.0)


def test_seed_bootstrap_drops_questions_missing_from_any_run():
    a = _qs([0.0, 0.0, 0.0])
    b_full, b_short = _qs([1.0, 1.0, 1.0]), {("synth", "q0"): 1.0, ("synth", "q1"): 1.0}
    got = seed_bootstrap([a], [b_full, b_short], n_boot=500)
    assert got.n == 2 and got.unpaired == 1 and got.diff == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("a_runs", "b_runs", "kwargs", "match"),
    [
        ([], [_qs([1.0, 0.0])], {}, "at least one per arm"),
        ([_qs([1.0])], [_qs([1.0])], {}, "at least 2"),
        ([_qs([1.0, 0.0])], [_qs([1.0, 0.0])], {"n_boot": 0}, "n_boot"),
        ([_qs([1.0, 0.0])], [_qs([1.0, 0.0])], {"level": 1.0}, "level"),
    ],
)
def test_seed_bootstrap_rejects_bad_inputs(a_runs, b_runs, kwargs, match):
    with pytest.raises(ValueError, match=rf"\[seed_bootstrap\].*{match}"):
        seed_bootstrap(a_runs, b_runs, **kwargs)


# -- clustered bootstrap, power, variance components ----------------------------------------------
def test_cluster_bootstrap_resamples_answers_not_questions():
    from framework.eval.paired import cluster_bootstrap

    # cluster X: two questions with difference 1; cluster Y: one with 0. Resamples of 2 clusters:
    # XX -> 1, XY / YX -> 2/3, YY -> 0 (1/4, 1/2, 1/4): interval [0, 1], p = 2 * 1/4
    a = {("d", "x1"): 0.0, ("d", "x2"): 0.0, ("d", "y"): 0.0}
    b = {("d", "x1"): 1.0, ("d", "x2"): 1.0, ("d", "y"): 0.0}
    clusters = {("d", "x1"): "X", ("d", "x2"): "X", ("d", "y"): "Y"}
    r = cluster_bootstrap(a, b, clusters, n_boot=20000)
    assert r.diff == pytest.approx(2 / 3) and r.n == 3
    assert (r.low, r.high) == pytest.approx((0.0, 1.0))
    assert r.p_value == pytest.approx(0.5, abs=0.02)
    # sd: the independent-question SD with the same standard error; se of {1, 2/3, 0} draws
    expected_se = math.sqrt(0.25 * 1 + 0.5 * (2 / 3) ** 2 - (0.25 + 1 / 3) ** 2)
    assert r.se == pytest.approx(expected_se, rel=0.03)
    assert r.sd == pytest.approx(r.se * math.sqrt(3))
    # every question its own cluster: the same distribution as the question bootstrap
    own = cluster_bootstrap(a, b, {}, n_boot=20000)
    plain = paired_bootstrap(a, b, n_boot=20000)
    assert own.p_value == pytest.approx(plain.p_value, abs=0.02)  # 2 * (1/3)^3
    with pytest.raises(ValueError, match="at least 2"):
        cluster_bootstrap(a, b, dict.fromkeys(a, "same"))


def test_power_at_matches_the_normal_approximation():
    from framework.eval.paired import power_at

    assert power_at(0.0, 0.1) == pytest.approx(0.05, abs=1e-9)  # the test's level
    # 2.8 standard errors: 80% power (plus a negligible far tail)
    assert power_at(2.801585 * 0.02, 0.02) == pytest.approx(0.80, abs=1e-3)
    assert power_at(-0.05, 0.02) == power_at(0.05, 0.02)
    assert math.isnan(power_at(0.05, 0.0)) and math.isnan(power_at(0.05, float("nan")))


def test_variance_components_split_between_and_within():
    from framework.eval.paired import variance_components

    # no within-question spread: all variance is between questions (d = 1, 0 -> var 0.5)
    vc = variance_components({"q1": [0, 0], "q2": [1, 1]}, {"q1": [1, 1], "q2": [1, 1]})
    assert (vc.between, vc.within, vc.questions) == (pytest.approx(0.5), 0.0, 2)
    # every question 0/1 for both: d = 0, 0; s2 = 0.5 each -> within 1.0, between floored at 0
    vc = variance_components({"q1": [0, 1], "q2": [0, 1]}, {"q1": [0, 1], "q2": [1, 0]})
    assert vc.between == 0.0 and vc.within == pytest.approx(1.0)
    assert vc.se(questions=2, samples=2) == pytest.approx(0.5)  # sqrt((0 + 1 / 2) / 2)
    assert vc.se(questions=4, samples=1) == pytest.approx(0.5)  # same budget, same SE here
    with pytest.raises(ValueError, match="at least 2"):
        variance_components({"q1": [0]}, {"q1": [1]})
