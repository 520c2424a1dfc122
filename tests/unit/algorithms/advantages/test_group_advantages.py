"""MC-GRPO, NGRPO and A-GRAE advantages: hand-derived values, the papers' public code on worked
examples, invariants, and loop-vs-vectorised parity on random batches."""

from __future__ import annotations

import math
import re
import statistics

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.advantages.a_grae import AGRAEAdvantageConfig, a_grae_advantage
from framework.algorithms.advantages.grpo import GRPOAdvantageConfig, grpo_advantage
from framework.algorithms.advantages.mc_grpo import (
    MCGRPOAdvantageConfig,
    mc_grpo_advantage,
    mc_grpo_pivot,
)
from framework.algorithms.advantages.ngrpo import NGRPOAdvantageConfig, ngrpo_advantage
from framework.algorithms.stats.group import group_median
from framework.types import AdvantageInputs

F64 = torch.float64


def _inputs(rewards, ids) -> AdvantageInputs:
    return AdvantageInputs(torch.tensor(rewards, dtype=F64), torch.tensor(ids))


def _close(actual, expected, atol=1e-6, rtol=1e-5):
    assert_close(actual.double(), torch.as_tensor(expected, dtype=F64), rtol=rtol, atol=atol)


def mc(inp, **kw):
    return mc_grpo_advantage(inp, cfg=MCGRPOAdvantageConfig(name="mc_grpo", **kw))


def ng(inp, **kw):
    return ngrpo_advantage(inp, cfg=NGRPOAdvantageConfig(name="ngrpo", **kw))


def ag(inp, **kw):
    return a_grae_advantage(inp, cfg=AGRAEAdvantageConfig(name="a_grae", **kw))


def grpo(inp, **kw):
    return grpo_advantage(inp, cfg=GRPOAdvantageConfig(name="grpo", **kw))


def _groups(ids: list[int]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i, g in enumerate(ids):
        out.setdefault(g, []).append(i)
    return out


def _random_batches(n_batches=20, seed=4321, max_size=9):
    """Non-contiguous ids, shuffled rows, groups of 1..max_size; binary or continuous rewards."""
    gen = torch.Generator().manual_seed(seed)
    for b in range(n_batches):
        k = int(torch.randint(1, 7, (1,), generator=gen))
        sizes = torch.randint(1, max_size + 1, (k,), generator=gen).tolist()
        group_ids = (torch.randperm(50, generator=gen)[:k] * 3 + 1).tolist()
        ids = [g for g, s in zip(group_ids, sizes) for _ in range(s)]
        perm = torch.randperm(len(ids), generator=gen).tolist()
        ids = [ids[p] for p in perm]
        if b % 2 == 0:
            rewards = torch.randint(0, 2, (len(ids),), generator=gen).double().tolist()
        else:
            rewards = torch.rand(len(ids), generator=gen, dtype=F64).tolist()
        yield rewards, ids


# --------------------------------------------------------------------------- group_median


def test_group_median_odd_even_interleaved():
    # ids [4, 9, 4, 9, 4, 9, 9]
    # group 4: {0.5, 0.1, 0.9} -> sorted [0.1, 0.5, 0.9] -> 0.5
    # group 9: {3, 1, 2, 0} -> sorted [0, 1, 2, 3] -> lower median 1 (torch.median's choice)
    v = torch.tensor([0.5, 3.0, 0.1, 1.0, 0.9, 2.0, 0.0], dtype=F64)
    ids = torch.tensor([4, 9, 4, 9, 4, 9, 9])
    _close(group_median(v, ids), [0.5, 1.0, 0.5, 1.0, 0.5, 1.0, 1.0])


def test_group_median_matches_torch_median_per_group():
    for rewards, ids in _random_batches():
        v, gi = torch.tensor(rewards, dtype=F64), torch.tensor(ids)
        med = group_median(v, gi)
        for g in gi.unique():
            assert torch.equal(med[gi == g], v[gi == g].median().expand(int((gi == g).sum())))


# --------------------------------------------------------------------------- MC-GRPO


def test_mc_grpo_hand_values_odd_group():
    # rewards [0.2, 1.0, 0.5, 0.0, 0.6] (G + 1 = 5): sorted [0, 0.2, 0.5, 0.6, 1.0] -> median 0.5
    # deviations [-0.3, 0.5, 0, -0.5, 0.1]; |dev| sorted [0, 0.1, 0.3, 0.5, 0.5] -> MAD 0.3
    # A = dev / (0.3 + 1e-3 = 0.301) = [-0.996678, 1.661130, 0, -1.661130, 0.332226]
    # The public code (lotusroot-kim/MC-GRPO, grpo_trainer_gsm.py: rewards.view(-1, G+1).median,
    # MAD + 1e-3, no std scaling) gives the same five numbers on this group (checked out of tree).
    a = mc(_inputs([0.2, 1.0, 0.5, 0.0, 0.6], [7] * 5))
    _close(a, [-0.3 / 0.301, 0.5 / 0.301, 0.0, -0.5 / 0.301, 0.1 / 0.301])
    assert abs(0.5 / 0.301 - 1.661130) < 1e-6
    assert a[2].item() == 0.0  # the pivot: exactly 0


def test_mc_grpo_binary_group_mad_zero():
    # [1, 0, 0, 0, 1]: sorted [0, 0, 0, 1, 1] -> median 0; |dev| = [1, 0, 0, 0, 1] -> MAD 0
    # A = dev / (0 + 1e-3): the two correct rollouts get 1000, the wrong ones (= median) 0.
    # The public code gives [1000, 0, 0, 0, 1000] too (float32: 999.99994).
    a = mc(_inputs([1.0, 0.0, 0.0, 0.0, 1.0], [3] * 5))
    _close(a, [1000.0, 0.0, 0.0, 0.0, 1000.0])
    # custom epsilon: 1 / 0.01 = 100
    _close(mc(_inputs([1.0, 0.0, 0.0, 0.0, 1.0], [3] * 5), epsilon=0.01), [100, 0, 0, 0, 100])


def test_mc_grpo_compensate_zeros_matches_public_code():
    # the public code multiplies a group's nonzero advantages by (group size / nonzero count):
    # group 7 above: 4 of 5 nonzero -> x 1.25 -> [-1.245847, 2.076412, 0, -2.076412, 0.415282]
    # binary group: 2 of 5 nonzero -> x 2.5 -> 2500 (public code: 2499.9998 in float32)
    inp = _inputs([0.2, 1.0, 0.5, 0.0, 0.6, 1.0, 0.0, 0.0, 0.0, 1.0], [7] * 5 + [3] * 5)
    a = mc(inp, compensate_zeros=True)
    k = 1.25 / 0.301
    _close(a, [-0.3 * k, 0.5 * k, 0.0, -0.5 * k, 0.1 * k, 2500.0, 0.0, 0.0, 0.0, 2500.0])
    assert abs(0.5 * k - 2.076412) < 1e-6


def test_mc_grpo_even_group_uses_lower_median():
    # [0, 1, 0.4, 0.8]: sorted [0, 0.4, 0.8, 1] -> lower median 0.4 (index (4 - 1) // 2 = 1)
    # |dev| = [0.4, 0.6, 0, 0.4] -> sorted [0, 0.4, 0.4, 0.6] -> lower median 0.4
    # A = dev / 0.401 = [-0.997506, 1.496259, 0, 0.997506]
    a = mc(_inputs([0.0, 1.0, 0.4, 0.8], [1] * 4))
    _close(a, [-0.4 / 0.401, 0.6 / 0.401, 0.0, 0.4 / 0.401])
    assert abs(0.6 / 0.401 - 1.496259) < 1e-6


def test_mc_grpo_median_resists_an_outlier_where_grpo_flips_sign():
    # [0.1, 0.2, 0.3, 0.4, 10]: mean 2.2, so GRPO gives 0.4 (above 4 of 5 rewards) a negative sign.
    # median 0.3; |dev| = [0.2, 0.1, 0, 0.1, 9.7] -> sorted [0, 0.1, 0.1, 0.2, 9.7] -> MAD 0.1
    # A(0.4) = 0.1 / 0.101 = 0.990099 > 0; A(10) = 9.7 / 0.101 = 96.039604
    inp = _inputs([0.1, 0.2, 0.3, 0.4, 10.0], [0] * 5)
    assert grpo(inp)[3] < 0
    _close(mc(inp), [-0.2 / 0.101, -0.1 / 0.101, 0.0, 0.1 / 0.101, 9.7 / 0.101])


def test_mc_grpo_pivot_one_per_group_first_in_batch_order_and_zero():
    # ids [2, 5, 2, 2, 5, 5, 5, 2, 2]; group 2 rewards [0, 1, 0, 1, 0] -> median 0 at rows 0, 2, 8;
    # pivot = row 0 (first). Group 5 rewards [0.5, 0.5, 0.2, 0.5] -> lower median 0.5 at rows 1, 4, 6
    # -> pivot = row 1. (torch.median's own index among ties is unspecified, e.g. 3 for [1,0,0,0,1].)
    rewards = [0.0, 0.5, 1.0, 0.0, 0.5, 0.2, 0.5, 1.0, 0.0]
    ids = [2, 5, 2, 2, 5, 5, 5, 2, 2]
    inp = _inputs(rewards, ids)
    pivot = mc_grpo_pivot(inp.rewards, inp.group_index)
    assert pivot.tolist() == [True, True, False, False, False, False, False, False, False]
    a = mc(inp)
    # every rollout at the median gets 0, not only the pivot
    assert [i for i, x in enumerate(a.tolist()) if x == 0.0] == [0, 1, 3, 4, 6, 8]


def test_mc_grpo_pivot_invariants_on_random_batches():
    for rewards, ids in _random_batches():
        inp = _inputs(rewards, ids)
        pivot = mc_grpo_pivot(inp.rewards, inp.group_index)
        a = mc(inp)
        for g, members in _groups(ids).items():
            chosen = [i for i in members if pivot[i]]
            assert len(chosen) == 1, (g, chosen)
            med = statistics.median_low([rewards[i] for i in members])
            assert chosen[0] == min(i for i in members if rewards[i] == med)
        assert torch.all(a[pivot] == 0)


def test_mc_grpo_shift_and_scale_invariance():
    gen = torch.Generator().manual_seed(7)
    r = torch.rand(9, generator=gen, dtype=F64)
    ids = torch.tensor([0] * 9)
    base = mc(AdvantageInputs(r, ids))
    # a shift moves the median by the same amount and leaves the deviations and MAD unchanged
    _close(mc(AdvantageInputs(r + 3.0, ids)), base, atol=1e-9)
    # (c r - c m) / (c MAD + c eps) = (r - m) / (MAD + eps): exact when eps scales with r
    _close(mc(AdvantageInputs(5.0 * r, ids), epsilon=5e-3), base, atol=1e-9)
    # with a fixed eps, only approximately (the MAD here is ~0.2, so eps shifts it by < 1%)
    _close(mc(AdvantageInputs(5.0 * r, ids)), base, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("value", [0.0, 1.0, 0.3])
def test_mc_grpo_constant_group_gives_exact_zero(value):
    for size in range(1, 10):
        a = mc(_inputs([value] * size, [4] * size))
        assert torch.equal(a, torch.zeros_like(a)), (value, size, a)


def ref_mc(r, ids, eps=1e-3):
    out = [0.0] * len(r)
    for members in _groups(ids).values():
        vals = [r[i] for i in members]
        med = statistics.median_low(vals)
        mad = statistics.median_low([abs(v - med) for v in vals])
        for i in members:
            out[i] = (r[i] - med) / (mad + eps)
    return out


def test_mc_grpo_parity_with_loop_reference():
    for rewards, ids in _random_batches():
        _close(mc(_inputs(rewards, ids)), ref_mc(rewards, ids), rtol=1e-9, atol=1e-9)
        _close(mc(_inputs(rewards, ids), epsilon=0.1), ref_mc(rewards, ids, 0.1), atol=1e-9)


# --------------------------------------------------------------------------- NGRPO


def test_ngrpo_hand_values_match_public_code():
    # G = 4, one virtual rollout of reward 1, Bessel std over the G + 1 = 5 values:
    # group 0 all wrong {0,0,0,0 | 1}: mean 0.2; sum sq 4 * 0.04 + 0.64 = 0.8; var 0.8 / 4 = 0.2;
    #   std 0.447214 -> A = -0.2 / 0.447214 = -0.447214 (GRPO: 0)
    # group 1 {1,0,0,0 | 1}: mean 0.4; sum sq 2 * 0.36 + 3 * 0.16 = 1.2; var 0.3; std 0.547723
    #   -> A = 0.6 / 0.547723 = 1.095445, -0.4 / 0.547723 = -0.730297
    # group 2 all correct {1,1,1,1 | 1}: constant -> 0
    # The public code (nangongrui-ngr/NGRPO, compute_ngrpo_outcome_advantage, max_reward 1,
    # add_max_reward_num 1) gives the same numbers on this batch (checked out of tree, float32).
    a = ng(_inputs([0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1], [0] * 4 + [1] * 4 + [2] * 4))
    s0, s1 = math.sqrt(0.2), math.sqrt(0.3)
    expected = [-0.2 / s0] * 4 + [0.6 / s1, -0.4 / s1, -0.4 / s1, -0.4 / s1] + [0.0] * 4
    _close(a, expected)
    assert abs(0.2 / s0 - 0.447214) < 1e-6 and abs(0.6 / s1 - 1.095445) < 1e-6


def test_ngrpo_biased_std_and_two_virtual_rollouts():
    # biased: {0,0,0,0 | 1}: var 0.8 / 5 = 0.16 -> std 0.4 -> A = -0.2 / 0.4 = -0.5
    _close(ng(_inputs([0.0] * 4, [0] * 4), unbiased_std=False), [-0.5] * 4)
    # two virtual: {0,0,0,0 | 1,1}: mean 1/3; sum sq 4/9 + 2 * 4/9 = 4/3; var (4/3) / 5 = 0.266667;
    # std 0.516398 -> A = -0.333333 / 0.516398 = -0.645497
    a = ng(_inputs([0.0] * 4, [0] * 4), num_virtual=2)
    _close(a, [-(1 / 3) / math.sqrt(4 / 15)] * 4)
    assert abs((1 / 3) / math.sqrt(4 / 15) - 0.645497) < 1e-6


def test_ngrpo_all_wrong_negative_all_correct_zero():
    a = ng(_inputs([0.0] * 8 + [1.0] * 8, [5] * 8 + [6] * 8))
    assert torch.all(a[:8] < 0)
    assert torch.equal(a[8:], torch.zeros(8, dtype=a.dtype))
    # partial credit below the virtual reward: still all negative
    assert torch.all(ng(_inputs([0.3, 0.3, 0.1], [1, 1, 1])) < 0)


@pytest.mark.parametrize("v", [1.0, 0.3, 0.7])
def test_ngrpo_group_equal_to_virtual_reward_gives_exact_zero(v):
    for size in range(1, 9):
        a = ng(_inputs([v] * size, [0] * size), virtual_reward=v)
        assert torch.equal(a, torch.zeros_like(a)), (v, size, a)


def test_ngrpo_singleton_group():
    # {0 | 1}: mean 0.5; sum sq 0.5; var 0.5 / 1; std 0.707107 -> A = -0.5 / 0.707107 = -0.707107
    # {1 | 1}: constant -> 0
    _close(ng(_inputs([0.0, 1.0], [3, 4])), [-0.5 / math.sqrt(0.5), 0.0])


def test_ngrpo_group_sum_is_minus_the_virtual_advantage():
    # sum over the real rollouts of (r - mu) = -(v - mu): group 1 above sums to
    # 1.095445 - 3 * 0.730297 = -1.095445 = -(1 - 0.4) / 0.547723
    a = ng(_inputs([1.0, 0.0, 0.0, 0.0], [0] * 4))
    assert abs(a.sum().item() + 0.6 / math.sqrt(0.3)) < 1e-5


def test_ngrpo_equals_grpo_over_group_plus_virtual_rows():
    for num_virtual in (1, 2):
        for rewards, ids in _random_batches():
            extra_ids = [g for g in sorted(set(ids)) for _ in range(num_virtual)]
            aug = _inputs(rewards + [1.0] * len(extra_ids), ids + extra_ids)
            expected = grpo(aug)[: len(rewards)]
            _close(ng(_inputs(rewards, ids), num_virtual=num_virtual), expected, atol=1e-5)


def test_ngrpo_without_virtual_rollouts_is_grpo():
    for rewards, ids in _random_batches():
        inp = _inputs(rewards, ids)
        _close(ng(inp, num_virtual=0), grpo(inp), atol=1e-9)


# --------------------------------------------------------------------------- A-GRAE

# two groups of G = 4, binary rewards; batch accuracy acc = 4 / 8 = 0.5
#   g0 [1,0,0,0]: mean 0.25, std 0.5 -> GRPO 1.5, -0.5; s = sqrt(0.25) = 0.5;
#       w = 0.5 * 0.5 / (1 - 0.5) + 0.5 * 0.5 / 0.5 = 1 -> 1.5, -0.5; positive x min(1, 0.5) -> 0.75
#   g1 [1,1,1,0]: mean 0.75, std 0.5 -> GRPO 0.5, -1.5; s = 0.866025;
#       w = 0.25 / 0.133975 + 0.25 / 0.866025 = 1.866025 + 0.288675 = 2.154701
#       -> 0.5 * 2.154701 * 0.5 = 0.538675 (positive, x 0.5); -1.5 * 2.154701 = -3.232051
TWO_GROUPS = ([1, 0, 0, 0, 1, 1, 1, 0], [0] * 4 + [1] * 4)


def test_a_grae_hand_values():
    s = math.sqrt(0.75)
    w1 = 0.25 / (1 - s) + 0.25 / s
    assert abs(w1 - 2.154701) < 1e-6
    a = ag(_inputs(*TWO_GROUPS), epsilon=1e-12)
    _close(a, [0.75, -0.5, -0.5, -0.5] + [0.25 * w1] * 3 + [-1.5 * w1])


def test_a_grae_matches_public_code():
    # Yu7-code/A-GRAE, compute_grpo_outcome_advantage with its A-GRAE branch (grpo_weight == 2.0,
    # alpha 1, epsilon 1e-6), run out of tree on these batches (float32); the eps terms move the
    # 6th digit of the hand values above.
    _close(
        ag(_inputs(*TWO_GROUPS)),
        [0.749997, -0.499998, -0.499998, -0.499998, 0.538670, 0.538670, 0.538670, -3.232023],
        rtol=1e-6,
    )
    # four groups: acc = 6 / 16 = 0.375 (= the code's mean of group means 0.25, 0.75, 0, 0.5)
    #   g0 mean 0.25: w = 1 -> 1.5 * 0.375 = 0.5625, -0.5
    #   g1 mean 0.75: w = 0.3125 / 0.133975 + 0.1875 / 0.866025 = 2.549038
    #       -> 0.5 * 2.549038 * 0.375 = 0.477945, -1.5 * 2.549038 = -3.823557
    #   g2 all wrong: 0
    #   g3 mean 0.5: GRPO +-0.866025; w = 0.3125 / 0.292893 + 0.1875 / 0.707107 = 1.332107
    #       -> 0.866025 * 1.332107 * 0.375 = 0.432622, -1.153653
    rewards = [1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 0, 0]
    ids = [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4
    code = [0.5624977, -0.4999980, -0.4999980, -0.4999980]
    code += [0.4779403, 0.4779403, 0.4779403, -3.8235228] + [0.0] * 4
    code += [0.4326123, 0.4326123, -1.1536328, -1.1536328]
    _close(ag(_inputs(rewards, ids)), code, rtol=1e-6)


def test_a_grae_with_both_parts_off_is_grpo():
    for rewards, ids in _random_batches():
        inp = _inputs(rewards, ids)
        off = ag(inp, suppress_positive=False, difficulty_curriculum=False)
        _close(off, grpo(inp), atol=1e-12)
        drgrpo = ag(inp, scale_by_std=False, suppress_positive=False, difficulty_curriculum=False)
        _close(drgrpo, grpo(inp, scale_by_std=False), atol=1e-12)


def test_a_grae_keeps_grpo_signs_and_constant_groups_zero():
    for rewards, ids in _random_batches():
        inp = _inputs(rewards, ids)
        a, base = ag(inp), grpo(inp)
        assert not torch.isnan(a).any()
        # negatives stay negative, zeros stay zero; positives stay positive unless the batch
        # accuracy is 0 (continuous rewards below the threshold), which scales them to exactly 0
        assert torch.all(a[base < 0] < 0) and torch.all(a[base == 0] == 0)
        acc = (inp.rewards >= 1.0).double().mean()
        assert torch.all(a[base > 0] > 0) if acc > 0 else torch.all(a[base > 0] == 0)
        for members in _groups(ids).values():
            if len({rewards[i] for i in members}) == 1:
                assert all(a[i].item() == 0.0 for i in members)


def test_a_grae_suppresses_positives_by_batch_accuracy():
    # E-GRPO-style partial credit, no correct answer: acc = 0 -> positive advantages vanish,
    # negatives keep their GRPO value (curriculum off to isolate the step)
    inp = _inputs([0.3, 0.0, 0.15, 0.0], [0] * 4)
    a = ag(inp, difficulty_curriculum=False)
    base = grpo(inp)
    _close(a, torch.where(base > 0, torch.zeros_like(base), base))
    # correct_threshold 0.3 counts the 0.3 as correct: acc = 1/4 -> positives x 0.25;
    # positive_alpha 0.5 -> x min(1, 0.25 / 0.5) = 0.5
    a = ag(inp, difficulty_curriculum=False, correct_threshold=0.3)
    _close(a, torch.where(base > 0, 0.25 * base, base))
    a = ag(inp, difficulty_curriculum=False, correct_threshold=0.3, positive_alpha=0.5)
    _close(a, torch.where(base > 0, 0.5 * base, base))


def test_a_grae_weight_is_one_at_quarter_success_rate():
    # s = 0.5: w = 0.5 (1 - acc) / 0.5 + 0.5 acc / 0.5 = 1 whatever acc; the filler groups (all
    # correct, all wrong) get 0 and only move acc
    for filler in ([1.0] * 12, [0.0] * 12, []):
        ids = [0] * 4 + [1] * len(filler)
        inp = _inputs([1.0, 0.0, 0.0, 0.0, *filler], ids)
        a = ag(inp, epsilon=1e-12, suppress_positive=False)
        _close(a[:4], [1.5, -0.5, -0.5, -0.5])


def test_a_grae_difficulty_focus_moves_from_easy_to_hard_as_accuracy_grows():
    # easy group [1,1,1,0] (mean 0.75) and hard group [1,0,0,0,0,0,0,0] (mean 0.125); filler groups
    # of all-wrong or all-correct rollouts (advantage 0) set the batch accuracy.
    # acc = 4/32 = 0.125: w_easy = 0.4375 / 0.133975 + 0.0625 / 0.866025 = 3.337713,
    #   w_hard = 0.4375 / 0.646447 + 0.0625 / 0.353553 = 0.853553 -> ratio 0.255730 (easy focus)
    # acc = 44/52 = 0.846154: w_easy = 0.076923 / 0.133975 + 0.423077 / 0.866025 = 1.062689,
    #   w_hard = 0.076923 / 0.646447 + 0.423077 / 0.353553 = 1.315636 -> ratio 1.238026 (hard)
    easy, hard = [1.0, 1.0, 1.0, 0.0], [1.0] + [0.0] * 7
    ratios = []
    for filler in ([0.0] * 20, [0.0] * 4, [1.0] * 8, [1.0] * 40):
        rewards = easy + hard + filler
        ids = [0] * 4 + [1] * 8 + [2] * len(filler)
        inp = _inputs(rewards, ids)
        a, base = ag(inp, suppress_positive=False), grpo(inp)
        w_easy, w_hard = (a[3] / base[3]).item(), (a[5] / base[5]).item()
        ratios.append(w_hard / w_easy)
    assert ratios == sorted(ratios) and ratios[0] < 1 < ratios[-1], ratios
    assert abs(ratios[0] - 0.255730) < 1e-5
    assert abs(ratios[-1] - 1.238026) < 1e-5


def ref_a_grae(r, ids, eps=1e-6, threshold=1.0, alpha=1.0):
    base = [0.0] * len(r)
    means = {}
    for g, members in _groups(ids).items():
        vals = [r[i] for i in members]
        n, mean = len(vals), sum(vals) / len(vals)
        means[g] = mean
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1)) if n > 1 else 0.0
        for i in members:
            base[i] = (r[i] - mean) / (std + eps) if std > 0 else 0.0
    acc = sum(v >= threshold for v in r) / len(r)
    out = []
    for i, b in enumerate(base):
        s = math.sqrt(min(max(means[ids[i]], 0.0), 1.0))
        a = b * (0.5 * (1 - acc) / (1 - s + eps) + 0.5 * acc / (s + eps))
        out.append(a * min(1.0, acc / alpha) if a > 0 else a)
    return out


def test_a_grae_parity_with_loop_reference():
    for rewards, ids in _random_batches():
        _close(ag(_inputs(rewards, ids)), ref_a_grae(rewards, ids), rtol=1e-9, atol=1e-9)
        got = ag(_inputs(rewards, ids), correct_threshold=0.5, positive_alpha=0.5)
        _close(got, ref_a_grae(rewards, ids, threshold=0.5, alpha=0.5), rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------- all three


@pytest.mark.parametrize("fn", [mc, ng, ag], ids=["mc_grpo", "ngrpo", "a_grae"])
def test_float32_and_integer_rewards_give_float_n(fn):
    ids = torch.tensor([3, 1, 3, 1, 3])
    a32 = fn(AdvantageInputs(torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0]), ids))
    aint = fn(AdvantageInputs(torch.tensor([1, 0, 0, 1, 1]), ids))
    assert a32.shape == aint.shape == (5,)
    assert a32.dtype == aint.dtype == torch.get_default_dtype()
    _close(a32, aint)
    assert fn(AdvantageInputs(torch.zeros(0), torch.zeros(0, dtype=torch.long))).shape == (0,)


def test_configs_default_valid_and_report_problems_in_the_repo_format():
    assert MCGRPOAdvantageConfig(name="mc_grpo").problems() == []
    assert NGRPOAdvantageConfig(name="ngrpo").problems() == []
    assert AGRAEAdvantageConfig(name="a_grae").problems() == []
    form = re.compile(r"^\[[a-z_]+\] got .+; expected .+\. Fix: .+\.$")
    bad = [
        (MCGRPOAdvantageConfig(name="mc_grpo", epsilon=0.0), ["epsilon"]),
        (
            NGRPOAdvantageConfig(
                name="ngrpo", virtual_reward=math.inf, num_virtual=-1, epsilon=-1.0
            ),
            ["virtual_reward", "num_virtual", "epsilon"],
        ),
        (
            AGRAEAdvantageConfig(
                name="a_grae", epsilon=0.0, positive_alpha=-1.0, correct_threshold=math.nan
            ),
            ["epsilon", "positive_alpha", "correct_threshold"],
        ),
    ]
    for cfg, paths in bad:
        problems = cfg.problems()
        assert [p.path for p in problems] == paths
        for p in problems:
            assert form.match(str(p)), str(p)
    assert str(bad[0][0].problems()[0]).startswith("[epsilon] got 0.0; expected a number > 0.0.")


def test_registered_and_selected_by_the_algorithm_presets():
    from framework.cli.app import load_config
    from framework.registry import ADVANTAGES, load_components

    load_components(plugins=False)
    for name, cls, fn in [
        ("mc_grpo", MCGRPOAdvantageConfig, mc_grpo_advantage),
        ("ngrpo", NGRPOAdvantageConfig, ngrpo_advantage),
        ("a_grae", AGRAEAdvantageConfig, a_grae_advantage),
    ]:
        entry = ADVANTAGES.get(name)
        assert (entry.config_cls, entry.target) == (cls, fn)
    mcg = load_config("train", ["algorithm=mc_grpo"])
    assert mcg.advantage.name == "mc_grpo" and mcg.advantage.epsilon == 1e-3
    assert mcg.sampler.group_size == 9  # G + 1 with G = 8
    assert load_config("train", ["algorithm=mc_grpo", "scale=paper"]).sampler.group_size == 9
    ngr = load_config("train", ["algorithm=ngrpo"])
    assert (ngr.advantage.name, ngr.advantage.virtual_reward) == ("ngrpo", 1.0)
    assert (ngr.loss.name, ngr.loss.clip_low, ngr.loss.clip_high) == ("ppo_clip", 0.16, 0.24)
    agr = load_config("train", ["algorithm=a_grae"])
    assert agr.advantage.name == "a_grae" and agr.loss.clip_high == 0.28
    for cfg in (mcg, ngr, agr):
        assert cfg.reward.name == "outcome" and cfg.kl.coef == 0.0
