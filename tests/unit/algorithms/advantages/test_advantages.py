"""Group-relative advantage estimators: hand-derived values, invariants, loop-vs-vectorised parity."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.advantages.grpo import GRPOAdvantageConfig, grpo_advantage
from framework.algorithms.advantages.reinforce_pp import (
    ReinforcePPBaselineConfig,
    reinforce_pp_baseline_advantage,
)
from framework.algorithms.advantages.rloo import RLOOAdvantageConfig, rloo_advantage
from framework.types import AdvantageInputs

F64 = torch.float64


def _inputs(rewards, ids) -> AdvantageInputs:
    return AdvantageInputs(torch.tensor(rewards, dtype=F64), torch.tensor(ids))


def _close(actual, expected, atol=1e-6):
    # The estimators compute in the default dtype (float32): compare at float32 precision.
    assert_close(actual.double(), torch.as_tensor(expected, dtype=F64), rtol=1e-5, atol=atol)


def grpo(inp, **kw):
    return grpo_advantage(inp, cfg=GRPOAdvantageConfig(name="grpo", **kw))


def dr_grpo(inp, **kw):
    return grpo_advantage(inp, cfg=GRPOAdvantageConfig(name="grpo", scale_by_std=False, **kw))


def rloo(inp):
    return rloo_advantage(inp, cfg=RLOOAdvantageConfig(name="rloo"))


def rpp(inp, **kw):
    return reinforce_pp_baseline_advantage(
        inp, cfg=ReinforcePPBaselineConfig(name="reinforce_pp_baseline", **kw)
    )


# --------------------------------------------------------------------------- hand-derived values


def test_grpo_hand_values_one_group():
    # rewards [1, 0, 0, 1]: mean 0.5; deviations ±0.5, sum of squares 1.0;
    # unbiased var 1/3 -> std sqrt(1/3) = 0.577350; A = ±0.5 / 0.577350 = ±0.866025.
    a = grpo(_inputs([1.0, 0.0, 0.0, 1.0], [0, 0, 0, 0]), epsilon=0.0)
    _close(a, [0.866025, -0.866025, -0.866025, 0.866025])


def test_grpo_hand_values_default_epsilon():
    # same group, eps 1e-6 added to the std: 0.5 / (0.5773503 + 1e-6) = 0.8660239
    a = grpo(_inputs([1.0, 0.0, 0.0, 1.0], [0, 0, 0, 0]))
    v = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    _close(a, [v, -v, -v, v])
    assert abs(v - 0.8660239) < 1e-6


def test_grpo_biased_std():
    # biased var = 1.0 / 4 = 0.25 -> std 0.5; A = ±0.5 / 0.5 = ±1.
    a = grpo(_inputs([1.0, 0.0, 0.0, 1.0], [0, 0, 0, 0]), epsilon=0.0, unbiased_std=False)
    _close(a, [1.0, -1.0, -1.0, 1.0])


def test_grpo_two_interleaved_groups():
    # ids [5, 2, 5, 2, 2], rewards [1, 0.5, 0, 1, 0]
    # group 5: {1, 0}: mean 0.5, unbiased std sqrt(0.5 / 1) = 0.707107 -> ±0.5 / 0.707107 = ±0.707107
    # group 2: {0.5, 1, 0}: mean 0.5, deviations 0, 0.5, -0.5, sum sq 0.5, var 0.5 / 2 = 0.25,
    #          std 0.5 -> A = 0, 1, -1
    a = grpo(_inputs([1.0, 0.5, 0.0, 1.0, 0.0], [5, 2, 5, 2, 2]), epsilon=0.0)
    _close(a, [0.707107, 0.0, -0.707107, 1.0, -1.0])


def test_dr_grpo_is_centered_reward_without_std():
    # group 5 mean 0.5 -> 0.5, -0.5; group 2 mean 0.5 -> 0, 0.5, -0.5 (no division by the std 0.5).
    a = dr_grpo(_inputs([1.0, 0.5, 0.0, 1.0, 0.0], [5, 2, 5, 2, 2]))
    _close(a, [0.5, 0.0, -0.5, 0.5, -0.5])


def test_dr_grpo_differs_from_grpo_when_std_not_one():
    # group {0, 0.5}: Dr. GRPO ±0.25; GRPO ±0.25 / (sqrt(0.125) = 0.353553) = ±0.707107
    inp = _inputs([0.0, 0.5], [1, 1])
    _close(dr_grpo(inp), [-0.25, 0.25])
    _close(grpo(inp, epsilon=0.0), [-0.707107, 0.707107])


def test_rloo_hand_values():
    # group 5 (G=2): G/(G-1) = 2 -> 2 * ±0.5 = ±1;
    #   leave-one-out: 1 - 0 = 1, 0 - 1 = -1.
    # group 2 (G=3): 3/2 * (0, 0.5, -0.5) = 0, 0.75, -0.75;
    #   leave-one-out: 0.5 - (1 + 0)/2 = 0, 1 - (0.5 + 0)/2 = 0.75, 0 - (0.5 + 1)/2 = -0.75.
    a = rloo(_inputs([1.0, 0.5, 0.0, 1.0, 0.0], [5, 2, 5, 2, 2]))
    _close(a, [1.0, 0.0, -1.0, 0.75, -0.75])


def test_rloo_equals_leave_one_out_by_hand():
    # group {0.2, 0.6, 1.0, 0.0} (G = 4):
    #   0.2 - (0.6 + 1.0 + 0.0)/3 = 0.2 - 0.533333 = -0.333333
    #   0.6 - (0.2 + 1.0 + 0.0)/3 = 0.6 - 0.4      =  0.2
    #   1.0 - (0.2 + 0.6 + 0.0)/3 = 1.0 - 0.266667 =  0.733333
    #   0.0 - (0.2 + 0.6 + 1.0)/3 = 0.0 - 0.6      = -0.6
    # and G/(G-1)(r - mean): mean 0.45 -> 4/3 * (-0.25, 0.15, 0.55, -0.45) = the same.
    a = rloo(_inputs([0.2, 0.6, 1.0, 0.0], [3, 3, 3, 3]))
    _close(a, [-1 / 3, 0.2, 0.733333, -0.6])


def test_rloo_group_of_one_gets_zero():
    a = rloo(_inputs([1.0, 1.0, 0.0], [9, 4, 4]))
    # group 9 has no baseline -> 0; group 4 (G=2): ±1.
    _close(a, [0.0, 1.0, -1.0])
    assert not torch.isnan(a).any()


def test_reinforce_pp_without_whitening_is_group_centered():
    a = rpp(_inputs([1.0, 0.5, 0.0, 1.0, 0.0], [5, 2, 5, 2, 2]), whiten=False)
    _close(a, [0.5, 0.0, -0.5, 0.5, -0.5])


def test_reinforce_pp_whitened_over_batch():
    # centered c = [0.5, 0, -0.5, 0.5, -0.5]: batch mean 0; sum of squares 4 * 0.25 = 1.0;
    # Bessel var 1.0 / 4 = 0.25 -> std 0.5; A = c / 0.5 = [1, 0, -1, 1, -1].
    a = rpp(_inputs([1.0, 0.5, 0.0, 1.0, 0.0], [5, 2, 5, 2, 2]), epsilon=0.0)
    _close(a, [1.0, 0.0, -1.0, 1.0, -1.0])


def test_reinforce_pp_whitening_is_across_groups():
    # group 0: {0, 1} -> c = ±0.5; group 1: {0, 0.2} -> c = ±0.1.
    # batch: c = [-0.5, 0.5, -0.1, 0.1], mean 0, sum sq 0.52, Bessel var 0.52/3 = 0.173333,
    # std 0.416333 -> A = c / 0.416333 = [-1.200961, 1.200961, -0.240192, 0.240192]
    a = rpp(_inputs([0.0, 1.0, 0.0, 0.2], [0, 0, 1, 1]), epsilon=0.0)
    s = math.sqrt(0.52 / 3)
    _close(a, [-0.5 / s, 0.5 / s, -0.1 / s, 0.1 / s])
    assert abs(0.5 / s - 1.200961) < 1e-5


def test_variable_group_sizes_with_singletons():
    # ids [3, 0, 0, 8, 8, 8]: group 3 is one rollout (-> 0), group 0 = {1, 0}, group 8 = {1, 1, 0}.
    # GRPO: group 0: ±0.5 / sqrt(0.5) = ±0.707107;
    #       group 8: mean 2/3, deviations 1/3, 1/3, -2/3, sum sq 6/9, var 1/3, std 0.577350
    #       -> 0.333333 / 0.577350 = 0.577350, -0.666667 / 0.577350 = -1.154701
    inp = _inputs([1.0, 1.0, 0.0, 1.0, 1.0, 0.0], [3, 0, 0, 8, 8, 8])
    # (default eps 1e-6 shifts these by < 2e-6, inside the tolerance)
    _close(grpo(inp), [0.0, 0.707107, -0.707107, 0.577350, 0.577350, -1.154701])
    # RLOO: group 0: ±1; group 8: 1 - 0.5 = 0.5, 0.5, 0 - 1 = -1.
    _close(rloo(inp), [0.0, 1.0, -1.0, 0.5, 0.5, -1.0])


# --------------------------------------------------------------------------- invariants

ZERO_MEAN_ESTIMATORS = {"grpo": grpo, "dr_grpo": dr_grpo, "rloo": rloo}
ALL_ESTIMATORS = {**ZERO_MEAN_ESTIMATORS, "reinforce_pp_baseline": rpp}


@pytest.mark.parametrize("name", sorted(ZERO_MEAN_ESTIMATORS))
def test_zero_mean_per_group(name):
    gen = torch.Generator().manual_seed(1)
    ids = torch.tensor([4, 1, 4, 4, 7, 1, 7, 7, 7, 1, 2])
    rewards = torch.rand(len(ids), generator=gen, dtype=F64)
    a = ZERO_MEAN_ESTIMATORS[name](AdvantageInputs(rewards, ids)).double()
    for g in ids.unique():
        assert abs(a[ids == g].sum().item()) < 1e-5, (name, int(g))


@pytest.mark.parametrize("name", sorted(ALL_ESTIMATORS))
@pytest.mark.parametrize("value", [0.0, 1.0, 0.5])
def test_identical_rewards_give_exact_zero(name, value):
    for size in range(1, 9):
        a = ALL_ESTIMATORS[name](_inputs([value] * size, [3] * size))
        assert not torch.isnan(a).any()
        assert torch.equal(a, torch.zeros_like(a)), (name, value, size, a)


@pytest.mark.parametrize("name", sorted(ZERO_MEAN_ESTIMATORS))
@pytest.mark.parametrize("value", [0.3, 0.1, 0.7])
def test_identical_non_dyadic_rewards_give_zero(name, value):
    # E-GRPO's wrong-but-equally-grounded rollouts all get alpha * 1 = 0.3: a group of G = 8 equal
    # rewards carries no signal, so every advantage must be 0 (not an artefact of rounding the mean).
    for size in range(1, 9):
        a = ZERO_MEAN_ESTIMATORS[name](_inputs([value] * size, [0] * size))
        assert not torch.isnan(a).any()
        assert a.abs().max().item() < 1e-6, (name, value, size, a)


def test_grpo_zero_epsilon_is_valid_and_identical_group_gives_zero_not_nan():
    cfg = GRPOAdvantageConfig(name="grpo", epsilon=0.0)
    assert cfg.problems() == []  # epsilon = 0 is an accepted setting
    a = grpo_advantage(_inputs([1.0, 1.0, 1.0, 0.0, 1.0, 0.5], [0, 0, 0, 1, 1, 6]), cfg=cfg)
    # group 0 is constant and group 6 a single rollout: documented as 0 ("its std is defined as
    # 0, never NaN"); group 1 = {0, 1}: ±0.5 / sqrt(0.5) = ±0.707107.
    assert not torch.isnan(a).any(), a
    _close(a, [0.0, 0.0, 0.0, -0.707107, 0.707107, 0.0])


# --------------------------------------------------------------------------- loop parity


def _groups(ids: list[int]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i, g in enumerate(ids):
        out.setdefault(g, []).append(i)
    return out


def ref_grpo(r, ids, *, scale_by_std=True, eps=1e-6, unbiased=True):
    out = [0.0] * len(r)
    for members in _groups(ids).values():
        vals = [r[i] for i in members]
        g = len(vals)
        mean = sum(vals) / g
        if g == 1:
            std = 0.0
        else:
            std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (g - 1 if unbiased else g))
        for i in members:
            out[i] = (r[i] - mean) / (std + eps) if scale_by_std else r[i] - mean
    return out


def ref_rloo(r, ids):
    out = [0.0] * len(r)
    for members in _groups(ids).values():
        if len(members) == 1:
            continue
        for i in members:
            others = [r[j] for j in members if j != i]
            out[i] = r[i] - sum(others) / len(others)
    return out


def ref_rpp(r, ids, *, whiten=True, eps=1e-6):
    centered = ref_grpo(r, ids, scale_by_std=False)
    if not whiten:
        return centered
    n = len(centered)
    mean = sum(centered) / n
    std = math.sqrt(sum((c - mean) ** 2 for c in centered) / (n - 1)) if n > 1 else 0.0
    return [(c - mean) / (std + eps) for c in centered]


def _random_batches(n_batches=20, seed=1234):
    gen = torch.Generator().manual_seed(seed)
    for b in range(n_batches):
        k = int(torch.randint(1, 7, (1,), generator=gen))
        sizes = torch.randint(1, 9, (k,), generator=gen).tolist()
        group_ids = (torch.randperm(50, generator=gen)[:k] * 3 + 1).tolist()  # non-contiguous
        ids = [g for g, s in zip(group_ids, sizes) for _ in range(s)]
        perm = torch.randperm(len(ids), generator=gen).tolist()
        ids = [ids[p] for p in perm]
        if b % 2 == 0:  # binary outcome rewards (many constant groups)
            rewards = torch.randint(0, 2, (len(ids),), generator=gen).double().tolist()
        else:  # continuous rewards
            rewards = torch.rand(len(ids), generator=gen, dtype=F64).tolist()
        yield rewards, ids


def test_parity_with_loop_reference_on_random_batches():
    n = 0
    for rewards, ids in _random_batches():
        inp = AdvantageInputs(torch.tensor(rewards, dtype=F64), torch.tensor(ids))
        _close(grpo(inp), ref_grpo(rewards, ids), atol=1e-5)
        _close(grpo(inp, unbiased_std=False), ref_grpo(rewards, ids, unbiased=False), atol=1e-5)
        _close(dr_grpo(inp), ref_grpo(rewards, ids, scale_by_std=False))
        _close(rloo(inp), ref_rloo(rewards, ids))
        _close(rpp(inp), ref_rpp(rewards, ids), atol=1e-5)
        _close(rpp(inp, whiten=False), ref_rpp(rewards, ids, whiten=False))
        n += 1
    assert n == 20
