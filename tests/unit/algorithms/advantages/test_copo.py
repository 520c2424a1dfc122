"""COPO (framework/algorithms/advantages/copo.py) against the authors' code, github.com/hijih/copo-code
(``soft-with-zero``; values derived by hand in the comments)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.advantages.copo import (
    COPOAdvantageConfig,
    answer_entropy,
    consistency_advantage,
    copo_advantage,
)
from framework.algorithms.advantages.grpo import GRPOAdvantageConfig, grpo_advantage
from framework.registry import ADVANTAGES, INPUT_PROVIDERS, load_components
from framework.rl.batch import RolloutBatch
from framework.rl.inputs import InputContext, provide_inputs
from framework.types import AdvantageInputs, Trajectory

load_components(plugins=False)
CFG = COPOAdvantageConfig(name="copo")


def inputs(rewards, groups, answers) -> AdvantageInputs:
    return AdvantageInputs(
        rewards=torch.tensor(rewards, dtype=torch.float64),
        group_index=torch.tensor(groups),
        extras={"answers": list(answers)},
    )


def test_worked_example():
    # The authors' soft-with-zero with γ = 5, ρ = 1. Q1 [1,1,1,1], one answer: H = 0 bits, local 0
    # (constant group), gate sigmoid(5 (0 - 1)) = sigmoid(-5) = 0.0066929.
    # Q2 [1,0,0,0], answers a, b, b, c: H = -(2 * 1/4 log2 1/4 + 1/2 log2 1/2) = 1 + 0.5 = 1.5 bits,
    # gate sigmoid(5 (1.5 - 1)) = sigmoid(2.5) = 0.9241418; local GRPO with the n - 1 std:
    # mean 0.25, var (0.75² + 3 * 0.25²) / 3 = 0.25, std 0.5 -> [1.5, -0.5, -0.5, -0.5].
    # Global: R = [1, 0.25], mean 0.625, n - 1 std 0.75 / sqrt(2) -> A^G = [+1/sqrt(2), -1/sqrt(2)].
    # Q1: (1 - 0.0066929) * 0.7071068 = 0.7023742 for all four (rewards 1, so the gate applies).
    # Q2 right: 0.9241418 * 1.5 + 0.0758582 * (-0.7071068) = 1.3862127 - 0.0536399 = 1.3325729;
    # Q2 wrong (reward 0, weight 0): A^G = -0.7071068.
    got = copo_advantage(
        inputs([1, 1, 1, 1, 1, 0, 0, 0], [0] * 4 + [1] * 4, ["x"] * 4 + ["a", "b", "b", "c"]),
        cfg=CFG,
    )
    s1, s2, ag = 1 / (1 + math.exp(5)), 1 / (1 + math.exp(-2.5)), 1 / math.sqrt(2)
    expected = [(1 - s1) * ag] * 4 + [s2 * 1.5 - (1 - s2) * ag] + [-ag] * 3
    assert_close(got, torch.tensor(expected, dtype=torch.float64), atol=1e-5, rtol=0)
    assert_close(
        got,
        torch.tensor([0.70237] * 4 + [1.33257] + [-0.70711] * 3, dtype=got.dtype),
        atol=1e-4,
        rtol=0,
    )


def test_entropy_is_in_bits_and_not_normalised():
    # a, b, b, c: 1.5 bits; all distinct over 4: 2 bits; a lone rollout: 0
    h = answer_entropy(
        ["a", "b", "b", "c", "z", "p", "q", "r", "s"], torch.tensor([0] * 4 + [1] + [2] * 4)
    )
    assert_close(h, torch.tensor([1.5] * 4 + [0.0] + [2.0] * 4), atol=1e-12, rtol=0)


def test_rollouts_with_reward_zero_get_the_global_term_alone():
    # the gate is multiplied by [r_i != 0]: every wrong rollout of a question gets A^G_q, however
    # much its group disagrees; here A^G = [+1, 0, -1] (R = [0.75, 0.5, 0.25], n - 1 std 0.25)
    r = [1, 1, 1, 0, 1, 1, 0, 0, 1, 0, 0, 0]
    g = [0] * 4 + [1] * 4 + [2] * 4
    got = copo_advantage(inputs(r, g, list("abcdabcdabcd")), cfg=CFG)
    wrong = torch.tensor(r) == 0
    glob = torch.tensor([1.0] * 4 + [0.0] * 4 + [-1.0] * 4, dtype=got.dtype)
    assert_close(got[wrong], glob[wrong], atol=1e-5, rtol=0)


def test_a_steep_gate_gives_grpo_above_the_threshold_and_the_global_term_below():
    # γ large: a right rollout in a group whose answers carry more than ρ bits gets GRPO's advantage
    # (n - 1 std), one in a group below ρ gets the global term
    r = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0]
    g = [0] * 4 + [1] * 4
    answers = ["a", "b", "c", "d", "x", "x", "y", "x"]  # 2 bits; 0.811 bits
    cfg = COPOAdvantageConfig(name="copo", gamma=1e4, rho=1.0)
    got = copo_advantage(inputs(r, g, answers), cfg=cfg)
    grpo = grpo_advantage(inputs(r, g, [""] * 8), cfg=GRPOAdvantageConfig(name="grpo"))
    # R = [0.5, 0.75]: A^G = [-1/sqrt(2), +1/sqrt(2)]
    ag = 1 / math.sqrt(2)
    assert_close(got[[0, 3]], grpo[[0, 3]], atol=1e-6, rtol=0)
    assert_close(got[[1, 2]], torch.full((2,), -ag, dtype=got.dtype), atol=1e-5, rtol=0)
    assert_close(got[4:], torch.full((4,), ag, dtype=got.dtype), atol=1e-5, rtol=0)


def test_the_global_term_is_standardised_over_questions_each_counted_once():
    # groups of unequal size; every question has a wrong rollout, which carries A^G_q alone: over
    # the questions A^G has mean 0 and (n - 1) std 1 (exactly, with eps = 0), whatever the sizes
    gen = torch.Generator().manual_seed(0)
    sizes = [3, 5, 4, 6, 2]
    g = torch.arange(len(sizes)).repeat_interleave(torch.tensor(sizes))
    r = (torch.rand(len(g), generator=gen) < 0.5).double()
    first = torch.cumsum(torch.tensor([0, *sizes[:-1]]), 0)
    r[first] = 0.0
    got = consistency_advantage(r, g, [str(i) for i in range(len(g))], epsilon=0.0)
    per_q = got[first]
    assert abs(float(per_q.mean())) < 1e-12
    assert abs(float(per_q.std(unbiased=True)) - 1.0) < 1e-12


def test_unanimous_groups_still_learn_and_a_lone_question_has_no_global_term():
    # one always right, one always wrong, one answer each: A^G = ±1/sqrt(2); the right group's
    # gate is sigmoid(-5) on a local term of 0, the wrong group's weight is 0
    got = copo_advantage(inputs([1, 1, 0, 0], [0, 0, 1, 1], ["x", "x", "y", "y"]), cfg=CFG)
    ag = 1 / math.sqrt(2)
    s1 = 1 / (1 + math.exp(5))
    expected = [(1 - s1) * ag] * 2 + [-ag] * 2
    assert_close(got, torch.tensor(expected, dtype=got.dtype), atol=1e-5, rtol=0)
    # one question in the batch: no global spread (ours: 0, not NaN), and a unanimous group has
    # no local one
    alone = copo_advantage(inputs([1, 1, 1], [0, 0, 0], ["x", "x", "x"]), cfg=CFG)
    assert torch.equal(alone, torch.zeros(3, dtype=alone.dtype))


def test_a_group_of_one_keeps_verls_mean_zero_std_one_local_term():
    # question 0 has one rollout (reward 1, H = 0, gate sigmoid(-5)); its local term is
    # r / (1 + eps) as in the authors' verl; R = [1, 0] -> A^G = ±1/sqrt(2)
    got = copo_advantage(inputs([1, 0, 0], [0, 1, 1], ["x", "y", "y"]), cfg=CFG)
    s1, ag = 1 / (1 + math.exp(5)), 1 / math.sqrt(2)
    expected = [s1 * 1.0 + (1 - s1) * ag, -ag, -ag]
    assert_close(got, torch.tensor(expected, dtype=got.dtype), atol=1e-5, rtol=0)


def test_the_consistency_coefficient_scales_the_global_reward():
    # reward_coef_flg: R_q = mean_q r * (1 - λ H_q), λ = (1 - 1/4) / log2 4 = 0.375 for G = 4.
    # Q1 [1,1,1,1] one answer: R = 1; Q2 [1,0,0,0] a,b,b,c (1.5 bits): R = 0.25 * (1 - 0.5625)
    # = 0.109375; Q3 [0,0,0,0] one answer: R = 0. mean 0.3697917; deviations 0.6302083,
    # -0.2604167, -0.3697917; n - 1 variance (0.3971625 + 0.0678168 + 0.1367459) / 2 = 0.3008626,
    # std 0.5485095 -> A^G = [1.148945, -0.474771, -0.674174]. Q1 (gate sigmoid(-5) on local 0):
    # 0.9933071 * 1.148945 = 1.141255; the wrong rollouts carry A^G alone.
    r = [1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    g = [0] * 4 + [1] * 4 + [2] * 4
    answers = ["x"] * 4 + ["a", "b", "b", "c"] + ["y"] * 4
    cfg = COPOAdvantageConfig(name="copo", consistency_coef=True)
    got = copo_advantage(inputs(r, g, answers), cfg=cfg)
    assert_close(got[:4], torch.full((4,), 1.141255, dtype=got.dtype), atol=1e-5, rtol=0)
    assert_close(got[5:8], torch.full((3,), -0.474771, dtype=got.dtype), atol=1e-5, rtol=0)
    assert_close(got[8:], torch.full((4,), -0.674174, dtype=got.dtype), atol=1e-5, rtol=0)
    # off (the released scripts): R = [1, 0.25, 0], A^G_Q2 = (0.25 - 5/12) / 0.5204165 = -0.320256
    plain = copo_advantage(inputs(r, g, answers), cfg=CFG)
    assert_close(plain[5:8], torch.full((3,), -0.320256, dtype=got.dtype), atol=1e-5, rtol=0)


def test_the_answers_input_is_provided_from_the_rollouts():
    assert "copo" in ADVANTAGES and "answers" in INPUT_PROVIDERS
    trajs = [
        Trajectory(
            question=0,
            group=0,
            token_ids=[1, 2, 3],
            loss_mask=[0, 1, 1],
            prompt_len=1,
            answer=" The Boston. ",
        ),
        Trajectory(question=0, group=0, token_ids=[1, 2], loss_mask=[0, 1], prompt_len=1),
    ]
    batch = RolloutBatch.build(trajs, pad_id=0)
    got = provide_inputs({"advantage": CFG}, InputContext(None, None, batch))
    assert got == {"answers": ["boston", ""]}


@pytest.mark.parametrize("field", ["epsilon", "gamma"])
def test_a_negative_epsilon_or_gate_steepness_is_refused(field):
    assert COPOAdvantageConfig(name="copo", **{field: -1.0}).problems()
    assert not COPOAdvantageConfig(name="copo").problems()
