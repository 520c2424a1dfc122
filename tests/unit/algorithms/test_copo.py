"""COPO (reconstructed; framework/algorithms/consistency.py) against ../shared/METHODS-2.md item 8."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.advantages import GRPOAdvantageConfig, grpo_advantage
from framework.algorithms.consistency import (
    COPOAdvantageConfig,
    answer_entropy,
    consistency_advantage,
    copo_advantage,
)
from framework.registry import ADVANTAGES, INPUT_PROVIDERS, load_components
from framework.rl.batch import RolloutBatch
from framework.rl.inputs import InputContext, provide_inputs
from framework.rollout.types import Trajectory
from framework.types import AdvantageInputs

load_components(plugins=False)
CFG = COPOAdvantageConfig(name="copo")


def inputs(rewards, groups, answers) -> AdvantageInputs:
    return AdvantageInputs(
        rewards=torch.tensor(rewards, dtype=torch.float64),
        group_index=torch.tensor(groups),
        extras={"answers": list(answers)},
    )


def test_worked_example():
    # Q1 [1,1,1,1], one answer: H = 0, w = 0; Q2 [1,0,0,0], answers A, B, B, C:
    # H = -(2 * 1/4 ln 1/4 + 1/2 ln 1/2) / ln 4 = 0.75. p = [1, 0.25] -> A^g = [1, -1] (population
    # std 0.375). Q2's local GRPO with the population std: 0.75 / 0.4330 = 1.7321, -0.25 / 0.4330
    # = -0.5774; A = 0.75 local - 0.25.
    got = copo_advantage(
        inputs([1, 1, 1, 1, 1, 0, 0, 0], [0] * 4 + [1] * 4, ["x"] * 4 + ["a", "b", "b", "c"]),
        cfg=CFG,
    )
    local = 0.75 / math.sqrt(0.75 / 4)
    expected = [1.0] * 4 + [0.75 * local - 0.25] + [0.75 * (-local / 3) - 0.25] * 3
    assert_close(got, torch.tensor(expected, dtype=torch.float64), atol=1e-5, rtol=0)
    assert_close(
        got[4:],
        torch.tensor([1.0490, -0.6830, -0.6830, -0.6830], dtype=got.dtype),
        atol=1e-4,
        rtol=0,
    )


def test_entropy_is_normalised_by_log_group_size():
    h = answer_entropy(["a", "b", "b", "c", "z"], torch.tensor([0, 0, 0, 0, 1]))
    assert_close(h, torch.tensor([0.75, 0.75, 0.75, 0.75, 0.0]), atol=1e-6, rtol=0)


def test_groups_whose_answers_all_differ_get_grpo_with_the_population_std():
    # w = 1 everywhere: the global term drops out
    r = [1.0, 0.0, 0.0, 0.3, 0.0, 1.0]
    g = [0, 0, 0, 1, 1, 1]
    got = copo_advantage(inputs(r, g, ["a", "b", "c", "d", "e", "f"]), cfg=CFG)
    grpo = grpo_advantage(
        inputs(r, g, [""] * 6), cfg=GRPOAdvantageConfig(name="grpo", unbiased_std=False)
    )
    assert_close(got, grpo)


def test_unanimous_groups_learn_from_the_batch_and_a_lone_question_from_nothing():
    # two unanimous groups, one always right and one always wrong: +1 and -1 (GRPO gives 0)
    got = copo_advantage(inputs([1, 1, 0, 0], [0, 0, 1, 1], ["x", "x", "y", "y"]), cfg=CFG)
    assert_close(got, torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=got.dtype), atol=1e-5, rtol=0)
    # one question in the batch: no global spread, and a unanimous group has no local one
    alone = copo_advantage(inputs([1, 1, 1], [0, 0, 0], ["x", "x", "x"]), cfg=CFG)
    assert torch.equal(alone, torch.zeros(3, dtype=alone.dtype))


def test_the_global_term_has_zero_batch_mean_over_equal_sized_groups():
    gen = torch.Generator().manual_seed(0)
    r = torch.randint(0, 2, (12,), generator=gen).double()
    g = torch.arange(3).repeat_interleave(4)
    # with one answer per group (w = 0) only the global term is left: it sums to 0 over
    # equal-sized groups, as GRPO's does within a group
    glob_only = consistency_advantage(r, g, ["same"] * 12)
    assert abs(float(glob_only.sum())) < 1e-6


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


@pytest.mark.parametrize("bad", [-1.0])
def test_a_negative_epsilon_is_refused(bad):
    assert COPOAdvantageConfig(name="copo", epsilon=bad).problems()
