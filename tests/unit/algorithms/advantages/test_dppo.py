"""DPPO (reconstructed; framework/algorithms/advantages/dppo.py) against ../shared/METHODS-2.md item 15."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.advantages.dppo import (
    DPPOAdvantageConfig,
    dppo_advantage,
    keep_probabilities,
    pruned,
)
from framework.algorithms.advantages.grpo import grpo_advantage
from framework.types import AdvantageInputs

F64 = torch.float64


def test_worked_example():
    # two low-|A| completions (|A| < 0.1 max): q = 0.5; a draw that keeps one gives it weight 2
    adv = torch.tensor([1.0, -1.0, 0.05, -0.02], dtype=F64)
    q = keep_probabilities(adv, 0.1, 0.5)
    assert q.tolist() == [1.0, 1.0, 0.5, 0.5]
    gen = torch.Generator().manual_seed(0)
    draws = [pruned(adv, q, gen) for _ in range(40)]
    kept_one = next(d for d in draws if (d[2:] != 0).sum() == 1)
    k = int((kept_one[2:] != 0).nonzero()[0]) + 2
    assert float(kept_one[k]) == pytest.approx(2 * float(adv[k]))
    assert all(torch.equal(d[:2], adv[:2]) for d in draws)  # q = 1: never pruned, weight 1


def test_the_reweighted_advantage_is_unbiased():
    # averaged over many draws, the pruned-and-reweighted advantages (and a loss linear in them)
    # recover the unpruned ones
    adv = torch.tensor([0.8, -0.6, 0.03, -0.05, 0.0, 0.07], dtype=F64)
    q = keep_probabilities(adv, 0.1, 0.5)
    gen = torch.Generator().manual_seed(1)
    mean = torch.stack([pruned(adv, q, gen) for _ in range(20000)]).mean(0)
    assert_close(mean, adv, atol=2e-3, rtol=0)


def test_through_the_registry_config_a_batch_repeats_and_keep_one_is_grpo():
    inputs = AdvantageInputs(
        torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.9], dtype=F64),
        torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]),
        token_mask=torch.ones(8, 3, dtype=torch.bool),
    )
    cfg = DPPOAdvantageConfig(name="dppo", threshold=0.5)
    first = dppo_advantage(inputs, cfg=cfg)
    assert torch.equal(first, dppo_advantage(inputs, cfg=cfg))
    every = dppo_advantage(inputs, cfg=DPPOAdvantageConfig(name="dppo", keep_prob=1.0))
    assert_close(every, grpo_advantage(inputs, cfg=cfg))


@pytest.mark.parametrize("field,value", [("keep_prob", 0.0), ("threshold", 1.5)])
def test_bad_settings_are_refused(field, value):
    problems = DPPOAdvantageConfig(name="dppo", **{field: value}).problems()
    assert [p.path for p in problems] == [field]
