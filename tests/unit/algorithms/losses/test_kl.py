"""KL estimators k1/k2/k3 and the KL penalty."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.losses.kl import K3Config, KLConfig, kl_k1, kl_k2, kl_k3
from framework.algorithms.losses.objective import add_kl_penalty
from framework.cli.app import load_config
from framework.config import ConfigError
from framework.types import LossOutput

F64 = torch.float64
CFG = K3Config(name="k3")  # k1/k2 read only KLConfig's fields; k3 its cap (10) too
ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


def test_hand_values():
    # logp = log 0.5, ref = log 0.25: log r = log(0.25 / 0.5) = log 0.5 = -0.693147
    #   k1 = -log r = 0.693147
    #   k2 = (log r)^2 / 2 = 0.480453 / 2 = 0.240227
    #   k3 = r - 1 - log r = 0.5 - 1 + 0.693147 = 0.193147
    logp = torch.tensor([[math.log(0.5)]], dtype=F64)
    ref = torch.tensor([[math.log(0.25)]], dtype=F64)
    assert_close(
        kl_k1(logp, ref, cfg=CFG), torch.tensor([[0.693147]], dtype=F64), atol=1e-6, rtol=0
    )
    assert_close(
        kl_k2(logp, ref, cfg=CFG), torch.tensor([[0.240227]], dtype=F64), atol=1e-6, rtol=0
    )
    assert_close(
        kl_k3(logp, ref, cfg=CFG), torch.tensor([[0.193147]], dtype=F64), atol=1e-6, rtol=0
    )


def test_hand_values_reference_more_likely():
    # logp = log 0.25, ref = log 0.5: log r = log 2 = 0.693147, r = 2
    #   k1 = -0.693147 (k1 can be negative), k2 = 0.240227, k3 = 2 - 1 - 0.693147 = 0.306853
    logp = torch.tensor([math.log(0.25)], dtype=F64)
    ref = torch.tensor([math.log(0.5)], dtype=F64)
    assert_close(kl_k1(logp, ref, cfg=CFG), torch.tensor([-0.693147], dtype=F64), atol=1e-6, rtol=0)
    assert_close(kl_k2(logp, ref, cfg=CFG), torch.tensor([0.240227], dtype=F64), atol=1e-6, rtol=0)
    assert_close(kl_k3(logp, ref, cfg=CFG), torch.tensor([0.306853], dtype=F64), atol=1e-6, rtol=0)


def test_k3_non_negative_on_random_inputs():
    gen = torch.Generator().manual_seed(0)
    logp = -torch.rand(64, 32, generator=gen, dtype=F64) * 10
    ref = -torch.rand(64, 32, generator=gen, dtype=F64) * 10
    assert (kl_k3(logp, ref, cfg=CFG) >= 0).all()
    assert (kl_k2(logp, ref, cfg=CFG) >= 0).all()


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_zero_when_policies_agree(name):
    logp = -torch.rand(4, 7, generator=torch.Generator().manual_seed(1), dtype=F64) * 5
    out = ESTIMATORS[name](logp, logp.clone(), cfg=CFG)
    assert out.shape == logp.shape
    assert torch.equal(out, torch.zeros_like(out))


def test_k3_finite_when_reference_rejects_token():
    # ref logprob -1e4: the log ratio is clamped to -20 so nothing overflows.
    logp = torch.tensor([[-0.1]], dtype=F64)
    ref = torch.tensor([[-1e4]], dtype=F64)
    for fn in ESTIMATORS.values():
        assert torch.isfinite(fn(logp, ref, cfg=CFG)).all()
    # policy rejects a token the reference likes: r = exp(+20) would be huge but finite
    assert torch.isfinite(kl_k3(ref, logp, cfg=CFG)).all()


def test_k1_and_k3_are_unbiased_estimators_of_kl():
    # Tokens x ~ p; logprobs = log p(x), ref = log q(x). E_p[k1] = E_p[k3] = KL(p || q).
    p = torch.tensor([0.5, 0.25, 0.15, 0.1], dtype=F64)
    q = torch.tensor([0.25, 0.25, 0.25, 0.25], dtype=F64)
    # KL(p||q) = sum p log(p/q) = 0.5 log 2 + 0 + 0.15 log 0.6 + 0.1 log 0.4
    #          = 0.346574 - 0.076624 - 0.091629 = 0.178320
    exact = sum(pi * math.log(pi / qi) for pi, qi in zip(p.tolist(), q.tolist()))
    assert abs(exact - 0.178320) < 1e-5
    gen = torch.Generator().manual_seed(2024)
    x = torch.multinomial(p, 200_000, replacement=True, generator=gen)
    logp, ref = p.log()[x], q.log()[x]
    k1 = kl_k1(logp, ref, cfg=CFG)
    k3 = kl_k3(logp, ref, cfg=CFG)
    # standard errors here are about 0.0013 (k1) and 0.0006 (k3): 0.006 is > 4 sigma
    assert abs(k1.mean().item() - exact) < 0.006
    assert abs(k3.mean().item() - exact) < 0.006
    # k2 estimates 0.5 E_p[(log p/q)^2] = 0.5 (0.5 * 0.480453 + 0.15 * 0.260943 + 0.1 * 0.839589)
    #   = 0.181663 (a biased estimate of the KL)
    k2_expected = 0.5 * sum(pi * math.log(pi / qi) ** 2 for pi, qi in zip(p.tolist(), q.tolist()))
    assert abs(k2_expected - 0.181663) < 1e-5
    assert abs(kl_k2(logp, ref, cfg=CFG).mean().item() - k2_expected) < 0.006


# --------------------------------------------------------------------------- k3's cap


def _k3_and_grad(log_r: float, cfg: K3Config) -> tuple[float, float]:
    """k3 at ``log r = log π_ref - log π_θ`` and its gradient in ``log π_θ``."""
    logp = torch.tensor([-1.0 - log_r], dtype=F64, requires_grad=True)
    ref = torch.tensor([-1.0], dtype=F64)
    k3 = kl_k3(logp, ref, cfg=cfg)
    k3.sum().backward()
    assert logp.grad is not None
    return k3.item(), logp.grad.item()


def test_k3_default_cap_is_verls_10():
    assert K3Config(name="k3").cap == 10.0
    assert load_config("train", ["algorithm=grpo"]).kl.cap == 10.0
    assert load_config("train", ["algorithm=grpo", "kl.cap=3.5"]).kl.cap == 3.5
    # the cap is k3's: k1 and k2 keep the plain KLConfig
    k1 = load_config("train", ["algorithm=grpo", "kl=k1"]).kl
    assert type(k1) is KLConfig and not hasattr(k1, "cap")


def test_k3_capped_at_log_ratio_10_with_zero_gradient():
    # log r = 10 (the reference gives the token e^10 times the policy's probability):
    #   uncapped k3 = e^10 - 1 - 10 = 22026.465795 - 11 = 22015.465795,
    #   d k3 / d log π_θ = d (r - 1 - log r) / d log π_θ = -r + 1 = 1 - e^10 = -22025.465795.
    # Capped: the value is the cap, 10, and a clamp passes no gradient beyond it.
    value, grad = _k3_and_grad(10.0, CFG)
    assert value == 10.0
    assert grad == 0.0
    # the other side: log r = -15, k3 = e^-15 - 1 + 15 = 14.0000003 > 10, also capped
    value, grad = _k3_and_grad(-15.0, CFG)
    assert value == 10.0
    assert grad == 0.0


def test_k3_cap_zero_turns_it_off():
    value, grad = _k3_and_grad(10.0, K3Config(name="k3", cap=0.0))
    assert value == pytest.approx(22015.465795, rel=1e-9)
    assert grad == pytest.approx(-22025.465795, rel=1e-9)


def test_k3_other_cap():
    # cap 2 at log r = 2: k3 = e^2 - 3 = 4.389056 > 2, so 2 and no gradient
    assert _k3_and_grad(2.0, K3Config(name="k3", cap=2.0)) == (2.0, 0.0)


@pytest.mark.parametrize(
    ("log_r", "k3", "grad"),
    [
        # log r = 0.5 (r = e^0.5 = 1.648721): k3 = 1.648721 - 1 - 0.5 = 0.148721,
        #   gradient 1 - r = -0.648721
        (0.5, 0.148721, -0.648721),
        # log r = -0.5 (log π_θ - log π_ref = 0.5, r = e^-0.5 = 0.606531):
        #   k3 = 0.606531 - 1 + 0.5 = 0.106531, gradient 1 - r = 0.393469
        (-0.5, 0.106531, 0.393469),
        # just below the cap: log r = 2.5, k3 = e^2.5 - 3.5 = 12.182494 - 3.5 = 8.682494
        (2.5, 8.682494, -11.182494),
    ],
)
def test_k3_below_the_cap_is_unchanged(log_r, k3, grad):
    got_k3, got_grad = _k3_and_grad(log_r, CFG)
    assert got_k3 == pytest.approx(k3, abs=1e-6)
    assert got_grad == pytest.approx(grad, abs=1e-6)
    # and identical, bit for bit, to the uncapped estimator
    assert (got_k3, got_grad) == _k3_and_grad(log_r, K3Config(name="k3", cap=0.0))


def test_k3_cap_validation():
    (problem,) = K3Config(name="k3", cap=-1.0).problems()
    assert str(problem.under("kl")) == (
        "[kl.cap] got -1.0; expected a number >= 0.0. Fix: set kl.cap to a positive number such "
        "as 10 (verl's), or 0 to turn the clamp off."
    )
    assert K3Config(name="k3", cap=0.0).problems() == []
    assert K3Config(name="k3", cap=10.0).problems() == []
    with pytest.raises(ConfigError, match=r"\[kl\.cap\] got -2\.0"):
        load_config("train", ["algorithm=grpo", "kl.cap=-2"])


# --------------------------------------------------------------------------- add_kl_penalty


def _policy_out():
    loss = torch.tensor(1.5, dtype=F64, requires_grad=True)
    return LossOutput(loss * 1.0, {"clip_frac": torch.tensor(0.25)})


def test_add_kl_penalty_zero_coef_returns_same_object():
    out = _policy_out()
    kl = torch.full((2, 3), float("nan"), dtype=F64)  # not even looked at
    res = add_kl_penalty(out, kl, torch.ones(2, 3), coef=0.0, agg="token_mean")
    assert res is out
    assert "kl" not in res.metrics


def test_add_kl_penalty_adds_weighted_aggregate():
    out = _policy_out()
    kl = torch.tensor([[0.2, 0.4, 9.0], [0.6, 9.0, 9.0]], dtype=F64, requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    # token_mean over trained tokens: (0.2 + 0.4 + 0.6)/3 = 0.4; loss 1.5 + 0.1 * 0.4 = 1.54
    res = add_kl_penalty(out, kl, mask, coef=0.1, agg="token_mean")
    assert_close(res.loss, torch.tensor(1.54, dtype=F64))
    assert_close(res.metrics["kl"], torch.tensor(0.4, dtype=F64))
    assert_close(res.metrics["clip_frac"], torch.tensor(0.25))
    assert not res.metrics["kl"].requires_grad
    # seq_mean_token_mean: (0.3 + 0.6)/2 = 0.45; loss 1.5 + 0.5 * 0.45 = 1.725
    res = add_kl_penalty(_policy_out(), kl, mask, coef=0.5, agg="seq_mean_token_mean")
    assert_close(res.loss, torch.tensor(1.725, dtype=F64))
    # token_sum_norm with C = 4: (0.6 + 0.6)/(2 * 4) = 0.15; loss 1.5 + 2 * 0.15 = 1.8
    res = add_kl_penalty(_policy_out(), kl, mask, coef=2.0, agg="token_sum_norm", norm_constant=4)
    assert_close(res.loss, torch.tensor(1.8, dtype=F64))
    res.loss.backward()
    # gradient of coef * token_sum_norm: 2 / 8 = 0.25 on trained tokens, 0 elsewhere
    assert_close(kl.grad, torch.tensor([[0.25, 0.25, 0], [0.25, 0, 0]], dtype=F64))


def test_add_kl_penalty_does_not_mutate_input_metrics():
    out = _policy_out()
    add_kl_penalty(out, torch.ones(1, 2, dtype=F64), torch.ones(1, 2), coef=0.1, agg="token_mean")
    assert "kl" not in out.metrics
