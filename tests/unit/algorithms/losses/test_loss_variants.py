"""Policy-loss variants (framework/algorithms/losses/nsr.py): NSR / W-REINFORCE, ETR, CISPO and
DisCO. Hand-derived values (arithmetic in the comments), the invariants each loss must keep, the
authors' formulations on worked examples, and micro-batching with whole groups."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.losses.cispo import CISPOLossConfig, cispo_loss
from framework.algorithms.losses.disco import DisCOLossConfig, disco_coefficients, disco_loss
from framework.algorithms.losses.etr import ETRLossConfig, etr_clip_scale, etr_loss
from framework.algorithms.losses.nsr import NSRLossConfig, nsr_loss
from framework.algorithms.losses.ppo_clip import ClipLossConfig, ppo_clip_loss
from framework.algorithms.stats.aggregation import chunk_weights
from framework.registry import POLICY_LOSSES, load_components
from framework.rl.batch import PlanOptions, RolloutBatch
from framework.rl.update import loss_spec
from framework.types import PolicyLossInputs, Trajectory

F64 = torch.float64
MODES = ("token_mean", "seq_mean_token_mean", "token_sum_norm")


def _scalar(x) -> torch.Tensor:
    return torch.tensor(x, dtype=F64)


def _nc(agg: str) -> float | None:
    return 4.0 if agg == "token_sum_norm" else None


# --------------------------------------------------------------------------- the tiny batch
# As in test_losses.py: 2 rollouts x 3 tokens; rollout 1's last token is not trained.
# Token ratios rho = exp(logp - old):
#   rollout 0 (A = +2):  1.0, 1.5, 0.9
#   rollout 1 (A = -1):  0.5, 1.1, [masked]
RATIOS = [[1.0, 1.5, 0.9], [0.5, 1.1, 1.0]]
OLD = [[-1.0, -1.2, -0.7], [-2.0, -0.3, -1.5]]
MASK = [[1, 1, 1], [1, 1, 0]]


def tiny_batch(adv=(2.0, -1.0), **overrides) -> PolicyLossInputs:
    old = torch.tensor(OLD, dtype=F64)
    logp = (old + torch.tensor(RATIOS, dtype=F64).log()).requires_grad_(True)
    fields = dict(
        logprobs=logp,
        old_logprobs=old,
        advantages=torch.tensor(adv, dtype=F64),
        token_mask=torch.tensor(MASK),
        group_index=torch.tensor([0, 0]),
    )
    fields.update(overrides)
    return PolicyLossInputs(**fields)


def _random_inputs(gen, n, length, *, token_adv=False, groups=2, scale=0.3):
    old = -torch.rand(n, length, generator=gen, dtype=F64) * 3
    logp = old + scale * torch.randn(n, length, generator=gen, dtype=F64)
    shape = (n, length) if token_adv else (n,)
    adv = torch.randn(*shape, generator=gen, dtype=F64)
    mask = torch.rand(n, length, generator=gen) < 0.7
    mask[:, 0] = True  # every rollout has a trained token
    group_index = torch.arange(n) % groups
    return logp, old, adv, mask, group_index


def _run(fn, cfg, logp, old, adv, mask, group_index=None, sample_mask=None):
    lp = logp.detach().clone().requires_grad_(True)
    out = fn(
        PolicyLossInputs(lp, old, adv, mask, sample_mask=sample_mask, group_index=group_index),
        cfg=cfg,
    )
    out.loss.backward()
    return out, lp.grad


# --------------------------------------------------------------------------- registration


def test_registered_with_typed_configs_and_micro_batching_needs():
    load_components(plugins=False)
    expected = {
        "nsr": NSRLossConfig,
        "etr": ETRLossConfig,
        "cispo": CISPOLossConfig,
        "disco": DisCOLossConfig,
    }
    for name, cls in expected.items():
        assert POLICY_LOSSES.get(name).config_cls is cls
        assert cls(name=name).problems() == [], name
    kl = SimpleNamespace(coef=0.0)
    assert not loss_spec(NSRLossConfig(name="nsr"), kl).whole_groups
    etr = loss_spec(ETRLossConfig(name="etr"), kl)
    assert etr.whole_groups and etr.zero_advantage_inert
    disco = loss_spec(DisCOLossConfig(name="disco"), kl)
    assert disco.whole_groups and not disco.zero_advantage_inert  # its KL term covers every token
    assert not loss_spec(ClipLossConfig(name="ppo_clip"), kl).whole_groups  # unchanged


@pytest.mark.parametrize(
    "cfg, path",
    [
        (NSRLossConfig(name="nsr", positive_weight=1.5), "positive_weight"),
        (NSRLossConfig(name="nsr", agg="token_sum_norm"), "norm_constant"),
        (ETRLossConfig(name="etr", advantage_elasticity=-0.1), "advantage_elasticity"),
        # 0.5 * (1 + 1) * (1 + 1) = 2 >= 1: the lower bound 1 - 2 would be negative
        (
            ETRLossConfig(
                name="etr", clip_low=0.5, advantage_elasticity=1.0, variance_elasticity=1.0
            ),
            "clip_low",
        ),
        (CISPOLossConfig(name="cispo", clip_high=0.0), "clip_high"),
        (DisCOLossConfig(name="disco", score="ratio"), "score"),
        (DisCOLossConfig(name="disco", negatives="max"), "negatives"),
        (DisCOLossConfig(name="disco", tau=0.0), "tau"),
        (DisCOLossConfig(name="disco", kl_estimator="k2"), "kl_estimator"),
    ],
)
def test_config_problems(cfg, path):
    assert path in [p.path for p in cfg.problems()]


# --------------------------------------------------------------------------- NSR / W-REINFORCE


def nsr_cfg(agg="token_mean", weight=0.0, low=0.2, high=0.28):
    return NSRLossConfig(
        name="nsr",
        agg=agg,
        norm_constant=_nc(agg),
        positive_weight=weight,
        clip_low=low,
        clip_high=high,
    )


# Per-token PPO-clip losses on the tiny batch (test_losses.py): rollout 0 (A = +2) -2.0, -2.56,
# -1.8; rollout 1 (A = -1) 0.8 (clipped low), 1.1. NSR (lambda = 0) keeps rollout 1 only:
#   token_mean:           (0.8 + 1.1) / 5 tokens                = 0.38
#   seq_mean_token_mean:  (0 / 3 + 1.9 / 2) / 2 rollouts         = 0.475
#   token_sum_norm (C=4): 1.9 / (2 rows * 4)                     = 0.2375
# Gradient: only token (1, 1) (unclipped, A < 0): d/dlogp (-A rho) = rho = 1.1 times its weight
# 1/5, 1/(2*2), 1/8 -> 0.22, 0.275, 0.1375. Rollout 0 (A > 0) gets exactly 0.
NSR_EXPECTED = {"token_mean": 0.38, "seq_mean_token_mean": 0.475, "token_sum_norm": 0.2375}
NSR_GRAD_11 = {"token_mean": 0.22, "seq_mean_token_mean": 0.275, "token_sum_norm": 0.1375}


@pytest.mark.parametrize("agg", MODES)
def test_nsr_hand_values(agg):
    inp = tiny_batch()
    out = nsr_loss(inp, cfg=nsr_cfg(agg))
    assert_close(out.loss, _scalar(NSR_EXPECTED[agg]))
    out.loss.backward()
    expected = torch.zeros(2, 3, dtype=F64)
    expected[1, 1] = NSR_GRAD_11[agg]
    assert_close(inp.logprobs.grad, expected)
    # 2 of the 5 trained tokens have A < 0
    assert out.metrics["negative_token_frac"].item() == pytest.approx(0.4)


def test_w_reinforce_hand_values():
    # lambda = 0.1 scales rollout 0's token losses: -0.2, -0.256, -0.18 (sum -0.636);
    # rollout 1 unchanged: 0.8 + 1.1 = 1.9. token_mean: (-0.636 + 1.9) / 5 = 0.2528.
    # Gradient of rollout 0 = 0.1 * PPO's [-0.4, 0 (clipped high), -0.36] = [-0.04, 0, -0.036].
    inp = tiny_batch()
    out = nsr_loss(inp, cfg=nsr_cfg("token_mean", weight=0.1))
    assert_close(out.loss, _scalar(0.2528))
    out.loss.backward()
    assert_close(
        inp.logprobs.grad, torch.tensor([[-0.04, 0.0, -0.036], [0.0, 0.22, 0.0]], dtype=F64)
    )


def test_nsr_matches_the_authors_formulation():
    """RLVR-Decomposed (the paper's code, github.com/TianHongZXY/RLVR-Decomposed), read for this
    example: advantages from 0/1 rewards without a baseline (NSR: r - 1; W-REINFORCE: lambda on
    correct, -1 on wrong), verl's PPO-clip (0.2), token mean. NSR trains on the wrong rollouts
    only (the batch is subset to them)."""
    # rollout 0 correct, rollout 1 wrong; symmetric clip 0.2 as in verl.
    cfg = nsr_cfg("token_mean", low=0.2, high=0.2)
    # Authors' NSR: advantages (0, -1), batch subset to rollout 1: token losses 0.8 (rho 0.5,
    # clipped at 0.8) and 1.1 -> mean over its 2 tokens = 0.95.
    ours = nsr_loss(tiny_batch(adv=(1.0, -1.0)), cfg=cfg).loss
    # Ours keeps rollout 0's 3 tokens in the denominator with zero loss: 1.9 / 5 = 0.38
    # = 0.95 * (2 negative tokens / 5 tokens).
    assert_close(ours, _scalar(0.95 * 2 / 5))
    # Authors' W-REINFORCE (lambda = 0.1): advantages (0.1, -1), token mean over all 5 tokens:
    #   rollout 0: -min(rho 0.1, clip(rho, 0.8, 1.2) 0.1): -0.1, -0.12 (rho 1.5 clipped), -0.09
    #   rollout 1: 0.8, 1.1  -> (-0.31 + 1.9) / 5 = 0.318. Ours with A = (+1, -1): the same.
    cfg_w = nsr_cfg("token_mean", weight=0.1, low=0.2, high=0.2)
    assert_close(nsr_loss(tiny_batch(adv=(1.0, -1.0)), cfg=cfg_w).loss, _scalar(0.318))


@pytest.mark.parametrize("agg", MODES)
def test_nsr_with_weight_one_is_ppo_clip(agg):
    gen = torch.Generator().manual_seed(11)
    for token_adv in (False, True):
        logp, old, adv, mask, _ = _random_inputs(gen, 5, 6, token_adv=token_adv)
        ppo = ClipLossConfig(name="ppo_clip", agg=agg, norm_constant=_nc(agg))
        a, ga = _run(nsr_loss, nsr_cfg(agg, weight=1.0), logp, old, adv, mask)
        b, gb = _run(ppo_clip_loss, ppo, logp, old, adv, mask)
        assert_close(a.loss, b.loss)
        assert_close(ga, gb)


def test_nsr_ignores_non_negative_rollouts():
    # Changing anything about the A >= 0 rollouts (their log-probs, their advantages' size) leaves
    # loss and gradient unchanged, and they receive no gradient.
    gen = torch.Generator().manual_seed(2)
    logp, old, _, mask, _ = _random_inputs(gen, 4, 5)
    adv = torch.tensor([1.5, -0.7, 0.0, -1.2], dtype=F64)
    base, grad = _run(nsr_loss, nsr_cfg(), logp, old, adv, mask)
    assert (grad[[0, 2]] == 0).all() and (grad[[1, 3]][mask[[1, 3]]] != 0).any()
    logp2 = logp.clone()
    logp2[[0, 2]] += 0.7
    adv2 = torch.tensor([9.0, -0.7, 0.0, -1.2], dtype=F64)
    other, grad2 = _run(nsr_loss, nsr_cfg(), logp2, old, adv2, mask)
    assert_close(other.loss, base.loss)
    assert_close(grad2, grad)


# --------------------------------------------------------------------------- ETR


def etr_cfg(agg="token_mean", low=0.2, high=0.2, alpha=0.5, kappa=0.5):
    return ETRLossConfig(
        name="etr",
        agg=agg,
        norm_constant=_nc(agg),
        clip_low=low,
        clip_high=high,
        advantage_elasticity=alpha,
        variance_elasticity=kappa,
    )


# Six rollouts, one trained token each plus an untrained (tool-response) token; eps = 0.2 / 0.2,
# alpha = kappa = 0.5.
#   group 0: rows 0, 1 with A = +1, -1          -> p = 1/2, 4 p (1 - p) = 1,    macro 1 + 0.5 = 1.5
#   group 1: rows 2-5 with A = +2, -0.5 (x3)    -> p = 1/4, 4 p (1 - p) = 0.75, macro 1.375
# micro = 1 + 0.5 tanh|A|: |A| = 1 -> 1.380797; 2 -> 1.482014; 0.5 -> 1.231059.
# scale e = micro * macro: rows 0, 1: 2.071196; row 2: 2.037769; rows 3-5: 1.692706.
#   row 0: A = +1,   rho 1.35, upper 1 + 0.2 * 2.071196 = 1.414239: inside -> loss -1.35
#          (PPO-clip would clip at 1.2)
#   row 1: A = -1,   rho 0.65, lower 1 - 0.414239 = 0.585761: inside   -> loss 0.65
#          (PPO-clip would clip at 0.8)
#   row 2: A = +2,   rho 1.3,  upper 1.407554: inside                  -> loss -2.6
#   row 3: A = -0.5, rho 1.0                                           -> loss 0.5
#   row 4: A = -0.5, rho 0.6,  lower 1 - 0.338541 = 0.661459: clipped  -> loss 0.5 * 0.661459
#                                                                            = 0.330730, grad 0
#   row 5: A = -0.5, rho 1.0                                           -> loss 0.5
# token_mean over 6 tokens: (-1.35 + 0.65 - 2.6 + 0.5 + 0.330730 + 0.5) / 6 = -1.969270 / 6
#   = -0.328212. Gradient -A rho / 6 on unclipped tokens:
#   -0.225, 0.108333, -0.433333, 0.083333, 0, 0.083333.
ETR_RHO = [1.35, 0.65, 1.3, 1.0, 0.6, 1.0]
ETR_ADV = [1.0, -1.0, 2.0, -0.5, -0.5, -0.5]
ETR_GROUPS = [0, 0, 1, 1, 1, 1]


def etr_batch() -> PolicyLossInputs:
    old = torch.full((6, 2), -1.0, dtype=F64)
    logp = old.clone()
    logp[:, 0] += torch.tensor(ETR_RHO, dtype=F64).log()
    logp[:, 1] = float("nan")  # the tool-response column: garbage, never read
    return PolicyLossInputs(
        logp.requires_grad_(True),
        old,
        torch.tensor(ETR_ADV, dtype=F64),
        torch.tensor([[1, 0]] * 6),
        group_index=torch.tensor(ETR_GROUPS),
    )


def test_etr_clip_scale_hand_values():
    scale = etr_clip_scale(etr_batch(), etr_cfg())
    t1, t2, t05 = math.tanh(1.0), math.tanh(2.0), math.tanh(0.5)
    expected = [
        (1 + 0.5 * t1) * 1.5,  # 2.071196
        (1 + 0.5 * t1) * 1.5,
        (1 + 0.5 * t2) * 1.375,  # 2.037769
        (1 + 0.5 * t05) * 1.375,  # 1.692706
        (1 + 0.5 * t05) * 1.375,
        (1 + 0.5 * t05) * 1.375,
    ]
    assert_close(scale[:, 0], torch.tensor(expected, dtype=F64))
    assert (scale[:, 1] == 1.0).all()  # untrained tokens
    assert abs(expected[0] - 2.071196) < 1e-6 and abs(expected[3] - 1.692706) < 1e-6


def test_etr_hand_values_and_gradient():
    inp = etr_batch()
    out = etr_loss(inp, cfg=etr_cfg())
    assert_close(out.loss, _scalar(-1.969270 / 6), atol=1e-6, rtol=0)
    out.loss.backward()
    grad = torch.tensor([-0.225, 0.65 / 6, -2.6 / 6, 0.5 / 6, 0.0, 0.5 / 6], dtype=F64)
    assert_close(inp.logprobs.grad[:, 0], grad)
    assert (inp.logprobs.grad[:, 1] == 0).all()  # tool-response tokens: no gradient
    assert out.metrics["clip_frac"].item() == pytest.approx(1 / 6)  # row 4 only
    # the same batch under PPO-clip 0.2 clips rows 0, 1, 2 (1.35 > 1.2, 0.65 < 0.8, 1.3 > 1.2)
    # and row 4: 4 of 6 tokens
    ppo = ppo_clip_loss(etr_batch(), cfg=ClipLossConfig(name="ppo_clip", clip_high=0.2))
    assert ppo.metrics["clip_frac"].item() == pytest.approx(4 / 6)


@pytest.mark.parametrize("agg", MODES)
def test_etr_without_elasticity_is_ppo_clip(agg):
    gen = torch.Generator().manual_seed(5)
    for token_adv in (False, True):
        logp, old, adv, mask, groups = _random_inputs(gen, 6, 5, token_adv=token_adv)
        cfg = etr_cfg(agg, 0.2, 0.28, alpha=0.0, kappa=0.0)
        ppo = ClipLossConfig(name="ppo_clip", agg=agg, norm_constant=_nc(agg))
        a, ga = _run(etr_loss, cfg, logp, old, adv, mask, groups)
        b, gb = _run(ppo_clip_loss, ppo, logp, old, adv, mask)
        assert_close(a.loss, b.loss)
        assert_close(ga, gb)


def test_etr_region_contains_ppo_region():
    # e >= 1, so every token PPO-clip trains (non-zero gradient) ETR trains too, with the same
    # gradient (inside both regions the token loss is -A rho); ETR clips no more tokens.
    gen = torch.Generator().manual_seed(8)
    for _ in range(5):
        logp, old, adv, mask, groups = _random_inputs(gen, 8, 6, scale=0.4)
        a, ga = _run(
            etr_loss, etr_cfg("seq_mean_token_mean", 0.2, 0.28), logp, old, adv, mask, groups
        )
        ppo = ClipLossConfig(name="ppo_clip")
        b, gb = _run(ppo_clip_loss, ppo, logp, old, adv, mask)
        trained_by_ppo = gb != 0
        assert_close(ga[trained_by_ppo], gb[trained_by_ppo])
        assert a.metrics["clip_frac"] <= b.metrics["clip_frac"]
        assert a.metrics["clip_scale_mean"] >= 1.0


def test_etr_scale_grows_with_advantage_and_group_variance():
    # one token per rollout; group 0: A = +0.5, +2, -1 (p = 2/3); group 1: A = +0.5, -1, -1, +1
    # (p = 1/2, the widest macro factor)
    adv = torch.tensor([0.5, 2.0, -1.0, 0.5, -1.0, -1.0, 1.0], dtype=F64)
    inp = PolicyLossInputs(
        torch.zeros(7, 1, dtype=F64),
        torch.zeros(7, 1, dtype=F64),
        adv,
        torch.ones(7, 1),
        group_index=torch.tensor([0, 0, 0, 1, 1, 1, 1]),
    )
    scale = etr_clip_scale(inp, etr_cfg())[:, 0]
    assert scale[1] > scale[2] > scale[0]  # |A| 2 > 1 > 0.5 in one group
    assert scale[3] > scale[0]  # same |A|, the group with p = 1/2 widens more
    # 4 * (2/3) * (1/3) = 8/9: macro 1 + 0.5 * 8/9; micro for |A| = 0.5: 1 + 0.5 tanh(0.5)
    assert_close(scale[0], _scalar((1 + 0.5 * math.tanh(0.5)) * (1 + 0.5 * 8 / 9)))
    assert (scale <= 1.5 * 1.5).all() and (scale >= 1.0).all()  # (1 + alpha)(1 + kappa) bound


def test_etr_pass_rate_counts_dropped_rollouts():
    # Row 2 (A > 0) is dropped from the loss (over budget); it still counts in its group's share of
    # positive advantages: p = 2/4 (variance factor 1) rather than 1/3 (8/9).
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=F64)
    inp = PolicyLossInputs(
        torch.zeros(4, 1, dtype=F64),
        torch.zeros(4, 1, dtype=F64),
        adv,
        torch.ones(4, 1),
        sample_mask=torch.tensor([1, 1, 0, 1]),
        group_index=torch.zeros(4, dtype=torch.long),
    )
    scale = etr_clip_scale(inp, etr_cfg())
    assert_close(scale[0, 0], _scalar((1 + 0.5 * math.tanh(1.0)) * 1.5))
    assert scale[2, 0] == 1.0  # dropped row: outside the effective mask


def test_group_losses_need_group_index():
    for fn, cfg in ((etr_loss, etr_cfg()), (disco_loss, DisCOLossConfig(name="disco"))):
        with pytest.raises(ValueError, match="group_index"):
            fn(tiny_batch(group_index=None), cfg=cfg)


# --------------------------------------------------------------------------- CISPO


def cispo_cfg(agg="token_mean", low=0.2, high=0.28):
    return CISPOLossConfig(
        name="cispo", agg=agg, norm_constant=_nc(agg), clip_low=low, clip_high=high
    )


def test_cispo_hand_values_and_gradient():
    # Truncated weights sg(clip(rho, 0.8, 1.28)): rollout 0: 1.0, 1.28, 0.9; rollout 1: 0.8, 1.1.
    # logp = old + log rho: rollout 0: -1.0, -0.794535, -0.805361; rollout 1: -2.693147, -0.204690
    # token loss -w A logp: 2.0, 2.034009, 1.449649 (A = 2); -2.154518, -0.225159 (A = -1)
    # token_mean: 3.103982 / 5 = 0.620796
    inp = tiny_batch()
    out = cispo_loss(inp, cfg=cispo_cfg())
    assert_close(out.loss, _scalar(0.620796), atol=1e-6, rtol=0)
    out.loss.backward()
    # d/dlogp = -w A / 5: rollout 0: -2 * (1.0, 1.28, 0.9) / 5 = -0.4, -0.512, -0.36;
    # rollout 1: (0.8, 1.1) / 5 = 0.16, 0.22. The tokens PPO-clip zeroes ((0,1) above its range,
    # (1,0) below) keep a gradient here.
    expected = torch.tensor([[-0.4, -0.512, -0.36], [0.16, 0.22, 0.0]], dtype=F64)
    assert_close(inp.logprobs.grad, expected)
    assert out.metrics["clip_frac"].item() == pytest.approx(0.4)  # 2 of 5 weights truncated
    assert out.metrics["clip_frac_high"].item() == pytest.approx(0.2)
    assert out.metrics["clip_frac_low"].item() == pytest.approx(0.2)


def test_cispo_default_has_no_lower_bound():
    # clip_low = 1: lower bound 0; rho = 0.5 keeps its weight 0.5: gradient of token (1, 0) is
    # -0.5 * (-1) / 5 = 0.1; rho = 1.5 is truncated at 1.2: gradient of (0, 1) -1.2 * 2 / 5 = -0.48
    inp = tiny_batch()
    cispo_loss(inp, cfg=CISPOLossConfig(name="cispo", agg="token_mean")).loss.backward()
    assert_close(inp.logprobs.grad[1, 0], _scalar(0.1))
    assert_close(inp.logprobs.grad[0, 1], _scalar(-0.48))


@pytest.mark.parametrize("agg", MODES)
def test_cispo_on_policy_gradient_is_ppo_clip_gradient(agg):
    # rho = 1 everywhere: w = 1 and both gradients are -A times the aggregation weight
    gen = torch.Generator().manual_seed(3)
    for token_adv in (False, True):
        logp, _, adv, mask, _ = _random_inputs(gen, 5, 4, token_adv=token_adv)
        old = logp.detach().clone()
        _, ga = _run(cispo_loss, cispo_cfg(agg), logp, old, adv, mask)
        ppo = ClipLossConfig(name="ppo_clip", agg=agg, norm_constant=_nc(agg))
        _, gb = _run(ppo_clip_loss, ppo, logp, old, adv, mask)
        assert_close(ga, gb)


def test_cispo_every_trained_token_keeps_its_gradient():
    gen = torch.Generator().manual_seed(4)
    logp, old, adv, mask, _ = _random_inputs(gen, 6, 5, scale=1.0)  # far off policy
    out, grad = _run(cispo_loss, cispo_cfg(), logp, old, adv, mask)
    assert out.metrics["clip_frac"] > 0.3  # many weights truncated ...
    assert (grad[mask] != 0).all()  # ... yet every trained token has a gradient
    ratio = (logp - old).exp().clamp(0.8, 1.28)
    n = mask.sum()
    assert_close(grad[mask], (-ratio * adv.unsqueeze(-1) / n)[mask])  # -sg(w) A / tokens


# --------------------------------------------------------------------------- DisCO

# Two groups of three rollouts, two trained tokens each, on policy (old = logp). log-L scores are
# the mean token log-prob:
#   group 0: r0 (+) [-1, -1] s = -1;  r1 (-) [-2, -2] s = -2;  r2 (-) [-1, -2] s = -1.5
#   group 1: r3 (+) [-0.5, -1.5] s = -1;  r4 (+) [-1, -1] s = -1;  r5 (-) [-4, -2] s = -3
# tau = 10: softmax over group 0's negatives of s / 10 = (-0.2, -0.15):
#   w1 = 1 / (1 + e^0.05) = 0.487503, w2 = 0.512497; group 1's single negative: w5 = 1.
# coefficients c: r0 1; r1 -0.487503; r2 -0.512497; r3 0.5; r4 0.5; r5 -1.
# seq_mean_token_mean with G = 3 rollouts per group, R = 6 rollouts:
#   loss = -(1/6) sum_i 3 c_i s_i = -(1/2) sum_i c_i s_i
#   sum c s = -1 + 0.975006 + 0.768746 - 0.5 - 0.5 + 3 = 2.743752  -> loss -1.371876
#   d loss / d logp_{i,t} = -(1/6) * 3 * c_i * (1/2 per token) = -c_i / 4:
#   r0 -0.25; r1 0.121876; r2 0.128124; r3 -0.125; r4 -0.125; r5 0.25 (both tokens).
DISCO_LOGP = [[-1, -1], [-2, -2], [-1, -2], [-0.5, -1.5], [-1, -1], [-4, -2]]
DISCO_ADV = [1.41, -0.71, -0.71, 0.71, 0.71, -1.41]  # group-normalised; only the signs matter
DISCO_GROUPS = [0, 0, 0, 1, 1, 1]
W1 = 1 / (1 + math.exp(0.05))


def disco_cfg(agg="seq_mean_token_mean", **kw):
    return DisCOLossConfig(name="disco", agg=agg, norm_constant=_nc(agg), **kw)


def disco_batch(old_shift=0.0, adv=DISCO_ADV, **overrides) -> PolicyLossInputs:
    logp = torch.tensor(DISCO_LOGP, dtype=F64)
    fields = dict(
        logprobs=logp.clone().requires_grad_(True),
        old_logprobs=logp + old_shift,
        advantages=torch.tensor(adv, dtype=F64),
        token_mask=torch.ones(6, 2),
        group_index=torch.tensor(DISCO_GROUPS),
    )
    fields.update(overrides)
    return PolicyLossInputs(**fields)


def test_disco_coefficients_hand_values():
    scores = torch.tensor([-1.0, -2.0, -1.5, -1.0, -1.0, -3.0], dtype=F64)
    labels = torch.tensor(DISCO_ADV, dtype=F64)
    groups = torch.tensor(DISCO_GROUPS)
    c = disco_coefficients(scores, labels, torch.ones(6, dtype=torch.bool), groups, disco_cfg())
    assert_close(c, torch.tensor([1.0, -W1, -(1 - W1), 0.5, 0.5, -1.0], dtype=F64))
    assert abs(W1 - 0.487503) < 1e-6
    # DisCO-b: the plain mean over negatives, 1/2 each in group 0
    c_b = disco_coefficients(
        scores, labels, torch.ones(6, dtype=torch.bool), groups, disco_cfg(negatives="mean")
    )
    assert_close(c_b, torch.tensor([1.0, -0.5, -0.5, 0.5, 0.5, -1.0], dtype=F64))


def test_disco_hand_values_and_gradient():
    inp = disco_batch()
    out = disco_loss(inp, cfg=disco_cfg())
    assert_close(out.loss, _scalar(-1.371876), atol=1e-6, rtol=0)
    out.loss.backward()
    c = torch.tensor([1.0, -W1, -(1 - W1), 0.5, 0.5, -1.0], dtype=F64)
    assert_close(inp.logprobs.grad, (-c / 4).unsqueeze(-1).expand(6, 2))
    # score gap per group: group 0: -1 - (-2 - 1.5)/2 = 0.75; group 1: -1 - (-3) = 2 -> mean 1.375
    assert out.metrics["score_gap"].item() == pytest.approx(1.375)
    assert out.metrics["valid_group_frac"].item() == pytest.approx(1.0)
    assert out.metrics["constraint_kl"].item() == 0.0
    assert out.metrics["constraint_excess"].item() == 0.0


def authors_disco(logp, old, mask, groups, labels, *, tau, delta, beta):
    """DisCO as the paper and the authors' code (github.com/Optimization-AI/DisCO,
    compute_policy_loss_disco_logL, read for this example) define it, written out independently:
    per group J_g = mean_+ s - tau log mean_- exp(s / tau) with s = token-mean log-prob, averaged
    over the batch's groups (groups without both kinds count with J = 0); KL = token mean of
    log pi_old - log pi (their scripts' ppo_kl_type=kl); the penalty contributes the gradient
    beta [KL - delta]_+ grad KL (value beta * sg([KL - delta]_+) * KL)."""
    m = mask.to(logp.dtype)
    s = (logp * m).sum(-1) / m.sum(-1)
    total = logp.new_zeros(())
    ids = groups.unique()
    for g in ids:
        sel = groups == g
        pos, neg = s[sel & (labels > 0)], s[sel & (labels < 0)]
        if len(pos) and len(neg):
            lme = torch.logsumexp(neg / tau, 0) - math.log(len(neg))
            total = total + pos.mean() - tau * lme
    kl = ((old - logp) * m).sum() / m.sum()
    return -total / len(ids) + beta * (kl - delta).clamp(min=0).detach() * kl


@pytest.mark.parametrize("old_shift", [0.0, 0.01, 5e-5])
def test_disco_gradient_matches_the_authors_objective(old_shift):
    # old_shift = 0.01: KL = 0.01 > delta = 1e-4, the penalty's gradient is
    #   1e3 * (0.01 - 1e-4) * d KL / d logp = 9.9 * (-1 / 12 tokens) = -0.825 on every token;
    # old_shift = 5e-5: KL below delta, no penalty gradient.
    inp = disco_batch(old_shift=old_shift)
    out = disco_loss(inp, cfg=disco_cfg())
    out.loss.backward()
    logp = torch.tensor(DISCO_LOGP, dtype=F64).requires_grad_(True)
    ref = authors_disco(
        logp,
        logp.detach() + old_shift,
        torch.ones(6, 2),
        torch.tensor(DISCO_GROUPS),
        torch.tensor(DISCO_ADV, dtype=F64),
        tau=10.0,
        delta=1e-4,
        beta=1e3,
    )
    ref.backward()
    assert_close(inp.logprobs.grad, logp.grad)
    c = torch.tensor([1.0, -W1, -(1 - W1), 0.5, 0.5, -1.0], dtype=F64)
    penalty = -0.825 if old_shift == 0.01 else 0.0
    assert_close(inp.logprobs.grad, (-c / 4 + penalty).unsqueeze(-1).expand(6, 2))
    if old_shift == 0.01:
        # value: (beta / 2) * 0.0099^2 = 0.049005 on top of the discriminative -1.371876
        assert_close(out.loss, _scalar(-1.371876 + 0.049005), atol=1e-6, rtol=0)
        assert out.metrics["constraint_excess"].item() == pytest.approx(0.0099)


def test_disco_random_batches_match_the_authors_objective():
    # equal group sizes and equal lengths (where token and sequence means agree for the KL)
    gen = torch.Generator().manual_seed(21)
    for _ in range(10):
        logp = -torch.rand(8, 4, generator=gen, dtype=F64) * 3
        old = logp + 0.02 * torch.randn(8, 4, generator=gen, dtype=F64)
        labels = torch.randn(8, generator=gen, dtype=F64)
        groups = torch.arange(8) // 4
        mask = torch.ones(8, 4)
        for tau in (10.0, 1.0):
            cfg = disco_cfg(tau=tau)
            _, grad = _run(disco_loss, cfg, logp, old, labels, mask, groups)
            lp = logp.clone().requires_grad_(True)
            authors_disco(lp, old, mask, groups, labels, tau=tau, delta=1e-4, beta=1e3).backward()
            assert_close(grad, lp.grad)


def test_disco_large_tau_is_disco_b():
    # tau -> inf: the softmax over negatives becomes uniform, DisCO becomes DisCO-b
    inp_a, inp_b = disco_batch(), disco_batch()
    disco_loss(inp_a, cfg=disco_cfg(tau=1e9)).loss.backward()
    disco_loss(inp_b, cfg=disco_cfg(negatives="mean")).loss.backward()
    assert_close(inp_a.logprobs.grad, inp_b.logprobs.grad)


def test_disco_uses_only_the_sign_of_advantages():
    # no difficulty weighting: rescaling a group's advantages changes nothing
    inp_a = disco_batch()
    inp_b = disco_batch(adv=[5.0, -0.1, -3.0, 0.2, 9.0, -0.01])
    disco_loss(inp_a, cfg=disco_cfg()).loss.backward()
    disco_loss(inp_b, cfg=disco_cfg()).loss.backward()
    assert_close(inp_a.logprobs.grad, inp_b.logprobs.grad)


def test_disco_groups_without_both_kinds_get_no_discriminative_gradient():
    # group 1 all positive, group 2 all zero advantage: on policy (no KL) they get no gradient,
    # but still count in the normaliser (R = 9 rollouts, groups of G = 3)
    logp = torch.tensor([*DISCO_LOGP, [-1, -1], [-2, -2], [-3, -3]], dtype=F64)
    adv = [1.0, -1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    groups = [0, 0, 0, 1, 1, 1, 2, 2, 2]
    inp = PolicyLossInputs(
        logp.clone().requires_grad_(True),
        logp,
        torch.tensor(adv, dtype=F64),
        torch.ones(9, 2),
        group_index=torch.tensor(groups),
    )
    out = disco_loss(inp, cfg=disco_cfg())
    # group 0: r0 (+, s = -1), r1 (-, s = -2), r2 (A = 0: neither); c = 1, -1, 0.
    #   loss = -(1/9) * 3 * (1 * -1 + (-1) * -2) = -(1/3) * 1 = -1/3
    assert_close(out.loss, _scalar(-1 / 3))
    out.loss.backward()
    assert (inp.logprobs.grad[2:] == 0).all()
    assert out.metrics["valid_group_frac"].item() == pytest.approx(1 / 3)


def test_disco_l_ratio_score_on_policy():
    # l_ratio: f = rho, whose gradient on policy is rho * d logp = d logp: the same gradient as
    # log_l at rho = 1, with the softmax over scores that are all 1 (uniform weights).
    inp_a, inp_b = disco_batch(), disco_batch()
    disco_loss(inp_a, cfg=disco_cfg(score="l_ratio", tau=1.0)).loss.backward()
    disco_loss(inp_b, cfg=disco_cfg(negatives="mean")).loss.backward()
    assert_close(inp_a.logprobs.grad, inp_b.logprobs.grad)


def test_disco_k3_estimator_hand_value():
    # old = logp + 0.01: per token rho = e^-0.01, k3 = rho - 1 - log rho = 0.990050 - 1 + 0.01
    #   = 4.98e-5 < delta: no penalty; k1 = 0.01 > delta
    out_k3 = disco_loss(disco_batch(old_shift=0.01), cfg=disco_cfg(kl_estimator="k3"))
    assert out_k3.metrics["constraint_kl"].item() == pytest.approx(math.exp(-0.01) - 1 + 0.01)
    assert out_k3.metrics["constraint_excess"].item() == 0.0


# --------------------------------------------------------------------------- shared invariants


def _all_losses(agg: str):
    return [
        (nsr_loss, nsr_cfg(agg, weight=0.3)),
        (etr_loss, etr_cfg(agg, 0.2, 0.28, 0.25, 0.25)),
        (cispo_loss, cispo_cfg(agg)),
        (disco_loss, disco_cfg(agg)),
    ]


@pytest.mark.parametrize("agg", MODES)
def test_masked_tokens_change_nothing(agg):
    gen = torch.Generator().manual_seed(7)
    logp, old, adv, mask, groups = _random_inputs(gen, 6, 6, token_adv=True, groups=2)
    old = logp + 0.02 * torch.randn(6, 6, generator=gen, dtype=F64)  # KL above delta for DisCO
    for fn, cfg in _all_losses(agg):
        base, base_grad = _run(fn, cfg, logp, old, adv, mask, groups)
        lp2 = logp.masked_fill(~mask, float("nan"))
        old2 = old.masked_fill(~mask, float("-inf"))
        adv2 = adv.masked_fill(~mask, float("nan"))
        out2, grad2 = _run(fn, cfg, lp2, old2, adv2, mask, groups)
        out3, grad3 = _run(
            fn, cfg, logp.masked_fill(~mask, 50.0), old, adv.masked_fill(~mask, 1e6), mask, groups
        )
        for out, grad in ((out2, grad2), (out3, grad3)):
            assert_close(out.loss, base.loss)
            assert_close(grad, base_grad)
            assert torch.isfinite(grad).all() and (grad[~mask] == 0).all()
            for k, v in base.metrics.items():
                assert_close(out.metrics[k], v, msg=f"{fn.__name__}: {k}")


def test_tool_response_tokens_get_no_gradient():
    # a response with a tool-response span (loss mask 0) between two generated spans; off policy
    # (and KL above delta), so every loss depends on every trained token
    mask = torch.tensor([[1, 1, 0, 0, 0, 1, 1]] * 4)
    gen = torch.Generator().manual_seed(9)
    logp = -torch.rand(4, 7, generator=gen, dtype=F64) - 0.5
    old = logp + 0.05
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=F64)
    groups = torch.tensor([0, 0, 1, 1])
    for fn, cfg in _all_losses("seq_mean_token_mean"):
        _, grad = _run(fn, cfg, logp, old, adv, mask, groups)
        assert (grad[:, 2:5] == 0).all(), fn.__name__
        assert (grad[mask.bool()] != 0).all(), fn.__name__


def test_sample_mask_drops_the_rollout():
    gen = torch.Generator().manual_seed(12)
    logp, old, adv, mask, groups = _random_inputs(gen, 6, 5, groups=2)
    smask = torch.tensor([1, 1, 0, 1, 1, 1])
    for fn, cfg in _all_losses("token_mean"):
        out, grad = _run(fn, cfg, logp, old, adv, mask, groups, sample_mask=smask)
        assert (grad[2] == 0).all(), fn.__name__
        assert torch.isfinite(out.loss)


def test_all_masked_is_zero_loss_with_zero_gradient():
    for fn, cfg in _all_losses("seq_mean_token_mean"):
        inp = tiny_batch(sample_mask=torch.tensor([0, 0]))
        out = fn(inp, cfg=cfg)
        assert out.loss.item() == 0.0
        out.loss.backward()
        assert (inp.logprobs.grad == 0).all()


# --------------------------------------------------------------------------- whole-group batching


def _trajectories(lengths: list[int], groups: list[int]) -> list[Trajectory]:
    return [
        Trajectory(
            question=g, group=g, token_ids=[1] * (2 + n), loss_mask=[0, 0] + [1] * n, prompt_len=2
        )
        for n, g in zip(lengths, groups, strict=True)
    ]


def test_plan_keeps_groups_whole():
    lengths = [3, 9, 4, 2, 7, 5, 6, 1, 8]
    groups = [0, 0, 1, 1, 1, 2, 2, 3, 3]
    trajs = _trajectories(lengths, groups)
    adv = torch.tensor([1.0, -1.0, 0.0, 0.0, 0.0, 0.5, -0.5, 1.0, -1.0])  # group 1 all zero
    keep = torch.ones(9, dtype=torch.bool)
    plan = RolloutBatch.build(trajs, pad_id=0, sample_mask=keep).plan(
        adv,
        PlanOptions(
            micro_batch_size=4,
            agg="token_mean",
            skip_zero=True,
            whole_groups=True,
        ),
    )
    chunks = [sorted(int(i) for i in c) for c in plan.chunks]
    # group 1 (rows 2-4) is skipped whole; units by their longest row: group 2 (6), group 3 (8),
    # group 0 (9): 2 + 2 rows fit in 4, then group 0 starts a new micro-batch
    assert chunks == [[5, 6, 7, 8], [0, 1]]
    assert plan.skipped == 3
    # token_mean weights: trained tokens per micro-batch over the batch's 45 (skipped rows count):
    # rows 5-8: 5 + 6 + 1 + 8 = 20; rows 0-1: 3 + 9 = 12
    assert plan.weights == pytest.approx([20 / 45, 12 / 45])
    # micro-batches of 2: no two groups fit together, and group 1 (3 rows) exceeds the size and
    # gets a micro-batch of its own
    big = RolloutBatch.build(trajs, pad_id=0, sample_mask=keep).plan(
        torch.ones(9),
        PlanOptions(
            micro_batch_size=2,
            agg="token_mean",
            skip_zero=False,
            whole_groups=True,
        ),
    )
    assert sorted(sorted(int(i) for i in c) for c in big.chunks) == [
        [0, 1],
        [2, 3, 4],
        [5, 6],
        [7, 8],
    ]
    # without whole_groups rows are packed by length alone: rows 7 (3 tokens) and 0 (5) share a
    # micro-batch although they belong to groups 3 and 0
    rows = RolloutBatch.build(trajs, pad_id=0, sample_mask=keep).plan(
        adv,
        PlanOptions(
            micro_batch_size=2,
            agg="token_mean",
            skip_zero=True,
        ),
    )
    assert [sorted(int(i) for i in c) for c in rows.chunks] == [[0, 7], [5, 6], [1, 8]]


@pytest.mark.parametrize("name", ["etr", "disco"])
@pytest.mark.parametrize("agg", MODES)
def test_whole_group_micro_batches_reproduce_the_full_batch(name, agg):
    # groups of different sizes and lengths; the weighted sum over whole-group micro-batches
    # equals the full-batch loss and gradient (DisCO: KL below delta, where the per-micro-batch
    # hinge cannot differ from the batch's)
    gen = torch.Generator().manual_seed(31)
    groups = [0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 3]
    lengths = [int(x) for x in torch.randint(1, 6, (11,), generator=gen)]
    trajs = _trajectories(lengths, groups)
    width = max(lengths)
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    logp = -torch.rand(11, width, generator=gen, dtype=F64) * 2
    shift = 0.3 if name == "etr" else 1e-6
    old = logp + shift * torch.randn(11, width, generator=gen, dtype=F64)
    adv = torch.randn(11, generator=gen, dtype=F64)
    gi = torch.tensor(groups)
    fn, cfg = (etr_loss, etr_cfg(agg)) if name == "etr" else (disco_loss, disco_cfg(agg))
    full, full_grad = _run(fn, cfg, logp, old, adv, mask, gi)
    plan = RolloutBatch.build(trajs, pad_id=0).plan(
        adv,
        PlanOptions(
            micro_batch_size=4,
            agg=agg,
            skip_zero=False,
            whole_groups=True,
        ),
    )
    assert len(plan.chunks) > 1
    assert plan.weights == chunk_weights(mask.bool(), plan.chunks, agg)
    lp = logp.clone().requires_grad_(True)
    total = lp.new_zeros(())
    for rows, w in zip(plan.chunks, plan.weights, strict=True):
        out = fn(
            PolicyLossInputs(lp[rows], old[rows], adv[rows], mask[rows], group_index=gi[rows]),
            cfg=cfg,
        )
        total = total + w * out.loss
    total.backward()
    assert_close(total, full.loss)
    assert_close(lp.grad, full_grad)


def test_trainer_fills_group_index_and_accumulates_whole_groups():
    """End to end through run_update_pass with a tiny random Llama: micro-batches of whole groups,
    group_index from Trajectory.group, gradient equal to the full batch's."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from framework.rl.update import run_update_pass
    from framework.training.tokens import pack, token_logprobs

    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=32,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            pad_token_id=0,
        )
    ).eval()
    gen = torch.Generator().manual_seed(1)
    shapes = [(3, 2, 2, 1), (4, 1, 3, 2), (3, 3, 1, 1), (5, 2, 2, 2), (3, 1, 1, 3), (4, 2, 3, 1)]
    trajs = []
    for i, (prompt, first, tool, second) in enumerate(shapes):
        n = prompt + first + tool + second
        ids = torch.randint(1, 32, (n,), generator=gen).tolist()
        loss_mask = [0] * prompt + [1] * first + [0] * tool + [1] * second
        trajs.append(Trajectory(i // 3, i // 3, ids, loss_mask, prompt))
    adv = torch.tensor([1.0, -0.5, -0.5, 0.8, -0.8, 0.0])
    keep = torch.ones(6, dtype=torch.bool)
    for fn, cfg in ((etr_loss, etr_cfg()), (disco_loss, disco_cfg())):
        spec = loss_spec(cfg, SimpleNamespace(coef=0.0))
        model.zero_grad(set_to_none=True)
        batch = pack(trajs, 0)
        logp, _ = token_logprobs(model, batch)
        inputs = PolicyLossInputs(
            logp,
            logp.detach(),
            adv,
            batch.loss_mask,
            keep,
            group_index=torch.tensor([0, 0, 0, 1, 1, 1]),
        )
        fn(inputs, cfg=cfg).loss.backward()
        expected = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad(set_to_none=True)
        plan = RolloutBatch.build(trajs, pad_id=0, sample_mask=keep).plan(
            adv,
            PlanOptions(
                micro_batch_size=3,
                agg=spec.agg,
                skip_zero=False,
                whole_groups=spec.whole_groups,
            ),
        )
        assert [sorted(int(i) for i in c) for c in plan.chunks] in (
            [[0, 1, 2], [3, 4, 5]],
            [[3, 4, 5], [0, 1, 2]],
        )
        rollouts = RolloutBatch.build(trajs, pad_id=0, sample_mask=keep)
        micro = rollouts.micro_batches(plan.chunks, adv)
        run_update_pass(
            model, micro, plan.weights, spec, lambda x: x.backward(), pad_id=0, entropy=False
        )
        got = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        assert got.keys() == expected.keys()
        for n in expected:
            assert torch.allclose(got[n], expected[n], atol=1e-6, rtol=1e-4), (cfg.name, n)
        model.zero_grad(set_to_none=True)
