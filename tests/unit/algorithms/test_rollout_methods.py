"""SPO, HiPER (HAE), S-GRPO, R³ and HiLL's hint reward against ../shared/METHODS-2.md's worked
examples (items 1, 3, 10, 5 and 13), and the invariants they state. R³ follows its paper's §3 (arXiv 2601.19620); its examples are
derived by hand here."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.advantages.grpo import GRPOAdvantageConfig, grpo_advantage
from framework.algorithms.advantages.hiper import (
    HiPERAdvantageConfig,
    hae_advantages,
    hiper_advantage,
)
from framework.algorithms.advantages.r3 import (
    R3AdvantageConfig,
    dominance_counts,
    entropy_stats,
    r3_advantage,
    rank_rewards,
)
from framework.algorithms.advantages.s_grpo import (
    SGRPOAdvantageConfig,
    s_grpo_advantage,
    serial_rewards,
)
from framework.algorithms.advantages.spo import SPOAdvantageConfig, spo_advantage
from framework.algorithms.rewards.hints import hint_reward, non_degenerate
from framework.registry import load_components
from framework.rl.augmenters import hint_gate
from framework.types import AdvantageInputs
from tests.unit.algorithms.advantages.test_turn_advantages import layout, per_turn

load_components(plugins=False)


# -- SPO --------------------------------------------------------------------------------------------
def test_spo_worked_example():
    # one rollout, 3 turns (segments); V(s0) = 0.5 (group mean), MC at s1: 3/4 -> 0.75, at s2:
    # 1/4 -> 0.25, final reward 0 -> V(s3) = 0: advantages [0.25, -0.5, -0.25]
    inputs = layout(
        [[(2, 1), (2, 1), (2, 0)]], [0], [0.0], {"boundary_values": [[0.5, 0.75, 0.25, 0.0]]}
    )
    adv = spo_advantage(inputs, cfg=SPOAdvantageConfig(name="spo"))
    assert_close(torch.tensor(per_turn(adv, inputs)), torch.tensor([[0.25, -0.5, -0.25]]))


def test_spo_turn_advantages_telescope_to_dr_grpo():
    # two rollouts of one group (rewards 1, 0; mean 0.5); the short one's row is padded with its
    # reward past its turns. Sum over turns = r - mean(r).
    values = [[0.5, 0.9, 0.4, 1.0], [0.5, 0.0, 0.0, 0.0]]
    inputs = layout(
        [[(1, 1), (2, 1), (1, 0)], [(2, 1), (1, 0)]],
        [0, 0],
        [1.0, 0.0],
        {"boundary_values": values},
    )
    turns = per_turn(spo_advantage(inputs, cfg=SPOAdvantageConfig(name="spo")), inputs)
    assert_close(torch.tensor([sum(t) for t in turns]), torch.tensor([0.5, -0.5]))


def test_spo_refuses_inputs_without_boundary_values():
    inputs = layout([[(1, 0)]], [0], [1.0], {})
    with pytest.raises(ValueError, match="augment=mc_values"):
        spo_advantage(inputs, cfg=SPOAdvantageConfig(name="spo"))


# -- HiPER -----------------------------------------------------------------------------------------
def test_hae_worked_example():
    # 3 turns, rewards [0, 0, 1], turn 2 SWITCH (segments {0, 1}, {2}); V_low = [0.4, 0.5, 0.8],
    # V_high(0) = 0.3, V_high(2) = 0.7, gamma 1: low [0.3, 0.2, 0.2], high [0.685, 0.3]
    a_low, a_high, starts = hae_advantages(
        torch.tensor([0.0, 0.0, 1.0]),
        torch.tensor([0.4, 0.5, 0.8, 0.0]),
        torch.tensor([0.3, 0.0, 0.7, 0.0]),
        torch.tensor([False, False, True]),
        3,
        gamma=1.0,
        lambda_turn=1.0,
        lambda_seg=0.95,
    )
    assert starts == [0, 2]
    assert_close(a_low, torch.tensor([0.3, 0.2, 0.2]))
    assert_close(a_high, torch.tensor([0.685, 0.3]))


def test_hiper_one_segment_without_switch_tags():
    # no SWITCH: one segment; gamma = lambda = 1 telescope: A_low(t) = r - V(s_t) and the first
    # turn gets A_high = r - V(s_0)
    values = [[0.5, 0.75, 0.25, 1.0]]
    inputs = layout([[(2, 1), (2, 1), (2, 0)]], [0], [1.0], {"boundary_values": values})
    inputs.extras["switch_flags"] = torch.zeros((1, 3), dtype=torch.bool)  # type: ignore[index]
    adv = hiper_advantage(inputs, cfg=HiPERAdvantageConfig(name="hiper"))
    assert_close(torch.tensor(per_turn(adv, inputs)), torch.tensor([[0.5, 0.25, 0.75]]))


def test_hiper_uses_switch_flags():
    values = [[0.3, 0.5, 0.7, 1.0]]
    inputs = layout([[(2, 1), (2, 1), (2, 0)]], [0], [1.0], {"boundary_values": values})
    inputs.extras["switch_flags"] = torch.tensor([[False, False, True]])  # type: ignore[index]
    adv = hiper_advantage(inputs, cfg=HiPERAdvantageConfig(name="hiper"))
    # segments {0,1},{2}; low turn 1: 0 + V(2)=0.7 - 0.5 = 0.2; high seg2: 1 - 0.7 = 0.3;
    # high seg1: (0 + 0.7 - 0.3) + 0.95 * 0.3 = 0.685 (turn 0 and turn 2 carry the high values)
    assert_close(torch.tensor(per_turn(adv, inputs)), torch.tensor([[0.685, 0.2, 0.3]]))


# -- S-GRPO ----------------------------------------------------------------------------------------
def test_s_grpo_worked_example():
    # exits at 25/50/75/100% with correctness [0, 1, 1, 1] -> rewards [0, 1, 0.5, 0.25], mean
    # 0.4375 -> A = [-0.4375, 0.5625, 0.0625, -0.1875]
    inputs = AdvantageInputs(
        rewards=torch.tensor([0.0, 1.0, 1.0, 1.0]),
        group_index=torch.zeros(4, dtype=torch.long),
        extras={
            "exit_position": torch.tensor([0, 1, 2, 3]),
            "exit_correct": torch.tensor([False, True, True, True]),
        },
    )
    adv = s_grpo_advantage(inputs, cfg=SGRPOAdvantageConfig(name="s_grpo"))
    assert_close(adv, torch.tensor([-0.4375, 0.5625, 0.0625, -0.1875]))
    assert abs(float(adv.sum())) < 1e-6


def test_serial_rewards_follow_positions_not_rows_and_groups_apart():
    correct = torch.tensor([True, True, False, True, True])
    position = torch.tensor([2, 0, 1, 1, 0])
    groups = torch.tensor([0, 0, 0, 1, 1])
    assert serial_rewards(correct, position, groups).tolist() == [0.5, 1.0, 0.0, 0.5, 1.0]


# -- R3 ---------------------------------------------------------------------------------------------
def test_r3_dominance_and_ranking_worked_example():
    # (E_peak, E_global): (3, 1) dominates (1, 2) and (2, 3); (2, 3) dominates nothing, as its
    # E_global is the highest; (1, 2) has the lowest E_peak: S = [2, 0, 0]
    peak, spread = torch.tensor([3.0, 1.0, 2.0]), torch.tensor([1.0, 2.0, 3.0])
    counts = dominance_counts(peak, spread)
    assert counts.tolist() == [2, 0, 0]
    # places 0, then 1 and 2 tied (1.5 each): R_max (1 - k / (N - 1)) = 0.2, 0.05, 0.05
    out = rank_rewards(counts.float(), torch.ones(3, dtype=torch.bool), torch.zeros(3).long(), 0.2)
    assert_close(out, torch.tensor([0.2, 0.05, 0.05]))


def _r3_inputs(rewards, groups, profile, **extras):
    return AdvantageInputs(
        rewards=torch.tensor(rewards),
        group_index=torch.tensor(groups),
        extras={"entropy_profile": torch.tensor(profile), **extras},
    )


def test_r3_ranks_only_all_wrong_groups_and_normalises_with_alpha():
    inputs = _r3_inputs(
        [0.0, 0.0, 0.0, 1.0, 0.0],
        [0, 0, 0, 1, 1],
        [[3.0, 1.0], [1.0, 2.0], [2.0, 3.0], [0.0, 0.0], [9.0, 0.0]],
    )
    adv = r3_advantage(inputs, cfg=R3AdvantageConfig(name="r3"))
    # group 0 (all wrong): graded [0.2, 0.05, 0.05], mean 0.1, Bessel std sqrt(0.015 / 2);
    # group 1 has a success, so its failure is not ranked: GRPO's [+0.7071, -0.7071]
    std = (0.015 / 2) ** 0.5
    want = torch.tensor([0.1 / std, -0.05 / std, -0.05 / std, 0.5**0.5, -(0.5**0.5)])
    assert_close(adv, want, atol=1e-4, rtol=0)
    halved = r3_advantage(inputs, cfg=R3AdvantageConfig(name="r3", alpha=2.0))
    assert_close(halved[:3], want[:3] / 2, atol=1e-4, rtol=0)  # eq. 3: alpha scales the std


def test_r3_ranks_the_on_policy_rollouts_of_a_group_with_a_replayed_success():
    profile = [[3.0, 1.0], [1.0, 2.0], [0.0, 0.0]]
    replayed = torch.tensor([False, False, True])
    inputs = _r3_inputs([0.0, 0.0, 1.0], [0, 0, 0], profile, replayed=replayed)
    adv = r3_advantage(inputs, cfg=R3AdvantageConfig(name="r3"))
    # on-policy rows all wrong: S = [1, 0] -> [0.2, 0]; G_mix [0.2, 0, 1]: mean 0.4, std sqrt(0.28)
    std = 0.28**0.5
    assert_close(adv, torch.tensor([-0.2, -0.4, 0.6]) / std, atol=1e-4, rtol=0)
    # without the flag the group holds a success: nothing is ranked, GRPO's advantage
    plain = _r3_inputs([0.0, 0.0, 1.0], [0, 0, 0], profile)
    assert_close(
        r3_advantage(plain, cfg=R3AdvantageConfig(name="r3")),
        grpo_advantage(plain, cfg=GRPOAdvantageConfig(name="grpo")),
    )


def test_r3_equals_grpo_where_every_group_has_a_success():
    torch.manual_seed(0)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    inputs = _r3_inputs(rewards.tolist(), [0, 0, 0, 1, 1, 1, 2, 2], torch.rand(8, 2).tolist())
    assert_close(
        r3_advantage(inputs, cfg=R3AdvantageConfig(name="r3")),
        grpo_advantage(inputs, cfg=GRPOAdvantageConfig(name="grpo")),
    )


def test_r3_a_lone_ranked_rollout_gets_nothing():
    inputs = _r3_inputs([0.0, 1.0, 0.0], [0, 1, 1], [[5.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    adv = r3_advantage(inputs, cfg=R3AdvantageConfig(name="r3", unbiased_std=False))
    assert_close(adv, torch.tensor([0.0, 1.0, -1.0]), atol=1e-4, rtol=0)


def test_r3_config_checks_its_fields():
    assert R3AdvantageConfig(name="r3", r_max=1.0).problems()
    assert R3AdvantageConfig(name="r3", alpha=0.0).problems()
    assert R3AdvantageConfig(name="r3", peak_share=0.0).problems()
    assert not R3AdvantageConfig(name="r3").problems()


def test_r3_entropy_stats():
    h = torch.tensor([0.5, 2.0, 1.0, 3.0, 0.5])
    assert entropy_stats(h, 0.2) == pytest.approx((3.0, 1.4))  # k = max(1, floor(1.0)) = 1
    assert entropy_stats(h, 0.5) == pytest.approx((2.5, 1.4))  # k = floor(2.5) = 2
    assert entropy_stats(h, 0.01) == pytest.approx((3.0, 1.4))  # k = max(1, 0)
    assert entropy_stats(torch.zeros(0)) == (0.0, 0.0)
    with pytest.raises(ValueError, match=r"\[N, 2\]"):
        r3_advantage(_r3_inputs([0.0], [0], [0.0]), cfg=R3AdvantageConfig(name="r3"))


# -- HiLL -------------------------------------------------------------------------------------------
def test_hint_reward_worked_example():
    # n = 8, 3 correct -> p = 0.375, non_deg = 1 - 0.375^8 - 0.625^8 = 0.97633; Δ = -0.6 ->
    # w = e^-2 = 0.13534 -> R = 0.13213
    assert non_degenerate(0.375, 8) == pytest.approx(0.97633, abs=1e-5)
    r = hint_reward([True] * 3 + [False] * 5, [-0.6, -0.6, -0.6])
    assert r == pytest.approx(0.97633 * math.exp(-2), abs=1e-5)
    assert r == pytest.approx(0.13213, abs=1e-5)


def test_hint_reward_is_zero_for_degenerate_groups_and_ignores_positive_reliance():
    assert hint_reward([False] * 8, []) == 0.0
    assert hint_reward([True] * 8, [-0.1] * 8) == 0.0
    assert hint_reward([True, False], [0.4]) == pytest.approx(non_degenerate(0.5, 2))


def test_hint_gates():
    gold = ["Cincinnati", "Cincinnati, Ohio"]
    assert hint_gate("The director was born in Cincinnati.", gold, 200) == "leak"
    assert hint_gate("Look up Steven Spielberg.", gold, 200) == ""
    assert hint_gate("x" * 30, gold, 10) == "overlong"
    assert hint_gate(" ... ", gold, 200) == "empty"
