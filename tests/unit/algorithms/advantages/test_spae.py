"""SPAE (partial; framework/algorithms/advantages/spae.py) against ../shared/METHODS-2.md item 4."""

from __future__ import annotations

import math

import pytest

from framework.algorithms.advantages.spae import (
    SPAEAdvantageConfig,
    probe_accuracy,
    probe_confidence,
    spae_advantage,
)
from framework.registry import INPUT_PROVIDERS, load_components
from tests.unit.algorithms.advantages.test_turn_advantages import layout, per_turn

load_components(plugins=False)
CFG = SPAEAdvantageConfig(name="spae", unbiased_std=False)


def test_probe_worked_example():
    # N = 2: probe 1's entropies [0.5, 1.5], probe 2's [0.2] -> Conf = (e^-1 + e^-0.2) / 2;
    # gold token probabilities [0.9, 0.5] and [0.6, 0.4] -> Acc = (0.7 + 0.5) / 2 = 0.6
    conf = probe_confidence([[0.5, 1.5], [0.2]])
    acc = probe_accuracy([[0.9, 0.5], [0.6, 0.4]])
    assert conf == pytest.approx((math.exp(-1.0) + math.exp(-0.2)) / 2)
    assert conf == pytest.approx(0.5933, abs=1e-4) and acc == pytest.approx(0.6)
    assert acc * conf == pytest.approx(0.3560, abs=1e-4)


def case(**extras):
    # rollout 0 (right, 3 turns): potential before its turns 0.2, 0.9, 0.95; rollout 1 (wrong, 2
    # turns): 0.2, 0.1. GRPO with the population std: +1 and -1.
    return layout(
        rollouts=[[(2, 1), (2, 1), (2, 0)], [(2, 1), (2, 0)]],
        groups=[0, 0],
        rewards=[1.0, 0.0],
        extras={"gold_potential": [[0.2, 0.9, 0.95], [0.2, 0.1, 0.0]], **extras},
    )


def test_spae_by_hand():
    inputs = case()
    got = per_turn(spae_advantage(inputs, cfg=CFG), inputs)
    # rollout 0: f = [1, 0.5, 0.5] (saturated from the probe before turn 1), dPhi = [0.7, 0.05, 0]
    # -> [1 + 0.07, 0.5 + 0.005, 0.5]; rollout 1 (wrong: f = 1): dPhi = [-0.1, 0] -> [-1.01, -1]
    assert got[0] == pytest.approx([1.07, 0.505, 0.5], abs=1e-5)
    assert got[1] == pytest.approx([-1.01, -1.0], abs=1e-5)


def test_without_penalty_and_gain_spae_is_grpo_on_every_turn():
    inputs = case()
    plain = SPAEAdvantageConfig(name="spae", unbiased_std=False, kappa=0.0, xi=0.0)
    assert per_turn(spae_advantage(inputs, cfg=plain), inputs) == [
        pytest.approx([1.0] * 3, abs=1e-5),
        pytest.approx([-1.0] * 2, abs=1e-5),
    ]


def test_spae_needs_its_provider():
    assert "gold_potential" in INPUT_PROVIDERS
    inputs = case()
    inputs.extras.pop("gold_potential")
    with pytest.raises(ValueError, match="gold_potential"):
        spae_advantage(inputs, cfg=CFG)
