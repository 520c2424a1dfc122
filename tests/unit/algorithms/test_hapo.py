"""HAPO (framework/algorithms/heterogeneous.py) against ../shared/METHODS-2.md item 9."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.heterogeneous import (
    HAPOAdvantageConfig,
    HAPOLossConfig,
    clip_widths,
    entropy_scores,
    hapo_advantage,
    hapo_loss,
    redistributed,
)
from framework.algorithms.kl import KLConfig
from framework.algorithms.losses import ClipLossConfig, ppo_clip_loss
from framework.rl.update import loss_spec
from framework.types import AdvantageInputs, PolicyLossInputs

F64 = torch.float64
CFG = HAPOAdvantageConfig(name="hapo")


def lengths_mask(lengths, width=None):
    width = max(lengths) if width is None else width
    return torch.tensor([[1] * n + [0] * (width - n) for n in lengths], dtype=torch.bool)


def test_token_level_group_average_worked_example():
    # rewards [1, 0, 0, 1], lengths [1, 3, 2, 2]: mu = 3/8, sigma = 0.48412
    inputs = AdvantageInputs(
        torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=F64),
        torch.zeros(4, dtype=torch.long),
        token_mask=lengths_mask([1, 3, 2, 2]),
    )
    got = hapo_advantage(inputs, cfg=CFG)
    assert_close(
        got, torch.tensor([1.2910, -0.7746, -0.7746, 1.2910], dtype=F64), atol=1e-4, rtol=0
    )
    sigma = math.sqrt((1 * 0.625**2 + 3 * 0.375**2 + 2 * 0.375**2 + 2 * 0.625**2) / 8)
    assert sigma == pytest.approx(0.48412, abs=1e-5)


def test_the_fallback_reads_the_rollouts_own_advantages():
    # G = 16, fifteen 1s and one 0.3, equal lengths: the lowest advantage is -3.87, under 5, so
    # no fallback (the released code's padded-position test would fall back here)
    rewards = torch.tensor([1.0] * 15 + [0.3], dtype=F64)
    inputs = AdvantageInputs(
        rewards, torch.zeros(16, dtype=torch.long), token_mask=lengths_mask([3] * 16)
    )
    got = hapo_advantage(inputs, cfg=CFG)
    assert float(got[-1]) == pytest.approx(-3.873, abs=1e-3)
    # the same with every rollout shorter than the padded width (3 trained tokens of 5): the
    # padded positions' (0 - 0.95625) / 0.16944 = -5.64 is not read, so still no fallback (the
    # released code falls back to GRPO here and gives (0.3 - 0.95625) / 0.175 = -3.75)
    padded = AdvantageInputs(
        rewards, torch.zeros(16, dtype=torch.long), token_mask=lengths_mask([3] * 16, width=5)
    )
    assert_close(hapo_advantage(padded, cfg=CFG), got)
    # a group with an outlier length falls back to GRPO with the unbiased std: +-0.866 for [1,0,0,1]
    skew = AdvantageInputs(
        torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=F64),
        torch.zeros(4, dtype=torch.long),
        token_mask=lengths_mask([1, 1, 1, 60]),
    )
    low = hapo_advantage(skew, cfg=HAPOAdvantageConfig(name="hapo", fallback=0.5))
    assert_close(low, torch.tensor([0.866, -0.866, -0.866, 0.866], dtype=F64), atol=1e-3, rtol=0)


def test_a_rollout_without_trained_tokens_gets_zero_and_cannot_trigger_the_fallback():
    # rewards [1, 0, 0, 0], lengths [0, 5, 5, 5]; token weights 0, 5, 5, 5 (sum 15):
    #   mu = (0*1 + 5*0 + 5*0 + 5*0) / 15 = 0;  sigma^2 = (0*(1-0)^2 + 15*(0-0)^2) / 15 = 0
    #   rollouts 1-3: (0 - 0) / (0 + 1e-6) = 0
    #   rollout 0 has no token: it gets 0 (the formula's (1 - 0) / 1e-6 = 1e6 is no advantage of
    #   any token, so it must not reach the fallback test); max |A| = 0 < 5: no fallback
    # -> [0, 0, 0, 0] (the old code read the 1e6 and fell back to GRPO: [1.5, -0.5, -0.5, -0.5])
    inputs = AdvantageInputs(
        torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=F64),
        torch.zeros(4, dtype=torch.long),
        token_mask=lengths_mask([0, 5, 5, 5]),
    )
    assert hapo_advantage(inputs, cfg=CFG).tolist() == [0.0, 0.0, 0.0, 0.0]
    # a zero-length rollout in a group that does fall back gets 0 too; GRPO's values for the
    # others still count its reward: rewards [1, 1, 0, 0], lengths [0, 1, 1, 60], fallback 0.5:
    #   GRPO mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.57735 -> +-0.866, rollout 0 -> 0
    fall = AdvantageInputs(
        torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=F64),
        torch.zeros(4, dtype=torch.long),
        token_mask=lengths_mask([0, 1, 1, 60]),
    )
    got = hapo_advantage(fall, cfg=HAPOAdvantageConfig(name="hapo", fallback=0.5))
    assert_close(got, torch.tensor([0.0, 0.866, -0.866, -0.866], dtype=F64), atol=1e-3, rtol=0)


def test_entropy_scores_pivot_on_the_quantile_and_lie_in_minus_one_one():
    gen = torch.Generator().manual_seed(0)
    ent = torch.rand(3, 7, generator=gen, dtype=F64) * 2
    mask = torch.rand(3, 7, generator=gen) > 0.2
    h = entropy_scores(ent, mask)
    assert float(h.max()) == pytest.approx(1.0) and float(h.min()) == pytest.approx(-1.0)
    assert float(h[~mask].abs().sum()) == 0.0
    x = ent[mask].log().sort().values
    pivot = x[round(0.8 * (x.numel() - 1))]
    # the pivot token scores 0 and the order of entropies is kept
    assert float(h[mask][ent[mask].log() == pivot].abs().max()) == 0.0
    order = ent[mask].argsort()
    assert bool((h[mask][order][1:] >= h[mask][order][:-1]).all())


def test_clip_widths_and_redistribution_worked_example():
    lo, hi = clip_widths(torch.tensor([0.5, -0.5]), 0.2, 0.2, 1.0)
    assert_close(hi[0], torch.tensor(0.3)) and assert_close(lo[0], torch.tensor(0.2))
    assert_close(lo[1], torch.tensor(0.3)) and assert_close(hi[1], torch.tensor(0.2))
    # A = 1, h = 0.5: zone (0.9, 1.15); ratio 1.0 -> 1.0, 1.14 -> 1.0 (inside), 1.2 -> 1.5
    scores = torch.full((3,), 0.5)
    lo, hi = clip_widths(scores, 0.2, 0.2, 1.0)
    eff = redistributed(torch.ones(3), torch.tensor([1.0, 1.14, 1.2]), scores, lo, hi, 1.0)
    assert_close(eff, torch.tensor([1.0, 1.0, 1.5]))
    # a low-entropy token gets A' inside its zone and A outside
    neg = torch.full((2,), -0.5)
    lo, hi = clip_widths(neg, 0.2, 0.2, 1.0)
    eff = redistributed(torch.ones(2), torch.tensor([1.0, 1.5]), neg, lo, hi, 1.0)
    assert_close(eff, torch.tensor([0.5, 1.0]))


def test_without_adaptation_hapo_is_ppo_clip():
    gen = torch.Generator().manual_seed(1)
    logp = -torch.rand(4, 6, generator=gen, dtype=F64)
    old = logp + 0.3 * torch.randn(4, 6, generator=gen, dtype=F64)
    x = PolicyLossInputs(
        logp,
        old,
        torch.tensor([1.0, -1.0, 0.5, -0.2], dtype=F64),
        torch.ones(4, 6, dtype=torch.bool),
        entropy=torch.rand(4, 6, generator=gen, dtype=F64),
    )
    plain = HAPOLossConfig(name="hapo", alpha=0.0, beta=0.0, dual_clip=0.0)
    clip = ClipLossConfig(name="ppo_clip", clip_low=0.2, clip_high=0.2)
    assert_close(hapo_loss(x, cfg=plain).loss, ppo_clip_loss(x, cfg=clip).loss)


def test_the_loss_needs_the_entropy_and_the_trainer_provides_it():
    x = PolicyLossInputs(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1), torch.ones(1, 2))
    with pytest.raises(ValueError, match=r"\[loss.hapo\] got PolicyLossInputs without entropy"):
        hapo_loss(x, cfg=HAPOLossConfig(name="hapo"))
    assert loss_spec(HAPOLossConfig(name="hapo"), KLConfig(name="k3")).needs_entropy


def test_the_bundle_takes_the_token_mean_of_the_authors_code():
    # recipe/*.sh: loss_agg_mode="token-mean" (the framework's default is seq_mean_token_mean)
    from framework.cli.app import load_config

    assert load_config("train", ["algorithm=hapo"]).loss.agg == "token_mean"
