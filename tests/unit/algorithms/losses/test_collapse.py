"""LLDS (exact) and SAPO for search agents (exact, the paper's Eq. 9-11):
framework/algorithms/losses/llds.py against ../shared/METHODS-2.md item 16."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.losses.llds import LLDSLossConfig, action_index, llds_loss, llds_penalty
from framework.algorithms.losses.ppo_clip import ClipLossConfig, ppo_clip_loss
from framework.algorithms.losses.sapo_search import SAPOSearchLossConfig, sapo_search_loss
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


@pytest.mark.parametrize("gate", ["action", "response"])
def test_llds_gates_over_runs_of_non_negative_per_token_advantages(gate):
    # one action of three trained tokens whose per-token advantages change sign (the reviewer's
    # example): d = old - new = [0.2, -0.3, 0.5], A = [1, 1, -1]
    # authors' code: the run of A_t >= 0 tokens is tokens 1-2, sum d = 0.2 - 0.3 = -0.1 <= 0, gate
    # off; token 3 (A < 0) is in no run -> penalised [0, 0, 0], term 0
    # (gating the whole action, sum 0.4 > 0, penalised [0.2, 0, 0]: 0.2 * 0.2 / 3 = 0.01333)
    d = torch.tensor([[0.2, -0.3, 0.5]], dtype=F64)
    adv = torch.tensor([[1.0, 1.0, -1.0]], dtype=F64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    old = torch.zeros(1, 3, dtype=F64)
    assert float(llds_penalty(-d, old, adv, mask, gate).abs().sum()) == 0.0
    x = inputs(-d, old, adv, mask)
    got = llds_loss(x, cfg=llds(gate=gate))
    clip = ppo_clip_loss(x, cfg=ClipLossConfig(name="ppo_clip", agg="token_mean"))
    assert float(got.loss - clip.loss) == pytest.approx(0.0, abs=1e-15)
    assert float(got.metrics["llds_term"]) == 0.0


def test_a_sign_change_inside_an_action_splits_its_gate():
    # one action, d = [0.2, 0.4, -0.1, 0.1], A = [1, -1, 1, 1]: runs of A_t >= 0 are {1} (sum 0.2,
    # on) and {3, 4} (sum 0.0, off; token 2's 0.4 is not counted) -> penalised [0.2, 0, 0, 0]
    # mean over the 4 trained tokens 0.05, times lambda 0.2 = 0.01
    # (one gate over the action, sum 0.6: [0.2, 0, 0, 0.1], 0.2 * 0.3 / 4 = 0.015)
    d = torch.tensor([[0.2, 0.4, -0.1, 0.1]], dtype=F64)
    adv = torch.tensor([[1.0, -1.0, 1.0, 1.0]], dtype=F64)
    mask = torch.ones(1, 4, dtype=torch.bool)
    old = torch.zeros(1, 4, dtype=F64)
    pen = llds_penalty(-d, old, adv, mask)
    assert_close(pen, torch.tensor([[0.2, 0.0, 0.0, 0.0]], dtype=F64))
    x = inputs(-d, old, adv, mask)
    got = llds_loss(x, cfg=llds())
    clip = ppo_clip_loss(x, cfg=ClipLossConfig(name="ppo_clip", agg="token_mean"))
    assert float(got.loss - clip.loss) == pytest.approx(0.01, abs=1e-12)
    # the R-gate sums the A_t >= 0 tokens only: 0.2 - 0.1 + 0.1 = 0.2 > 0, on -> [0.2, 0, 0, 0.1]
    pen = llds_penalty(-d, old, adv, mask, gate="response")
    assert_close(pen, torch.tensor([[0.2, 0.0, 0.0, 0.1]], dtype=F64))


def test_both_terms_are_zero_on_policy():
    gen = torch.Generator().manual_seed(0)
    logp = -torch.rand(3, 5, generator=gen, dtype=F64)
    adv = torch.tensor([1.0, 0.0, -1.0], dtype=F64)
    on = inputs(logp, logp.clone(), adv, torch.ones(3, 5))
    clip = ppo_clip_loss(on, cfg=ClipLossConfig(name="ppo_clip"))
    assert float(llds_loss(on, cfg=LLDSLossConfig(name="llds")).loss) == float(clip.loss)
    sapo = sapo_search_loss(on, cfg=SAPOSearchLossConfig(name="sapo_search"))
    assert float(sapo.loss) == float(clip.loss)


def sapo(**kw) -> SAPOSearchLossConfig:
    return SAPOSearchLossConfig(name="sapo_search", **kw)


def test_sapo_worked_example():
    # Eq. 9-11 with the paper's gamma 0.1, tau 1.0 and Eq. 9's 1/G sum_i 1/|o_i| sum_t:
    # row 0: A = +1, ratios [0.5, 0.9, 1.2] -> tokens 0 and 1 held (ratio < 1), token 2 not;
    #        -log 0.5 = 0.693147, -log 0.9 = 0.105361, sum 0.798508, over |o| = 3: 0.266169
    # row 1: A = -1, ratios [0.5, 0.8] (2 trained tokens): not held (A <= 0) -> 0
    # row 2: A = 0, ratio [0.5] (1 trained token): not held (Eq. 11 wants A > 0) -> 0
    # term = (0.266169 + 0 + 0) / 3 rollouts = 0.088723; gamma 0.1 -> 0.0088723 over PPO-clip
    ratios = torch.tensor([[0.5, 0.9, 1.2], [0.5, 0.8, 1.0], [0.5, 1.0, 1.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]])
    old = torch.zeros(3, 3, dtype=F64)
    logp = ratios.log().requires_grad_(True)
    x = inputs(logp, old, torch.tensor([1.0, -1.0, 0.0], dtype=F64), mask)
    got = sapo_search_loss(x, cfg=sapo())
    clip = ppo_clip_loss(x, cfg=ClipLossConfig(name="ppo_clip"))
    term = (math.log(2) - math.log(0.9)) / 3 / 3
    assert term == pytest.approx(0.0887231, abs=1e-7)
    assert float(got.metrics["sapo_term"]) == pytest.approx(term, abs=1e-12)
    assert float((got.loss - clip.loss).detach()) == pytest.approx(0.1 * term, abs=1e-12)
    assert float(got.metrics["sapo_token_frac"]) == pytest.approx(2 / 6)
    # the term's gradient (Eq. 12): -gamma / (G |o_i|) = -0.1 / (3 * 3) on the two held tokens
    (got.loss - clip.loss).backward()
    held = torch.zeros(3, 3, dtype=F64)
    held[0, :2] = -0.1 / 9
    assert_close(logp.grad, held)
    # token_mean instead: the sum 0.798508 over all 6 trained tokens
    tm = sapo_search_loss(x, cfg=sapo(agg="token_mean"))
    assert float(tm.metrics["sapo_term"]) == pytest.approx((math.log(2) - math.log(0.9)) / 6)


def test_sapo_threshold_is_strict_and_may_exceed_one():
    old = torch.zeros(1, 3, dtype=F64)
    ratios = torch.tensor([[1.0, 1.1, 0.8]], dtype=F64)
    x = inputs(ratios.log(), old, torch.tensor([1.0], dtype=F64), torch.ones(1, 3))
    # tau 0.8: 0.8 < 0.8 is false, nothing is held
    assert float(sapo_search_loss(x, cfg=sapo(threshold=0.8)).metrics["sapo_token_frac"]) == 0.0
    # tau 1.2 (the paper's ablation): all three held; -log 1 = 0, -log 1.1 < 0, -log 0.8 > 0
    got = sapo_search_loss(x, cfg=sapo(threshold=1.2, agg="token_mean"))
    assert float(got.metrics["sapo_token_frac"]) == pytest.approx(1.0)
    assert float(got.metrics["sapo_term"]) == pytest.approx(-(math.log(1.1) + math.log(0.8)) / 3)


def test_sapo_penalises_only_what_the_condition_holds():
    # random off-policy rows: the term's gradient is -gamma / (G |o_i|) where A > 0, ratio < tau
    # and the token is trained, and exactly 0 everywhere else
    gen = torch.Generator().manual_seed(1)
    n, length = 6, 7
    old = -torch.rand(n, length, generator=gen, dtype=F64) - 0.1
    logp = (old + 0.4 * torch.randn(n, length, generator=gen, dtype=F64)).requires_grad_(True)
    mask = torch.rand(n, length, generator=gen) < 0.7
    mask[:, 0] = True
    adv = torch.tensor([1.0, -0.5, 0.0, 2.0, -1.0, 0.3], dtype=F64)
    x = inputs(logp, old, adv, mask)
    cfg = sapo(coef=0.1, threshold=1.0)
    clip = ppo_clip_loss(x, cfg=ClipLossConfig(name="ppo_clip"))
    (sapo_search_loss(x, cfg=cfg).loss - clip.loss).backward()
    ratio = (logp - old).detach().exp()
    held = mask & (adv[:, None] > 0) & (ratio < 1.0)
    # some tokens held, some of positive rollouts left out by their ratio, some by their advantage
    assert held.any() and (mask & (adv[:, None] > 0) & ~held).any()
    assert (mask & (adv[:, None] <= 0) & (ratio < 1.0)).any()
    want = torch.where(held, -0.1 / (n * mask.sum(-1, keepdim=True)), 0.0).to(F64)
    assert_close(logp.grad, want)


def test_sapo_with_coef_zero_is_ppo_clip():
    gen = torch.Generator().manual_seed(2)
    old = -torch.rand(4, 5, generator=gen, dtype=F64)
    logp = old + 0.3 * torch.randn(4, 5, generator=gen, dtype=F64)
    adv = torch.tensor([1.0, -1.0, 0.5, 0.0], dtype=F64)
    for agg in ("token_mean", "seq_mean_token_mean"):
        a = logp.clone().requires_grad_(True)
        b = logp.clone().requires_grad_(True)
        got = sapo_search_loss(inputs(a, old, adv, torch.ones(4, 5)), cfg=sapo(coef=0.0, agg=agg))
        clip = ppo_clip_loss(
            inputs(b, old, adv, torch.ones(4, 5)), cfg=ClipLossConfig(name="ppo_clip", agg=agg)
        )
        assert float(got.loss.detach()) == float(clip.loss.detach())
        got.loss.backward()
        clip.loss.backward()
        assert_close(a.grad, b.grad)


def test_the_llds_bundle_takes_the_token_mean_of_the_authors_code():
    # dp_actor.py: verl_F.masked_mean over the response mask for the clip loss and the term alike
    assert load_config("train", ["algorithm=llds"]).loss.agg == "token_mean"


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
    assert [p.path for p in sapo(coef=-0.1, threshold=0.0).problems()] == ["coef", "threshold"]
    with pytest.raises(ConfigError, match=r"\[loss.threshold\] got -1.0; expected a number > 0"):
        load_config("train", ["algorithm=sapo_search", "loss.threshold=-1.0"])
