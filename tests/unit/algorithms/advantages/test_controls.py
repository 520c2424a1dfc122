"""The control arms' advantages: hand-computed values and the invariants that make them controls."""

from __future__ import annotations

import pytest
import torch

from framework.algorithms.advantages.grpo import GRPOAdvantageConfig, grpo_advantage
from framework.algorithms.advantages.placebo import (
    PlaceboAdvantageConfig,
    placebo_advantage,
    shuffled_rewards,
)
from framework.algorithms.advantages.raft import RAFTAdvantageConfig, raft_advantage
from framework.registry import ADVANTAGES
from framework.types import AdvantageInputs

GROUPS = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])


def test_raft_accepts_rewards_at_the_threshold_and_has_no_baseline():
    r = torch.tensor([1.0, 0.0, 0.3, 1.0])
    inputs = AdvantageInputs(rewards=r, group_index=torch.tensor([0, 0, 1, 1]))
    assert raft_advantage(inputs, cfg=RAFTAdvantageConfig(name="raft")).tolist() == [1, 0, 0, 1]
    low = RAFTAdvantageConfig(name="raft", threshold=0.3)
    assert raft_advantage(inputs, cfg=low).tolist() == [1, 0, 1, 1]
    # integer rewards become the default float dtype
    ints = AdvantageInputs(rewards=torch.tensor([1, 0]), group_index=torch.tensor([0, 0]))
    assert raft_advantage(ints, cfg=RAFTAdvantageConfig(name="raft")).dtype == torch.float32
    assert RAFTAdvantageConfig(name="raft", threshold=0.0).problems()


def test_placebo_is_grpo_of_the_batch_permuted_by_the_seeded_generator():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    torch.manual_seed(7)
    got = placebo_advantage(
        AdvantageInputs(rewards=r, group_index=GROUPS), cfg=PlaceboAdvantageConfig(name="placebo")
    )
    torch.manual_seed(7)
    perm = torch.randperm(8)
    want = grpo_advantage(
        AdvantageInputs(rewards=r[perm], group_index=GROUPS), cfg=GRPOAdvantageConfig(name="grpo")
    )
    assert torch.equal(got, want)
    # each group's advantages still sum to 0 (GRPO's invariant), whatever the permutation
    for g in (0, 1):
        assert float(got[g == GROUPS].sum()) == pytest.approx(0.0, abs=1e-6)


def test_placebo_advantages_are_unrelated_to_the_rollouts_rewards():
    # over many batches the advantage of a rewarded rollout averages what an unrewarded one gets
    gen = torch.Generator().manual_seed(0)
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    rewarded, unrewarded = [], []
    for _ in range(4000):
        shuffled = shuffled_rewards(r, gen)
        adv = grpo_advantage(
            AdvantageInputs(rewards=shuffled, group_index=GROUPS), cfg=GRPOAdvantageConfig(name="g")
        )
        rewarded.append(float(adv[r == 1].mean()))
        unrewarded.append(float(adv[r == 0].mean()))
    assert sum(rewarded) / 4000 == pytest.approx(0.0, abs=0.03)
    assert sum(unrewarded) / 4000 == pytest.approx(0.0, abs=0.03)
    # GRPO itself: rewarded rollouts get clearly positive advantages
    real = grpo_advantage(
        AdvantageInputs(rewards=r, group_index=GROUPS), cfg=GRPOAdvantageConfig(name="g")
    )
    assert float(real[r == 1].mean()) > 0.5
    # a permutation keeps the batch's rewards
    assert sorted(shuffled_rewards(r, gen).tolist()) == sorted(r.tolist())


def test_controls_are_registered():
    assert {"placebo", "raft"} <= set(ADVANTAGES.names())
