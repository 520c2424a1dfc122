"""SALT (reconstructed; framework/algorithms/advantages/salt.py) against ../shared/METHODS-2.md item 2."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch.testing import assert_close

from framework.algorithms.advantages.grpo import grpo_advantage
from framework.algorithms.advantages.salt import SALTAdvantageConfig, salt_advantage
from framework.registry import ADVANTAGES, load_components
from tests.unit.algorithms.advantages.test_step_advantages import batch, search

load_components(plugins=False)
CFG = SALTAdvantageConfig(name="salt", unbiased_std=False)


def with_answers(inputs, answers):
    return replace(inputs, extras={"answers": list(answers)})


def turn_values(adv, inputs):
    """Per rollout, per turn: the value on the turn's first token (to 5 places: eps 1e-6)."""
    return [
        [round(float(adv[i, t.start]), 5) for t in turns] for i, turns in enumerate(inputs.turns)
    ]


def test_worked_example():
    # G = 4, rewards [1, 1, 0, 0] -> GRPO (population std) [1, 1, -1, -1]. Turn 1 is the same
    # search("X") in all four: 0. Turn 2: rollouts 1, 2 search("Y") -> 1; 3, 4 search("Z") -> -1.
    # The answers part the same way: 1 and -1.
    x, y, z = [search("X")], [search("Y")], [search("Z")]
    inputs = with_answers(
        batch([[x, y, []], [x, y, []], [x, z, []], [x, z, []]], [1, 1, 0, 0], [0] * 4),
        ["paris", "paris", "rome", "rome"],
    )
    adv = ADVANTAGES.bind(CFG)(inputs)
    assert turn_values(adv, inputs) == [
        [0.0, 1.0, 1.0],
        [0.0, 1.0, 1.0],
        [0.0, -1.0, -1.0],
        [0.0, -1.0, -1.0],
    ]
    # tool-response tokens get nothing
    assert float(adv[~inputs.token_mask].abs().sum()) == 0.0


def test_a_shared_search_with_different_answers_parts_at_the_answer():
    x = [search("X")]
    inputs = with_answers(batch([[x, []], [x, []]], [1, 0], [0, 0]), ["paris", "rome"])
    assert turn_values(salt_advantage(inputs, cfg=CFG), inputs) == [[0.0, 1.0], [0.0, -1.0]]


def test_without_shared_steps_salt_is_the_trajectory_estimator():
    inputs = with_answers(
        batch(
            [[[search("A")], []], [[search("B")], []], [[search("C")], []], [[search("D")], []]],
            [1, 0, 0.5, 0],
            [0, 0, 1, 1],
        ),
        ["a", "b", "c", "d"],
    )
    got = salt_advantage(inputs, cfg=CFG)
    grpo = grpo_advantage(inputs, cfg=CFG)
    assert_close(got, grpo.unsqueeze(-1) * inputs.token_mask.to(grpo.dtype))


def test_steps_merge_only_within_a_question():
    x = [search("X")]
    inputs = with_answers(
        batch([[x, []], [x, []], [x, []], [x, []]], [1, 0, 1, 0], [0, 0, 1, 1]),
        ["a", "b", "a", "b"],
    )
    # each question: first turn shared (0), answers apart (+-1); question 1 does not pool with 0
    assert turn_values(salt_advantage(inputs, cfg=CFG), inputs) == [[0.0, 1.0], [0.0, -1.0]] * 2


def test_a_node_mean_keeps_the_group_sum():
    gen = torch.Generator().manual_seed(3)
    queries = ["X", "Y"]
    rollouts = [
        [[search(queries[int(torch.randint(2, (1,), generator=gen))])], []] for _ in range(6)
    ]
    rewards = torch.randint(0, 2, (6,), generator=gen).tolist()
    inputs = with_answers(batch(rollouts, rewards, [0] * 6), [str(r) for r in rewards])
    adv = salt_advantage(inputs, cfg=CFG)
    # every node's mean times its size sums to the group's sum of advantages, which is 0
    first = torch.tensor([v[0] for v in turn_values(adv, inputs)])
    assert abs(float(first.sum())) < 1e-4
