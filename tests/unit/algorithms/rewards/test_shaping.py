"""E-GRPO's group-shaped reward (METHODS.md steps 4-5)."""

from __future__ import annotations

import torch
from torch.testing import assert_close

from framework.algorithms.rewards.shaping import entity_shaped_reward

F64 = torch.float64


def _close(actual, expected):
    assert_close(actual.double(), torch.tensor(expected, dtype=F64), rtol=1e-6, atol=1e-6)


def test_hand_example_two_interleaved_groups():
    # group 4 (positions 0, 2, 4, 6): match rates 0.5, 0.25, 0, 1.0; the last answer is correct.
    #   max 1.0 -> γ̂ = 0.5, 0.25, 0, 1 -> R = 0.3*0.5 = 0.15, 0.3*0.25 = 0.075, 0, 1 (correct)
    # group 1 (positions 1, 3, 5): match rates 0.2, 0.4, 0.1, all wrong; position 5 is invalid.
    #   max 0.4 -> γ̂ = 0.5, 1, 0.25 -> R = 0.15, 0.3, 0 (invalid)
    ids = torch.tensor([4, 1, 4, 1, 4, 1, 4])
    rate = torch.tensor([0.5, 0.2, 0.25, 0.4, 0.0, 0.1, 1.0])
    correct = torch.tensor([False, False, False, False, False, False, True])
    valid = torch.tensor([True, True, True, True, True, False, True])
    r = entity_shaped_reward(correct, rate, valid, ids, alpha=0.3)
    _close(r, [0.15, 0.15, 0.075, 0.3, 0.0, 0.0, 1.0])


def test_correct_answer_gets_one_whatever_its_match_rate():
    # correct with rate 0 still gets 1; the wrong one (rate 0.4 = group max) gets alpha * 1
    r = entity_shaped_reward(
        torch.tensor([True, False]),
        torch.tensor([0.0, 0.4]),
        torch.tensor([True, True]),
        torch.tensor([0, 0]),
        alpha=0.5,
    )
    _close(r, [1.0, 0.5])


def test_invalid_rollouts_get_zero_even_if_correct():
    r = entity_shaped_reward(
        torch.tensor([True, False, True]),
        torch.tensor([1.0, 1.0, 0.5]),
        torch.tensor([False, False, True]),
        torch.tensor([2, 2, 2]),
        alpha=0.3,
    )
    _close(r, [0.0, 0.0, 1.0])


def test_group_max_includes_correct_and_invalid_rollouts():
    # documented: the max runs over all rollouts of the group, valid or not, correct or not.
    # rates 0.8 (correct), 0.4 (wrong), 1.0 (invalid) -> max 1.0 -> the wrong one gets 0.3 * 0.4
    r = entity_shaped_reward(
        torch.tensor([True, False, False]),
        torch.tensor([0.8, 0.4, 1.0]),
        torch.tensor([True, True, False]),
        torch.tensor([0, 0, 0]),
        alpha=0.3,
    )
    _close(r, [1.0, 0.12, 0.0])


def test_all_zero_match_group_gets_zero_no_nan():
    r = entity_shaped_reward(
        torch.zeros(4, dtype=torch.bool),
        torch.zeros(4),
        torch.ones(4, dtype=torch.bool),
        torch.tensor([3, 3, 3, 3]),
        alpha=0.3,
    )
    assert not torch.isnan(r).any()
    _close(r, [0.0] * 4)


def test_normalisation_is_per_group():
    # The same raw rate 0.2 in two groups: group 0's max is 0.2 (-> γ̂ 1), group 1's is 0.8 (-> 0.25).
    r = entity_shaped_reward(
        torch.zeros(4, dtype=torch.bool),
        torch.tensor([0.2, 0.2, 0.1, 0.8]),
        torch.ones(4, dtype=torch.bool),
        torch.tensor([0, 1, 0, 1]),
        alpha=0.3,
    )
    # group 0: 0.2/0.2 = 1 -> 0.3; 0.1/0.2 = 0.5 -> 0.15. group 1: 0.2/0.8 = 0.25 -> 0.075; 1 -> 0.3
    _close(r, [0.3, 0.075, 0.15, 0.3])


def test_alpha_zero_equals_binary_outcome_reward_on_random_inputs():
    gen = torch.Generator().manual_seed(11)
    for _ in range(10):
        n = 24
        ids = torch.randint(0, 5, (n,), generator=gen) * 7
        correct = torch.rand(n, generator=gen) < 0.4
        valid = torch.rand(n, generator=gen) < 0.8
        rate = torch.rand(n, generator=gen)
        rate[torch.rand(n, generator=gen) < 0.3] = 0.0
        r = entity_shaped_reward(correct, rate, valid, ids, alpha=0.0)
        expected = [1.0 if c and v else 0.0 for c, v in zip(correct.tolist(), valid.tolist())]
        _close(r, expected)


def test_rewards_in_unit_interval():
    gen = torch.Generator().manual_seed(12)
    n = 50
    r = entity_shaped_reward(
        torch.rand(n, generator=gen) < 0.3,
        torch.rand(n, generator=gen),
        torch.rand(n, generator=gen) < 0.9,
        torch.randint(0, 6, (n,), generator=gen),
        alpha=1.0,
    )
    assert ((r >= 0) & (r <= 1)).all()
