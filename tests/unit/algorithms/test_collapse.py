"""LLDS (exact) and SAPO for search agents (reconstructed): framework/algorithms/collapse.py against
../shared/METHODS-2.md item 16."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.collapse import (
    LLDSLossConfig,
    SAPOSearchLossConfig,
    action_index,
    llds_loss,
    llds_penalty,
    sapo_search_loss,
)
from framework.algorithms.losses import ClipLossConfig, ppo_clip_loss
from framework.cli.app import load_config
from framework.config import ConfigError
from framework.types import PolicyLossInputs

F64 = torch.float64
# one rollout: two actions of two trained tokens around a tool response (position 2)
MASK = torch.tensor([[1, 1, 0, 1, 1]])
D = torch.tensor([[0.2, -0.1, 0.0, -0.3, 0.1]], dtype=F64)  # old - new log-prob


def inputs(logp, old, adv, mask=MASK) -> PolicyLossInputs:
    return PolicyLossInputs(logprobs=logp, old_logprobs=old, advantages=adv, token_mask=mask.bool())


def llds(**kw) -> LLDSLossConfig:
    return LLDSLossConfig(name="llds", agg="token_mean", **kw)


def test_actions_are_runs_of_trained_tokens():
    assert action_index(torch.tensor([[1, 1, 0, 1, 1, 0], [0, 1, 0, 0, 1, 1]])).tolist() == [
        [1, 1, 0, 2, 2, 0],
        [0, 1, 0, 0, 2, 2],
    ]


def test_llds_worked_example():
    # action 1: d = [0.2, -0.1], sum 0.1 > 0, gate on; action 2: d = [-0.3, 0.1], sum -0.2, off
    # -> penalised [0.2, 0, 0, 0], mean over the 4 trained tokens 0.05, times lambda 0.2 = 0.01
    old = torch.zeros(1, 5, dtype=F64)
    logp = (-D).clone().requires_grad_(True)
    adv = torch.tensor([1.0], dtype=F64)
    got = llds_loss(inputs(logp, old, adv), cfg=llds())
    clip = ppo_clip_loss(
        inputs(logp, old, adv), cfg=ClipLossConfig(name="ppo_clip", agg="token_mean")
    )
    assert float((got.loss - clip.loss).detach()) == pytest.approx(0.01, abs=1e-12)
    assert float(got.metrics["llds_token_frac"]) == pytest.approx(0.25)
    # the term's gradient: -lambda / N on token 1 only
    logp.grad = None
    term = 0.2 * llds_penalty(logp, old, torch.ones(1, 5, dtype=F64), MASK.bool()).sum() / 4
    term.backward()
    assert_close(logp.grad, torch.tensor([[-0.05, 0.0, 0.0, 0.0, 0.0]], dtype=F64))


def test_llds_response_gate_and_negative_advantages():
    old = torch.zeros(1, 5, dtype=F64)
    # R-gate: the response's d sums to -0.1: off
    pen = llds_penalty(-D, old, torch.ones(1, 5, dtype=F64), MASK.bool(), gate="response")
    assert float(pen.abs().sum()) == 0.0
    # a negative-advantage rollout adds nothing, but its tokens count in the mean
    two = inputs(
        torch.cat([-D, -D]),
        torch.zeros(2, 5, dtype=F64),
        torch.tensor([1.0, -1.0], dtype=F64),
        torch.cat([MASK, MASK]),
    )
    clip = ppo_clip_loss(two, cfg=ClipLossConfig(name="ppo_clip", agg="token_mean"))
    assert float(llds_loss(two, cfg=llds()).loss - clip.loss) == pytest.approx(0.2 * 0.2 / 8)


def test_both_terms_are_zero_on_policy():
    gen = torch.Generator().manual_seed(0)
    logp = -torch.rand(3, 5, generator=gen, dtype=F64)
    adv = torch.tensor([1.0, 0.0, -1.0], dtype=F64)
    on = inputs(logp, logp.clone(), adv, torch.ones(3, 5))
    clip = ppo_clip_loss(on, cfg=ClipLossConfig(name="ppo_clip"))
    assert float(llds_loss(on, cfg=LLDSLossConfig(name="llds")).loss) == float(clip.loss)
    sapo = sapo_search_loss(on, cfg=SAPOSearchLossConfig(name="sapo_search"))
    assert float(sapo.loss) == float(clip.loss)


def test_sapo_worked_example():
    # A = 1, ratios [0.7, 0.95, 1.2], drop 0.2: only token 1 is held; k3(0.7) = 0.05667, mean over
    # 3 tokens 0.01889, beta 0.1 -> 0.001889
    ratios = torch.tensor([[0.7, 0.95, 1.2]], dtype=F64)
    old = torch.zeros(1, 3, dtype=F64)
    x = inputs(ratios.log(), old, torch.tensor([1.0], dtype=F64), torch.ones(1, 3))
    cfg = SAPOSearchLossConfig(name="sapo_search", agg="token_mean")
    clip = ppo_clip_loss(x, cfg=ClipLossConfig(name="ppo_clip", agg="token_mean"))
    k3 = 0.7 - 1 - math.log(0.7)
    assert k3 == pytest.approx(0.05667, abs=1e-5)
    assert float(sapo_search_loss(x, cfg=cfg).loss - clip.loss) == pytest.approx(0.1 * k3 / 3)
    # zero for a negative-advantage rollout and for ratios within the band
    neg = inputs(ratios.log(), old, torch.tensor([-1.0], dtype=F64), torch.ones(1, 3))
    assert float(sapo_search_loss(neg, cfg=cfg).metrics["sapo_term"]) == 0.0
    band = inputs(
        torch.tensor([[0.85, 1.1, 1.3]], dtype=F64).log(),
        old,
        torch.tensor([1.0], dtype=F64),
        torch.ones(1, 3),
    )
    assert float(sapo_search_loss(band, cfg=cfg).metrics["sapo_term"]) == 0.0


@pytest.mark.parametrize("bundle", ["llds", "sapo_search"])
def test_the_bundles_make_two_passes_and_one_pass_is_refused(bundle):
    assert load_config("train", [f"algorithm={bundle}"]).optim.policy_epochs == 2
    with pytest.raises(ConfigError, match=r"\[optim.policy_epochs\] got 1; expected at least 2"):
        load_config("train", [f"algorithm={bundle}", "optim.policy_epochs=1"])


def test_bad_settings_are_refused():
    assert [p.path for p in LLDSLossConfig(name="llds", gate="turn", coef=-1).problems()] == [
        "coef",
        "gate",
    ]
    assert [p.path for p in SAPOSearchLossConfig(name="sapo_search", drop=1.5).problems()] == [
        "drop"
    ]
