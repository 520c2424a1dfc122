"""Policy losses (PPO-clip with clip-higher, GSPO) and the aggregation modes."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.losses.gspo import GSPOLossConfig, gspo_loss
from framework.algorithms.losses.ppo_clip import ClipLossConfig, dual_clip, ppo_clip_loss
from framework.algorithms.stats.aggregation import aggregate
from framework.cli.app import load_config
from framework.config import ConfigError
from framework.types import PolicyLossInputs

F64 = torch.float64
MODES = ("token_mean", "seq_mean_token_mean", "token_sum_norm")


def ppo_cfg(agg="token_mean", low=0.2, high=0.28, norm_constant=None, dual=0.0):
    return ClipLossConfig(
        name="ppo_clip",
        clip_low=low,
        clip_high=high,
        agg=agg,
        norm_constant=norm_constant,
        dual_clip=dual,
    )


def gspo_cfg(agg="seq_mean_token_mean", low=3e-4, high=4e-4, norm_constant=None):
    return GSPOLossConfig(
        name="gspo", clip_low=low, clip_high=high, agg=agg, norm_constant=norm_constant
    )


def _scalar(x) -> torch.Tensor:
    return torch.tensor(x, dtype=F64)


# --------------------------------------------------------------------------- the tiny batch
# 2 rollouts x 3 tokens; rollout 1's last token is not trained (tool response / padding).
# Token ratios rho = exp(logp - old):
#   rollout 0 (A = +2):  1.0, 1.5, 0.9
#   rollout 1 (A = -1):  0.5, 1.1, [masked]
RATIOS = [[1.0, 1.5, 0.9], [0.5, 1.1, 1.0]]
OLD = [[-1.0, -1.2, -0.7], [-2.0, -0.3, -1.5]]
ADV = [2.0, -1.0]
MASK = [[1, 1, 1], [1, 1, 0]]


def tiny_batch(**overrides) -> PolicyLossInputs:
    old = torch.tensor(OLD, dtype=F64)
    logp = (old + torch.tensor(RATIOS, dtype=F64).log()).requires_grad_(True)
    fields = dict(
        logprobs=logp,
        old_logprobs=old,
        advantages=torch.tensor(ADV, dtype=F64),
        token_mask=torch.tensor(MASK),
    )
    fields.update(overrides)
    return PolicyLossInputs(**fields)


# Per-token PPO-clip losses, -min(rho A, clip(rho, 0.8, 1.28) A):
#   (0,0): rho 1.0, A 2:  min(2.0, 2.0)           -> -2.0
#   (0,1): rho 1.5, A 2:  min(3.0, 1.28*2 = 2.56) -> -2.56  (clipped high)
#   (0,2): rho 0.9, A 2:  min(1.8, 1.8)           -> -1.8   (inside the bounds)
#   (1,0): rho 0.5, A -1: min(-0.5, 0.8*-1=-0.8)  ->  0.8   (clipped low)
#   (1,1): rho 1.1, A -1: min(-1.1, -1.1)         ->  1.1
# row sums: -6.36 and 1.9; 5 trained tokens.
#   token_mean:          (-6.36 + 1.9) / 5               = -0.892
#   seq_mean_token_mean: (-6.36/3 + 1.9/2) / 2 = (-2.12 + 0.95) / 2 = -0.585
#   token_sum_norm (C=4): (-6.36 + 1.9) / (2 rows * 4)    = -0.5575
PPO_EXPECTED = {"token_mean": -0.892, "seq_mean_token_mean": -0.585, "token_sum_norm": -0.5575}

# d loss / d logp at an unclipped token = -A * rho * w (w = the token's aggregation weight);
# clipped tokens and masked tokens get 0.
#   token_mean (w = 1/5):            [-2*1/5, 0, -2*0.9/5], [0, 1.1/5, 0]
#   seq_mean_token_mean (w = 1/(2 T_i)): [-2/6, 0, -1.8/6], [0, 1.1/4, 0]
#   token_sum_norm (w = 1/8):        [-2/8, 0, -1.8/8], [0, 1.1/8, 0]
PPO_GRAD = {
    "token_mean": [[-0.4, 0.0, -0.36], [0.0, 0.22, 0.0]],
    "seq_mean_token_mean": [[-1 / 3, 0.0, -0.3], [0.0, 0.275, 0.0]],
    "token_sum_norm": [[-0.25, 0.0, -0.225], [0.0, 0.1375, 0.0]],
}


@pytest.mark.parametrize("agg", MODES)
def test_ppo_clip_hand_values_and_gradients(agg):
    inp = tiny_batch()
    out = ppo_clip_loss(
        inp, cfg=ppo_cfg(agg, norm_constant=4.0 if agg == "token_sum_norm" else None)
    )
    assert_close(out.loss, _scalar(PPO_EXPECTED[agg]))
    out.loss.backward()
    assert_close(inp.logprobs.grad, torch.tensor(PPO_GRAD[agg], dtype=F64))


def test_ppo_clip_metrics_hand_values():
    out = ppo_clip_loss(tiny_batch(), cfg=ppo_cfg())
    # clipped: (0,1) high with A > 0, (1,0) low with A < 0 -> 2 of 5 tokens.
    assert_close(out.metrics["clip_frac"].double(), _scalar(0.4))
    assert_close(out.metrics["clip_frac_high"].double(), _scalar(0.2))
    assert_close(out.metrics["clip_frac_low"].double(), _scalar(0.2))
    # ratio mean (1 + 1.5 + 0.9 + 0.5 + 1.1) / 5 = 1.0
    assert_close(out.metrics["ratio_mean"].double(), _scalar(1.0))
    # k3 per token rho - 1 - log rho: 0, 0.094535, 0.005361, 0.193147, 0.004690 -> mean 0.059546
    assert_close(out.metrics["approx_kl"].double(), _scalar(0.0595465), atol=1e-6, rtol=0)
    for v in out.metrics.values():
        assert not v.requires_grad


@pytest.mark.parametrize("agg", MODES)
def test_ratio_one_loss_is_minus_aggregated_advantage(agg):
    old = torch.tensor(OLD, dtype=F64)
    nc = 4.0 if agg == "token_sum_norm" else None
    # A = +2 on 3 tokens, -1 on 2 tokens:
    #   token_mean: -(6 - 2)/5 = -0.8; seq_mean_token_mean: -(2 - 1)/2 = -0.5;
    #   token_sum_norm: -(6 - 2)/(2 * 4) = -0.5
    expected = {"token_mean": -0.8, "seq_mean_token_mean": -0.5, "token_sum_norm": -0.5}[agg]
    for fn, cfg in (
        (ppo_clip_loss, ppo_cfg(agg, norm_constant=nc)),
        (gspo_loss, gspo_cfg(agg, norm_constant=nc)),
    ):
        inp = tiny_batch(logprobs=old.clone().requires_grad_(True))
        out = fn(inp, cfg=cfg)
        assert_close(out.loss, _scalar(expected))
        assert_close(out.metrics["clip_frac"].double(), _scalar(0.0))


def _one_token(ratio: float, adv: float, cfg) -> tuple[torch.Tensor, torch.Tensor, dict]:
    old = torch.tensor([[-1.0]], dtype=F64)
    logp = (old + math.log(ratio)).requires_grad_(True)
    inp = PolicyLossInputs(logp, old, torch.tensor([adv], dtype=F64), torch.tensor([[1]]))
    out = ppo_clip_loss(inp, cfg=cfg)
    out.loss.backward()
    return out.loss.detach(), logp.grad[0, 0], out.metrics


def test_clip_high_positive_advantage():
    # A = 1, rho = 1.5 > 1 + 0.28: objective min(1.5, 1.28) = 1.28 -> loss -1.28, gradient 0.
    loss, grad, m = _one_token(1.5, 1.0, ppo_cfg(low=0.2, high=0.28))
    assert_close(loss, _scalar(-1.28))
    assert grad.item() == 0.0
    assert m["clip_frac"].item() == 1.0 and m["clip_frac_high"].item() == 1.0


def test_clip_low_negative_advantage():
    # A = -1, rho = 0.5 < 1 - 0.2: objective min(-0.5, -0.8) = -0.8 -> loss 0.8, gradient 0.
    loss, grad, m = _one_token(0.5, -1.0, ppo_cfg(low=0.2, high=0.28))
    assert_close(loss, _scalar(0.8))
    assert grad.item() == 0.0
    assert m["clip_frac"].item() == 1.0 and m["clip_frac_low"].item() == 1.0


def test_pessimistic_side_is_not_clipped():
    # A = -1, rho = 1.5: min(-1.5, -1.28) = -1.5 -> loss 1.5, gradient d(1.5)/dlogp = rho = 1.5.
    loss, grad, m = _one_token(1.5, -1.0, ppo_cfg(low=0.2, high=0.28))
    assert_close(loss, _scalar(1.5))
    assert_close(grad, _scalar(1.5))
    assert m["clip_frac"].item() == 0.0
    # A = 2, rho = 0.5: min(1.0, 1.6) = 1.0 -> loss -1.0, gradient -A rho = -1.0.
    loss, grad, _ = _one_token(0.5, 2.0, ppo_cfg(low=0.2, high=0.28))
    assert_close(loss, _scalar(-1.0))
    assert_close(grad, _scalar(-1.0))


def test_asymmetric_bounds():
    cfg = ppo_cfg(low=0.1, high=0.5)  # ratio kept in [0.9, 1.5]
    # A = 1, rho = 1.4 is inside the (wide) upper bound: loss -1.4, gradient -1.4
    loss, grad, _ = _one_token(1.4, 1.0, cfg)
    assert_close(loss, _scalar(-1.4))
    assert_close(grad, _scalar(-1.4))
    # A = 1, rho = 1.6 is above it: loss -1.5, gradient 0
    loss, grad, _ = _one_token(1.6, 1.0, cfg)
    assert_close(loss, _scalar(-1.5))
    assert grad.item() == 0.0
    # A = -1, rho = 0.85 is below the (narrow) lower bound 0.9: loss 0.9, gradient 0
    loss, grad, _ = _one_token(0.85, -1.0, cfg)
    assert_close(loss, _scalar(0.9))
    assert grad.item() == 0.0
    # A = -1, rho = 0.95 is inside: loss 0.95, gradient 0.95
    loss, grad, _ = _one_token(0.95, -1.0, cfg)
    assert_close(loss, _scalar(0.95))
    assert_close(grad, _scalar(0.95))


# --------------------------------------------------------------------------- dual clip
# Per token, this code's loss is max(-rho A, -clip(rho) A) (the pessimistic bound, to minimise);
# dual clip with c makes it min(that, -c A) where A < 0.


def test_dual_clip_caps_a_large_ratio_on_a_negative_advantage():
    # A = -1, rho = 20, c = 3, bounds [0.8, 1.28]:
    #   -rho A = 20, -clip(20) A = 1.28, pessimistic max(20, 1.28) = 20, gradient -A rho = 20;
    #   dual clip: min(20, -c A = 3) = 3, a constant: gradient 0.
    loss, grad, m = _one_token(20.0, -1.0, ppo_cfg())
    assert_close(loss, _scalar(20.0))
    assert_close(grad, _scalar(20.0))
    loss, grad, m = _one_token(20.0, -1.0, ppo_cfg(dual=3.0))
    assert_close(loss, _scalar(3.0))
    assert grad.item() == 0.0
    assert m["dual_clip_frac"].item() == 1.0
    # A = -2, rho = 5, c = 3: min(10, 6) = 6
    loss, grad, _ = _one_token(5.0, -2.0, ppo_cfg(dual=3.0))
    assert_close(loss, _scalar(6.0))
    assert grad.item() == 0.0


def test_dual_clip_below_c_is_plain_ppo():
    # A = -1, rho = 2 < c = 3: max(2, 1.28) = 2 < 3, so loss 2 and gradient -A rho = 2
    loss, grad, m = _one_token(2.0, -1.0, ppo_cfg(dual=3.0))
    assert_close(loss, _scalar(2.0))
    assert_close(grad, _scalar(2.0))
    assert m["dual_clip_frac"].item() == 0.0
    # A = -1, rho = 0.5 (clipped low): max(0.5, 0.8) = 0.8 < 3: loss 0.8, gradient 0
    loss, grad, _ = _one_token(0.5, -1.0, ppo_cfg(dual=3.0))
    assert_close(loss, _scalar(0.8))
    assert grad.item() == 0.0


def test_dual_clip_leaves_positive_advantages_alone():
    # A = +1, rho = 20: max(-20, -1.28) = -1.28 (clipped high), gradient 0; -c A = -3 would be
    # lower, but A > 0 is not dual-clipped
    loss, grad, _ = _one_token(20.0, 1.0, ppo_cfg(dual=3.0))
    assert_close(loss, _scalar(-1.28))
    assert grad.item() == 0.0
    # A = +2, rho = 0.5: max(-1.0, -1.6) = -1.0, gradient -A rho = -1.0
    loss, grad, _ = _one_token(0.5, 2.0, ppo_cfg(dual=3.0))
    assert_close(loss, _scalar(-1.0))
    assert_close(grad, _scalar(-1.0))


def test_dual_clip_function_hand_values():
    per_token = torch.tensor([[20.0, 2.0, -1.28, 0.0]], dtype=F64)
    adv = torch.tensor([[-1.0, -1.0, 1.0, 0.0]], dtype=F64)
    # min(20, 3) = 3; min(2, 3) = 2; A > 0 kept; A = 0 kept
    expected = torch.tensor([[3.0, 2.0, -1.28, 0.0]], dtype=F64)
    assert torch.equal(dual_clip(per_token, adv, 3.0), expected)
    assert dual_clip(per_token, adv, 0.0) is per_token


def test_dual_clip_on_the_tiny_batch():
    # c = 1.05 caps only token (1,1): A = -1, rho 1.1, loss 1.1 > 1.05 -> 1.05 with gradient 0;
    # token (1,0) (A = -1, loss 0.8) is below it. token_mean: (-6.36 + 0.8 + 1.05)/5 = -0.902
    inp = tiny_batch()
    out = ppo_clip_loss(inp, cfg=ppo_cfg(dual=1.05))
    assert_close(out.loss, _scalar(-0.902))
    out.loss.backward()
    assert_close(inp.logprobs.grad, torch.tensor([[-0.4, 0.0, -0.36], [0.0, 0.0, 0.0]], dtype=F64))
    assert_close(out.metrics["dual_clip_frac"].double(), _scalar(0.2))


@pytest.mark.parametrize("agg", MODES)
def test_dual_clip_off_is_todays_loss_bit_for_bit(agg):
    gen = torch.Generator().manual_seed(5)
    nc = 6.0 if agg == "token_sum_norm" else None
    logp, old, adv, mask, _ = _random_inputs(gen, 6, 7, token_adv=True, scale=2.0)
    results = []
    for cfg in (
        ClipLossConfig(name="ppo_clip", agg=agg, norm_constant=nc),
        ppo_cfg(agg, 0.2, 0.28, nc),
    ):
        lp = logp.clone().requires_grad_(True)
        out = ppo_clip_loss(PolicyLossInputs(lp, old, adv, mask), cfg=cfg)
        out.loss.backward()
        assert "dual_clip_frac" not in out.metrics
        results.append((out.loss.detach(), lp.grad))
    # the default is off, and off changes nothing; the batch's large ratios would be capped at 3
    assert ClipLossConfig(name="ppo_clip").dual_clip == 0.0
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])
    lp = logp.clone().requires_grad_(True)
    on = ppo_clip_loss(PolicyLossInputs(lp, old, adv, mask), cfg=ppo_cfg(agg, 0.2, 0.28, nc, 3.0))
    assert on.metrics["dual_clip_frac"].item() > 0 and not torch.equal(on.loss, results[0][0])


def test_dual_clip_applies_to_gspos_sequence_ratio():
    # one token, A = -1, s = rho = 20: -s A = 20 > -clip(s) A = 1.0004; c = 3 caps it at 3
    old = torch.tensor([[-1.0]], dtype=F64)
    logp = (old + math.log(20.0)).requires_grad_(True)
    inp = PolicyLossInputs(logp, old, torch.tensor([-1.0], dtype=F64), torch.tensor([[1]]))
    cfg = GSPOLossConfig(name="gspo", dual_clip=3.0)
    assert_close(gspo_loss(inp, cfg=cfg).loss, _scalar(3.0))
    assert_close(gspo_loss(inp, cfg=GSPOLossConfig(name="gspo")).loss, _scalar(20.0))


def test_dual_clip_validation():
    for bad in (1.0, 0.5, -3.0):
        (problem,) = ClipLossConfig(name="ppo_clip", dual_clip=bad).problems()
        assert str(problem.under("loss")) == (
            f"[loss.dual_clip] got {bad!r}; expected a number > 1.0. Fix: set loss.dual_clip above "
            "1, e.g. 3 (verl's default), or 0 to turn it off."
        )
    assert ClipLossConfig(name="ppo_clip", dual_clip=0.0).problems() == []
    assert ClipLossConfig(name="ppo_clip", dual_clip=3.0).problems() == []
    cfg = load_config("train", ["algorithm=grpo", "loss=ppo_clip", "loss.dual_clip=3"])
    assert cfg.loss.name == "ppo_clip" and cfg.loss.dual_clip == 3.0
    assert load_config("train", ["algorithm=grpo", "loss=ppo_clip"]).loss.dual_clip == 0.0
    with pytest.raises(ConfigError, match=r"\[loss\.dual_clip\] got 0\.5"):
        load_config("train", ["algorithm=grpo", "loss=ppo_clip", "loss.dual_clip=0.5"])


# --------------------------------------------------------------------------- masking


def _random_inputs(gen, n, length, *, token_adv=False, sample_mask=False, scale=0.3):
    old = -torch.rand(n, length, generator=gen, dtype=F64) * 3
    logp = old + scale * torch.randn(n, length, generator=gen, dtype=F64)
    shape = (n, length) if token_adv else (n,)
    adv = torch.randn(*shape, generator=gen, dtype=F64)
    mask = torch.rand(n, length, generator=gen) < 0.7
    smask = (torch.rand(n, generator=gen) < 0.8).long() if sample_mask else None
    return logp, old, adv, mask, smask


@pytest.mark.parametrize("loss_name", ["ppo_clip", "gspo"])
@pytest.mark.parametrize("agg", MODES)
def test_masked_tokens_change_nothing(loss_name, agg):
    fn = ppo_clip_loss if loss_name == "ppo_clip" else gspo_loss
    nc = 6.0 if agg == "token_sum_norm" else None
    cfg = ppo_cfg(agg, norm_constant=nc) if fn is ppo_clip_loss else gspo_cfg(agg, 0.05, 0.05, nc)
    gen = torch.Generator().manual_seed(7)
    logp, old, adv, mask, _ = _random_inputs(gen, 4, 6, token_adv=True)
    mask[:, 0] = True  # every rollout has a trained token

    def run(lp, o, a):
        lp = lp.clone().requires_grad_(True)
        out = fn(PolicyLossInputs(lp, o, a, mask.long()), cfg=cfg)
        out.loss.backward()
        return out, lp.grad

    base, base_grad = run(logp, old, adv)
    # garbage (NaN / -inf / huge) at untrained positions only
    lp2 = logp.masked_fill(~mask, float("nan"))
    old2 = old.masked_fill(~mask, float("-inf"))
    adv2 = adv.masked_fill(~mask, float("nan"))
    out2, grad2 = run(lp2, old2, adv2)
    lp3 = logp.masked_fill(~mask, 50.0)
    adv3 = adv.masked_fill(~mask, 1e6)
    out3, grad3 = run(lp3, old, adv3)
    for out, grad in ((out2, grad2), (out3, grad3)):
        assert_close(out.loss, base.loss)
        assert_close(grad, base_grad)
        assert torch.isfinite(grad).all()
        assert (grad[~mask] == 0).all()
        for k, v in base.metrics.items():
            assert_close(out.metrics[k], v)


def _rows(inp: PolicyLossInputs, rows: list[int]) -> PolicyLossInputs:
    return PolicyLossInputs(
        inp.logprobs[rows], inp.old_logprobs[rows], inp.advantages[rows], inp.token_mask[rows]
    )


@pytest.mark.parametrize("loss_name", ["ppo_clip", "gspo"])
@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_mean"])
def test_sample_mask_removes_rollout(loss_name, agg):
    fn = ppo_clip_loss if loss_name == "ppo_clip" else gspo_loss
    cfg = ppo_cfg(agg) if fn is ppo_clip_loss else gspo_cfg(agg, 0.05, 0.05)
    gen = torch.Generator().manual_seed(3)
    logp, old, adv, mask, _ = _random_inputs(gen, 3, 5)
    mask[:, 0] = True
    logp.requires_grad_(True)
    full = PolicyLossInputs(logp, old, adv, mask, sample_mask=torch.tensor([1, 0, 1]))
    out = fn(full, cfg=cfg)
    out.loss.backward()
    lp_ref = logp.detach().clone().requires_grad_(True)
    ref = fn(_rows(PolicyLossInputs(lp_ref, old, adv, mask), [0, 2]), cfg=cfg)
    ref.loss.backward()
    assert_close(out.loss, ref.loss)
    assert (logp.grad[1] == 0).all()
    assert_close(logp.grad[[0, 2]], lp_ref.grad[[0, 2]])


def test_sample_mask_token_sum_norm_keeps_n_in_denominator():
    # token_sum_norm divides by N * C with N counting every row (mask-independent): dropping row 1
    # of 3 gives (sum over rows 0 and 2) / (3 C) = loss of rows {0, 2} alone * 2/3.
    gen = torch.Generator().manual_seed(4)
    logp, old, adv, mask, _ = _random_inputs(gen, 3, 5)
    cfg = ppo_cfg("token_sum_norm", norm_constant=5.0)
    full = PolicyLossInputs(logp, old, adv, mask, sample_mask=torch.tensor([1, 0, 1]))
    sub = _rows(PolicyLossInputs(logp, old, adv, mask), [0, 2])
    assert_close(ppo_clip_loss(full, cfg=cfg).loss, ppo_clip_loss(sub, cfg=cfg).loss * 2 / 3)


# --------------------------------------------------------------------------- loop parity


def ref_ppo_loss(logp, old, adv, mask, smask, low, high, agg, nc):
    """Naive per-token loop (torch scalars, so autograd gives the reference gradient)."""
    n, length = logp.shape
    row_sums, row_counts = [], []
    clipped = total = 0
    for i in range(n):
        s, c = logp.new_zeros(()), 0
        for t in range(length):
            if not mask[i, t] or (smask is not None and not smask[i]):
                continue
            a = adv[i, t] if adv.dim() == 2 else adv[i]
            rho = torch.exp(logp[i, t] - old[i, t])
            obj = torch.minimum(rho * a, torch.clamp(rho, 1 - low, 1 + high) * a)
            s = s - obj
            c += 1
            total += 1
            clipped += bool((a > 0 and rho > 1 + high) or (a < 0 and rho < 1 - low))
        row_sums.append(s)
        row_counts.append(c)
    if agg == "token_mean":
        loss = sum(row_sums) / max(total, 1)
    elif agg == "seq_mean_token_mean":
        per = [s / c for s, c in zip(row_sums, row_counts) if c > 0]
        loss = sum(per) / len(per) if per else logp.new_zeros(())
    else:
        loss = sum(row_sums) / (n * nc)
    return loss, clipped / max(total, 1)


def test_ppo_clip_matches_loop_reference_on_random_batches():
    gen = torch.Generator().manual_seed(99)
    for b in range(20):
        n = int(torch.randint(1, 5, (1,), generator=gen))
        length = int(torch.randint(1, 6, (1,), generator=gen))
        logp, old, adv, mask, smask = _random_inputs(
            gen, n, length, token_adv=b % 2 == 1, sample_mask=b % 3 != 0
        )
        low, high = 0.2, 0.28
        for agg in MODES:
            nc = 7.0 if agg == "token_sum_norm" else None
            lp = logp.clone().requires_grad_(True)
            out = ppo_clip_loss(
                PolicyLossInputs(lp, old, adv, mask, smask), cfg=ppo_cfg(agg, low, high, nc)
            )
            lp_ref = logp.clone().requires_grad_(True)
            ref_loss, ref_clip = ref_ppo_loss(lp_ref, old, adv, mask, smask, low, high, agg, nc)
            assert_close(
                out.loss, ref_loss.to(F64) if torch.is_tensor(ref_loss) else _scalar(ref_loss)
            )
            assert abs(out.metrics["clip_frac"].item() - ref_clip) < 1e-6
            out.loss.backward()
            if torch.is_tensor(ref_loss) and ref_loss.requires_grad:
                ref_loss.backward()
                assert_close(lp.grad, lp_ref.grad)
            else:  # nothing trained: no gradient anywhere
                assert (lp.grad == 0).all()


# --------------------------------------------------------------------------- GSPO


def test_gspo_sequence_ratio_hand_values():
    # s_0 = exp((log 1 + log 1.5 + log 0.9)/3) = 1.35^(1/3) = 1.105209
    # s_1 = exp((log 0.5 + log 1.1)/2)          = 0.55^(1/2) = 0.741620
    # seq_ratio_mean = (1.105209 + 0.741620)/2 = 0.923415
    out = gspo_loss(tiny_batch(), cfg=gspo_cfg())
    assert_close(out.metrics["seq_ratio_mean"].double(), _scalar(0.923415), atol=1e-6, rtol=0)
    # Default bounds [1 - 3e-4, 1 + 4e-4]: both sequences are clipped.
    #   rollout 0 (A = 2):  min(2 * 1.105209, 2 * 1.0004)   = 2.0008 -> loss -2.0008
    #   rollout 1 (A = -1): min(-0.741620, -0.9997)         = -0.9997 -> loss 0.9997
    #   seq_mean_token_mean: (-2.0008 + 0.9997)/2 = -0.50055; every token clipped, no gradient.
    assert_close(out.loss, _scalar(-0.50055))
    assert_close(out.metrics["clip_frac"].double(), _scalar(1.0))


def test_gspo_unclipped_hand_values_and_gradient():
    inp = tiny_batch()
    out = gspo_loss(inp, cfg=gspo_cfg(low=0.5, high=0.5))  # [0.5, 1.5]: nothing clipped
    # loss = -(2 * 1.105209 + (-1) * 0.741620)/2 = -(2.210419 - 0.741620)/2 = -0.734400
    assert_close(out.loss, _scalar(-0.734400), atol=1e-6, rtol=0)
    out.loss.backward()
    # d/dlogp_{i,t} = -(1/N) A_i s_i / T_i:
    #   rollout 0: -(1/2) * 2 * 1.105209 / 3 = -0.368403; rollout 1: (1/2) * 0.741620 / 2 = 0.185405
    g0, g1 = -(1.35 ** (1 / 3)) / 3, math.sqrt(0.55) / 4
    expected = torch.tensor([[g0, g0, g0], [g1, g1, 0.0]], dtype=F64)
    assert_close(inp.logprobs.grad, expected)
    assert abs(g0 + 0.368403) < 1e-6 and abs(g1 - 0.185405) < 1e-6


def explicit_gspo_objective(logp, old, adv, mask, low, high):
    """-mean_i min(s_i A_i, clip(s_i, 1 - low, 1 + high) A_i), s_i = exp(mean_t log rho)."""
    m = mask.to(logp.dtype)
    tokens = m.sum(-1)
    has = tokens > 0
    s = torch.exp(((logp - old) * m).sum(-1)[has] / tokens[has])
    a = adv[has]
    return -torch.minimum(s * a, s.clamp(1 - low, 1 + high) * a).mean()


def test_gspo_gradient_matches_explicit_sequence_objective():
    gen = torch.Generator().manual_seed(5)
    n_clipped = n_free = 0
    for _ in range(10):
        n, length = 6, 5
        logp, old, adv, mask, _ = _random_inputs(gen, n, length, scale=0.2)
        mask[:, 0] = True
        low, high = 0.05, 0.08
        lp = logp.clone().requires_grad_(True)
        out = gspo_loss(PolicyLossInputs(lp, old, adv, mask), cfg=gspo_cfg(low=low, high=high))
        out.loss.backward()
        lp_ref = logp.clone().requires_grad_(True)
        ref = explicit_gspo_objective(lp_ref, old, adv, mask, low, high)
        ref.backward()
        assert_close(out.loss, ref)
        assert_close(lp.grad, lp_ref.grad)
        zero_rows = (lp_ref.grad == 0).all(-1)
        n_clipped += int(zero_rows.sum())
        n_free += int((~zero_rows).sum())
    assert n_clipped > 0 and n_free > 0  # both regimes were exercised


@pytest.mark.parametrize("agg", MODES)
def test_gspo_on_policy_gradient_is_ppo_clip_gradient(agg):
    # s_i = rho_t = 1: no bound of either loss is active and both gradients are -A_i times the
    # aggregation weight of each token (why the screen's GSPO run trained exactly as GRPO's)
    gen = torch.Generator().manual_seed(11)
    nc = 6.0 if agg == "token_sum_norm" else None
    logp, _, adv, mask, _ = _random_inputs(gen, 5, 4)
    mask[:, 0] = True
    old = logp.detach().clone()
    grads = []
    for fn, cfg in (
        (gspo_loss, gspo_cfg(agg, norm_constant=nc)),
        (ppo_clip_loss, ppo_cfg(agg, norm_constant=nc)),
    ):
        lp = logp.clone().requires_grad_(True)
        fn(PolicyLossInputs(lp, old, adv, mask), cfg=cfg).loss.backward()
        grads.append(lp.grad)
    assert_close(grads[0], grads[1])
    assert (grads[0][mask] != 0).all()  # every trained token has a gradient to compare


# --------------------------------------------------------------------------- aggregate()


def test_aggregate_unknown_mode_raises():
    with pytest.raises(ValueError, match="agg"):
        aggregate(torch.zeros(2, 2), torch.ones(2, 2), "token_median")


@pytest.mark.parametrize("nc", [None, 0.0, -3.0])
def test_aggregate_token_sum_norm_requires_positive_constant(nc):
    with pytest.raises(ValueError, match="norm_constant"):
        aggregate(torch.zeros(2, 2), torch.ones(2, 2), "token_sum_norm", nc)


def test_aggregate_hand_values():
    v = torch.tensor([[1.0, 2.0, 3.0], [4.0, 100.0, float("nan")]], dtype=F64)
    m = torch.tensor([[1, 1, 1], [1, 0, 0]])
    # token_mean: (1 + 2 + 3 + 4)/4 = 2.5; seq_mean_token_mean: (2 + 4)/2 = 3;
    # token_sum_norm (C = 5): (6 + 4)/(2 * 5) = 1.0
    assert_close(aggregate(v, m, "token_mean"), _scalar(2.5))
    assert_close(aggregate(v, m, "seq_mean_token_mean"), _scalar(3.0))
    assert_close(aggregate(v, m, "token_sum_norm", 5.0), _scalar(1.0))


def test_aggregate_seq_mean_skips_rows_without_tokens():
    v = torch.tensor([[1.0, 3.0], [7.0, 7.0]], dtype=F64)
    m = torch.tensor([[1, 1], [0, 0]])
    # only row 0 has tokens: mean 2 (not (2 + 0)/2 = 1)
    assert_close(aggregate(v, m, "seq_mean_token_mean"), _scalar(2.0))


@pytest.mark.parametrize("agg", MODES)
def test_aggregate_all_masked_is_zero_with_gradient_path(agg):
    v = torch.randn(3, 4, dtype=F64, generator=torch.Generator().manual_seed(0))
    v.requires_grad_(True)
    loss = aggregate(v, torch.zeros(3, 4, dtype=torch.bool), agg, 8.0)
    assert loss.item() == 0.0
    loss.backward()
    assert (v.grad == 0).all()


@pytest.mark.parametrize("loss_name", ["ppo_clip", "gspo"])
def test_all_masked_loss_is_zero_and_backward_works(loss_name):
    fn = ppo_clip_loss if loss_name == "ppo_clip" else gspo_loss
    cfg = ppo_cfg("seq_mean_token_mean") if fn is ppo_clip_loss else gspo_cfg()
    inp = tiny_batch(sample_mask=torch.tensor([0, 0]))
    out = fn(inp, cfg=cfg)
    assert out.loss.item() == 0.0
    out.loss.backward()
    assert (inp.logprobs.grad == 0).all()
