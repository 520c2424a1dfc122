"""HAPO (framework/algorithms/advantages/hapo.py) against ../shared/METHODS-2.md item 9."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.advantages.hapo import HAPOAdvantageConfig, hapo_advantage
from framework.algorithms.losses.hapo import (
    HAPOLossConfig,
    clip_widths,
    entropy_scores,
    hapo_loss,
    redistributed,
)
from framework.algorithms.losses.kl import KLConfig
from framework.algorithms.losses.ppo_clip import ClipLossConfig, ppo_clip_loss
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


def _ratios_inputs(ratios, adv, mask, log_entropy) -> PolicyLossInputs:
    """Old log-probs 0 and log-probs ``log(ratio)``: each token's ratio is the given one."""
    logp = torch.tensor(ratios, dtype=F64).log().requires_grad_(True)
    return PolicyLossInputs(
        logp,
        torch.zeros_like(logp),
        torch.tensor(adv, dtype=F64),
        torch.tensor(mask, dtype=torch.bool),
        entropy=torch.tensor(log_entropy, dtype=F64).exp(),
    )


def test_the_full_loss_by_hand():
    # two rollouts of two trained tokens and one padded position each (its entropy e^5 would be
    # the largest if it were read); rollout 0 has A = +1, rollout 1 A = -1; base clip 0.2/0.2,
    # alpha = beta = 1, pivot 0.8, dual clip c = 10, token mean
    x = HAPOLossConfig(name="hapo", agg="token_mean")
    inputs = _ratios_inputs(
        [[1.3, 1.0, 1.0], [12.0, 0.7, 1.0]],
        [1.0, -1.0],
        [[1, 1, 0], [1, 1, 0]],
        [[1.0, 0.0, 5.0], [0.5, -1.0, 5.0]],  # log H
    )
    # entropy scores over the 4 trained tokens, x = log H = [1, 0, 0.5, -1]:
    #   sorted [-1, 0, 0.5, 1], pivot index round(0.8 * 3) = 2 -> q = 0.5
    #   centred [0.5, -0.5, 0, -1.5]; the rms scale sqrt(2.75 / 4) = 0.829 cancels in the next
    #   step: positives / max (0.5), negatives / |min| (1.5) -> h = [1, -1/3, 0, -1]
    h = entropy_scores(inputs.entropy, inputs.token_mask)
    assert_close(h, torch.tensor([[1.0, -1 / 3, 0.0], [0.0, -1.0, 0.0]], dtype=F64))
    # clip widths: h <= 0: eps_low' = 0.2 (1 - h); h > 0: eps_high' = 0.2 (1 + h)
    #   t0 (h 1):    low 0.2,                     high 0.4   -> zone (0.9, 1.2)
    #   t1 (h -1/3): low 0.2 * 4/3 = 0.26667,     high 0.2   -> zone (0.86667, 1.1)
    #   t2 (h 0):    low 0.2,                     high 0.2   -> zone (0.9, 1.1)
    #   t3 (h -1):   low 0.4,                     high 0.2   -> zone (0.8, 1.1)
    lo, hi = clip_widths(h, 0.2, 0.2, 1.0)
    assert_close(lo[:, :2], torch.tensor([[0.2, 0.8 / 3], [0.2, 0.4]], dtype=F64))
    assert_close(hi[:, :2], torch.tensor([[0.4, 0.2], [0.2, 0.2]], dtype=F64))
    # redistributed advantages, A' = A (1 + h):
    #   t0: high entropy, ratio 1.3 outside its zone -> A' = 1 * 2 = 2
    #   t1: low entropy, ratio 1.0 inside its zone   -> A' = 1 * 2/3 = 2/3
    #   t2: h = 0, so A' = A = -1 either way
    #   t3: low entropy, ratio 0.7 outside its zone  -> A = -1 (A' would be 0)
    # per token, max(-A rho, -A clip(rho, 1 - low', 1 + high')), at most -10 A where A < 0:
    #   t0: max(-2 * 1.3, -2 * clip(1.3, 0.8, 1.4) = -2.6) = -2.6
    #   t1: max(-2/3 * 1, -2/3 * 1) = -2/3
    #   t2: max(12, 1 * clip(12, 0.8, 1.2) = 1.2) = 12, dual clip min(12, 10) = 10
    #   t3: max(0.7, 1 * clip(0.7, 0.6, 1.2) = 0.7) = 0.7
    # token mean: (-2.6 - 2/3 + 10 + 0.7) / 4 = 7.43333 / 4 = 1.858333
    # (without the dual clip 2.358333; without redistribution (-1.3 - 1 + 10 + 0.7) / 4 = 2.1;
    # with the base clip widths t0 -2.4 and t3 0.8: 1.933333)
    out = hapo_loss(inputs, cfg=x)
    assert float(out.loss.detach()) == pytest.approx((-2.6 - 2 / 3 + 10 + 0.7) / 4, abs=1e-12)
    assert float(out.metrics["entropy_score_mean"]) == pytest.approx(-1 / 12, abs=1e-12)
    assert float(out.metrics["clip_frac"]) == 0.0
    # gradient per token (d/d logp of -A' rho is -A' rho): t0 -2 * 1.3 / 4, t1 -(2/3) / 4, t2 0
    # (dual-clipped: constant), t3 0.7 / 4 (inside its widened clip; clipped at 0.8 by the base)
    (grad,) = torch.autograd.grad(out.loss, inputs.logprobs)
    want = torch.tensor([[-0.65, -1 / 6, 0.0], [0.0, 0.175, 0.0]], dtype=F64)
    assert_close(grad, want, atol=1e-12, rtol=0)


def test_the_dual_clip_bounds_the_redistributed_advantage_by_hand():
    # one rollout, A = -1, four trained tokens; log H = [1, 0.5, 0, -1]
    #   sorted [-1, 0, 0.5, 1], q = 0.5 -> centred [0.5, 0, -0.5, -1.5] -> h = [1, 0, -1/3, -1]
    x = HAPOLossConfig(name="hapo", agg="token_mean")
    inputs = _ratios_inputs(
        [[11.0, 1.0, 0.75, 1.05]], [-1.0], [[1, 1, 1, 1]], [[1.0, 0.5, 0.0, -1.0]]
    )
    #   t0 (h 1, zone (0.9, 1.2), high 0.4): ratio 11 outside -> A' = -1 * 2 = -2;
    #       max(2 * 11, 2 * 1.4) = 22 > -10 A' = 20: the dual clip acts -> 20
    #   t1 (h 0, widths 0.2/0.2): A = -1, ratio 1 -> max(1, 1) = 1 (ratio < 10: no dual clip)
    #   t2 (h -1/3, low 0.26667, zone (0.86667, 1.1)): ratio 0.75 outside -> A = -1;
    #       max(0.75, clip(0.75, 0.73333, 1.2) = 0.75) = 0.75
    #   t3 (h -1, low 0.4, zone (0.8, 1.1)): ratio 1.05 inside -> A' = -1 * 0 = 0 -> 0
    # token mean: (20 + 1 + 0.75 + 0) / 4 = 5.4375
    # (without the dual clip t0 22: 5.9375; without redistribution t0 min(11, 10) = 10 and t3
    # 1.05: 3.2; with the base widths t2 is clipped at 0.8: 5.45)
    out = hapo_loss(inputs, cfg=x)
    assert float(out.loss.detach()) == pytest.approx(5.4375, abs=1e-12)
    # the dual-clipped token has no gradient; t1 -(-1) * 1 / 4, t2 0.75 / 4, t3 0 (A' = 0)
    (grad,) = torch.autograd.grad(out.loss, inputs.logprobs)
    assert_close(grad, torch.tensor([[0.0, 0.25, 0.1875, 0.0]], dtype=F64), atol=1e-12, rtol=0)
    # dual_clip = 0 disables it: t0 gives 22
    off = hapo_loss(inputs, cfg=HAPOLossConfig(name="hapo", agg="token_mean", dual_clip=0.0))
    assert float(off.loss.detach()) == pytest.approx(5.9375, abs=1e-12)


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
