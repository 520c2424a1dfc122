"""SSL's tiered reward (reconstructed; framework/rewards/tiered.py) against ../shared/METHODS-2.md
item 12."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from framework.registry import REWARDS, load_components
from framework.rewards.outcome import OutcomeRewardConfig, outcome_reward
from framework.rewards.tiered import SweetSpotRewardConfig, sweet_spot_reward, tier_rewards
from framework.types import RewardInputs

load_components(plugins=False)


def batch(answers, gold="w x y z", status=None) -> RewardInputs:
    return RewardInputs(
        group_index=torch.zeros(len(answers), dtype=torch.long),
        completions=[f"<think>t</think><answer>{a}</answer>" for a in answers],
        columns={"golden_answers": [[gold]] * len(answers)},
        status=status,
    )


def test_worked_example():
    # F1 [0.1, 0.4, 0.6, 0.95], cuts 0.25 / 0.5 / 0.75 -> tiers [0, 1, 2, 3] -> [0, 1/7, 3/7, 1]
    got = tier_rewards(torch.tensor([0.1, 0.4, 0.6, 0.95]), 4)
    assert_close(got, torch.tensor([0.0, 1 / 7, 3 / 7, 1.0]))


def test_a_quality_on_a_cut_belongs_to_the_tier_above_and_one_is_the_top():
    got = tier_rewards(torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0]), 4)
    assert_close(got, torch.tensor([0.0, 1 / 7, 3 / 7, 1.0, 1.0]))


def test_the_reward_is_monotone_in_quality():
    q = torch.linspace(0, 1, 101)
    for k in (2, 3, 4, 6):
        r = tier_rewards(q, k)
        assert bool((r[1:] >= r[:-1]).all()) and float(r[0]) == 0.0 and float(r[-1]) == 1.0


def test_the_rollouts_answers_through_the_registry():
    # gold "w x y z": "w" F1 0.4 (tier 1), "w x y" F1 6/7 = 0.857 (tier 3, not exact: tier 2),
    # the exact answer tier 3, no overlap tier 0
    inputs = batch(["w", "w x y", "w x y z", "q"])
    got = REWARDS.bind(SweetSpotRewardConfig(name="sweet_spot"))(inputs)
    assert_close(got, torch.tensor([1 / 7, 3 / 7, 1.0, 0.0]))
    loose = sweet_spot_reward(inputs, cfg=SweetSpotRewardConfig(name="sweet_spot", exact_top=False))
    assert_close(loose, torch.tensor([1 / 7, 1.0, 1.0, 0.0]))


def test_two_tiers_with_the_exact_top_is_the_outcome_reward():
    inputs = batch(["w", "w x y", "w x y z", "q", "W X Y Z."], status=["ok"] * 4 + ["over_budget"])
    two = sweet_spot_reward(inputs, cfg=SweetSpotRewardConfig(name="sweet_spot", tiers=2))
    assert_close(two, outcome_reward(inputs, cfg=OutcomeRewardConfig(name="outcome")))


def test_format_errors_get_nothing():
    inputs = batch(["w x y z", "w x y z"], status=["ok", "format_error"])
    got = sweet_spot_reward(inputs, cfg=SweetSpotRewardConfig(name="sweet_spot"))
    assert got.tolist() == [1.0, 0.0]


@pytest.mark.parametrize("tiers", [0, 1])
def test_fewer_than_two_tiers_are_refused(tiers):
    (problem,) = SweetSpotRewardConfig(name="sweet_spot", tiers=tiers).problems()
    assert problem.path == "tiers"
