"""Rollout correction in the trainer: ``chunk_loss`` unchanged with correction none, TIS scaling
the gradient by the truncated ratio of a hand-built log-prob pair, the mismatch figures of
``policy_update``, and the error when the rollout log-probs are missing."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from framework.algorithms.losses.ppo_clip import ClipLossConfig, ppo_clip_loss
from framework.algorithms.losses.rollout_correction import mismatch_figures
from framework.rl.batch import RolloutBatch
from framework.rl.update import LossSpec, chunk_loss, loss_spec, plan_options, policy_update
from framework.training.tokens import pack, packed_rollout_logprobs, token_logprobs

from .conftest import make_trajectories

ADVANTAGES = torch.tensor([0.7, -0.7, 0.4, -1.1, 1.2, -0.4])
SAMPLE_MASK = torch.ones(6, dtype=torch.bool)
ALL = torch.arange(6)


def _spec(**correction) -> LossSpec:
    cfg = ClipLossConfig(name="ppo_clip", agg="token_mean")
    return LossSpec(policy_loss=lambda x: ppo_clip_loss(x, cfg=cfg), agg="token_mean", **correction)


def _trainer_logprobs(model, trajs, pad_id) -> list[list[float]]:
    """Each trajectory's trainer log-prob per token (0 off the generated tokens), by position."""
    out = []
    for t in trajs:
        batch = pack([t], pad_id)
        with torch.no_grad():
            logp, _ = token_logprobs(model, batch)
        r = batch.response_width
        full = [0.0] * len(t.token_ids)
        for j in range(r):
            full[len(t.token_ids) - r + j] = float(logp[0, j])
        out.append(full)
    return out


def _with_rollout_logprobs(trajs, trainer, log_ratio_per_row):
    """Copies of ``trajs`` whose rollout log-probs are the trainer's minus ``log ρ_k`` on every
    generated token, so each generated token of row ``k`` has ratio ``π_old / μ = ρ_k``."""
    out = []
    for t, lp, d in zip(trajs, trainer, log_ratio_per_row, strict=True):
        behav = [x - d if m else 0.0 for x, m in zip(lp, t.loss_mask, strict=True)]
        out.append(dataclasses.replace(t, rollout_logprobs=behav))
    return out


def _loss_and_grad(model, trajs, rows, spec, pad_id, advantages=ADVANTAGES):
    model.zero_grad(set_to_none=True)
    batch = RolloutBatch.build(trajs, pad_id=pad_id, sample_mask=SAMPLE_MASK)
    (micro,) = batch.micro_batches([rows], advantages)
    out, _, _, mismatch = chunk_loss(model, micro, spec)
    out.loss.backward()
    grads = [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    return out, grads, mismatch


def _same(a, b, rtol=1e-5, atol=1e-7):
    """Equal gradients up to fp32 rounding, measured against each tensor's largest entry.

    Not element-wise: an entry near zero is a sum that cancels, and its rounding error scales with
    the terms summed, not with the entry. On an AVX2-only EPYC the weighted and the scaled gradient
    differed in some entry by up to 3.8e-4 of that entry, and by at most 8.7e-6 of the tensor's
    largest entry.
    """
    return all(
        float((x - y).abs().max()) <= rtol * float(y.abs().max()) + atol
        for x, y in zip(a, b, strict=True)
    )


@pytest.fixture(scope="module")
def setup(tiny_policy):
    model, tok = tiny_policy
    trajs = make_trajectories(model.config.vocab_size)
    return model, tok.pad_token_id, trajs, _trainer_logprobs(model, trajs, tok.pad_token_id)


def test_packed_rollout_logprobs_follow_packs_layout(setup):
    _, _, trajs, trainer = setup
    ratios = [0.1 * (k + 1) for k in range(6)]
    marked = _with_rollout_logprobs(trajs, trainer, ratios)
    width = pack(marked, 0).response_width
    packed = packed_rollout_logprobs(marked, width)
    for k, t in enumerate(marked):
        n = len(t.token_ids)
        for j in range(width):
            pos = n - width + j
            want = t.rollout_logprobs[pos] if pos >= 0 else 0.0
            assert packed[k, j].item() == pytest.approx(want, abs=1e-6)
    assert packed_rollout_logprobs(trajs, width) is None  # no rollout log-probs recorded


def test_correction_none_leaves_loss_and_gradient_unchanged(setup):
    model, pad, trajs, trainer = setup
    plain, plain_grads, none_stats = _loss_and_grad(model, trajs, ALL, _spec(), pad)
    assert none_stats is None  # nothing to measure without rollout log-probs
    marked = _with_rollout_logprobs(trajs, trainer, [1.1, -0.5, 0.0, 2.0, 0.3, -3.0])
    out, grads, stats = _loss_and_grad(model, marked, ALL, _spec(), pad)
    assert torch.equal(out.loss, plain.loss)
    assert _same(grads, plain_grads, rtol=0, atol=0)
    assert stats is not None and stats.tokens > 0 and not stats.correction


@pytest.mark.parametrize(
    ("ratio", "mode", "weight"),
    [
        (3.0, "tis", 2.0),  # min(3, C=2)
        (0.5, "tis", 0.5),  # below C: the plain importance weight
        (1.5, "mis", 1.5),  # kept with its ratio
        (3.0, "mis", 0.0),  # above C: masked
    ],
)
def test_token_correction_scales_the_gradient_by_the_weight(setup, ratio, mode, weight):
    """One rollout whose generated tokens all have ratio ρ: the on-policy gradient (ratio-1
    surrogate, so ``∇ = -A ∇log π`` per token) is multiplied by the weight exactly."""
    model, pad, trajs, trainer = setup
    rows = torch.tensor([0])
    _, plain_grads, _ = _loss_and_grad(model, trajs, rows, _spec(), pad)
    marked = _with_rollout_logprobs(trajs, trainer, [torch.tensor(ratio).log().item()] * 6)
    spec = _spec(rollout_correction=mode, rollout_correction_threshold=2.0)
    _, grads, stats = _loss_and_grad(model, marked, rows, spec, pad)
    assert _same(grads, [g * weight for g in plain_grads], rtol=1e-4, atol=1e-7)
    figs = stats.figures()
    assert figs["rollout_correction_weight_mean"] == pytest.approx(weight, rel=1e-5)
    assert figs["rollout_correction_frac"] == (1.0 if ratio > 2.0 else 0.0)


def test_token_tis_equals_weighting_the_advantages(setup):
    """Rows with different ratios: the corrected gradient is the uncorrected one with each row's
    advantage times its weight (the identity the losses rely on)."""
    model, pad, trajs, trainer = setup
    ratios = torch.tensor([3.0, 0.5, 1.0, 1.5, 4.0, 0.25])
    marked = _with_rollout_logprobs(trajs, trainer, ratios.log().tolist())
    spec = _spec(rollout_correction="tis", rollout_correction_threshold=2.0)
    _, grads, _ = _loss_and_grad(model, marked, ALL, spec, pad)
    weighted = ADVANTAGES * ratios.clamp(max=2.0)
    _, want, _ = _loss_and_grad(model, trajs, ALL, _spec(), pad, advantages=weighted)
    assert _same(grads, want, rtol=1e-4, atol=1e-7)


def test_sequence_tis_uses_the_product_over_the_rollout(setup):
    model, pad, trajs, trainer = setup
    rows = torch.tensor([1])
    n = sum(trajs[1].loss_mask)  # 5 generated tokens, each of ratio 1.1: ρ = 1.1 ** 5 = 1.61
    marked = _with_rollout_logprobs(trajs, trainer, [torch.tensor(1.1).log().item()] * 6)
    _, plain_grads, _ = _loss_and_grad(model, trajs, rows, _spec(), pad)
    for threshold, weight in ((2.0, 1.1**n), (1.5, 1.5)):
        spec = _spec(
            rollout_correction="tis",
            rollout_correction_level="sequence",
            rollout_correction_threshold=threshold,
        )
        _, grads, _ = _loss_and_grad(model, marked, rows, spec, pad)
        assert _same(grads, [g * weight for g in plain_grads], rtol=1e-4, atol=1e-7)


def test_missing_rollout_logprobs_with_a_correction_is_an_error(setup):
    model, pad, trajs, _ = setup
    with pytest.raises(ValueError, match=r"rollout\.decoder=generate") as err:
        _loss_and_grad(model, trajs, ALL, _spec(rollout_correction="tis"), pad)
    assert str(err.value).startswith("[loss.rollout_correction] got 'tis'")


def test_loss_spec_carries_the_correction_fields():
    cfg = ClipLossConfig(
        name="ppo_clip",
        rollout_correction="mis",
        rollout_correction_level="sequence",
        rollout_correction_threshold=3.0,
    )
    spec = loss_spec(cfg, SimpleNamespace(coef=0.0))
    assert (spec.rollout_correction, spec.rollout_correction_level) == ("mis", "sequence")
    assert spec.rollout_correction_threshold == 3.0


def test_policy_update_reports_the_first_pass_mismatch(setup):
    import copy

    base, pad, trajs, trainer = setup
    model = copy.deepcopy(base)
    log_ratios = [0.9, -0.2, 0.0, 0.1, -0.8, 0.05]
    marked = _with_rollout_logprobs(trajs, trainer, log_ratios)
    # expected: the trainer's pre-update log-probs against the rollout's, over every trained token
    width = pack(marked, pad).response_width
    batch = pack(marked, pad)
    with torch.no_grad():
        old, _ = token_logprobs(model, batch)
    want = mismatch_figures(
        old, packed_rollout_logprobs(marked, width), batch.loss_mask.bool(), threshold=2.0
    )
    optim = SimpleNamespace(
        policy_epochs=1,
        micro_batch_size=2,
        mini_batch_size=0,
        micro_batch_tokens=0,
        skip_zero_advantage=True,
        grad_clip=1.0,
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    spec = _spec(rollout_correction="tis")
    rollouts = RolloutBatch.build(marked, pad_id=pad, sample_mask=SAMPLE_MASK)
    plan = rollouts.plan(ADVANTAGES, plan_options(optim, spec))
    figures = policy_update(model, plan, spec, opt, sched, optim)
    for name in (
        "rollout_mismatch_kl_mean",
        "rollout_mismatch_kl_max",
        "rollout_mismatch_frac_beyond",
    ):
        assert figures[name] == pytest.approx(want[name], rel=1e-4, abs=1e-6), name
    # |log ρ| > log 2 on rows 0 (0.9) and 4 (-0.8) only
    tokens = [sum(t.loss_mask) for t in trajs]
    assert figures["rollout_mismatch_frac_beyond"] == pytest.approx(
        (tokens[0] + tokens[4]) / sum(tokens), abs=1e-6
    )
    # truncated: ratio e^0.9 = 2.46 > 2 on row 0 only
    assert figures["rollout_correction_frac"] == pytest.approx(tokens[0] / sum(tokens), abs=1e-6)
