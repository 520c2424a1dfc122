"""Micro-batched gradient accumulation reproduces the full-batch loss and gradient exactly."""

from __future__ import annotations

import pytest
import torch

from framework.algorithms.losses.ppo_clip import ClipLossConfig, ppo_clip_loss
from framework.algorithms.stats.aggregation import AGG_MODES, aggregate, chunk_weights
from framework.rl.batch import PlanOptions, RolloutBatch
from framework.rl.update import (
    LossSpec,
    behaviour_logprobs,
)
from framework.training.tokens import pack, token_logprobs
from framework.types import PolicyLossInputs

from .conftest import make_trajectories, update_pass

ADVANTAGES = torch.tensor([0.7, -0.7, 0.0, 0.0, 1.2, -0.4])  # group 1 is constant: skipped
SAMPLE_MASK = torch.tensor([True, True, True, True, True, False])  # last one over budget


@pytest.mark.parametrize("mode", AGG_MODES)
def test_chunk_weights_reassemble_the_full_aggregate(mode):
    gen = torch.Generator().manual_seed(1)
    values = torch.randn(7, 5, generator=gen)
    mask = torch.rand(7, 5, generator=gen) > 0.4
    mask[3] = False  # a row without trained tokens
    chunks = [torch.tensor([0, 4]), torch.tensor([1, 2, 3]), torch.tensor([5, 6])]
    w = chunk_weights(mask, chunks, mode)
    full = aggregate(values, mask, mode, norm_constant=5.0)
    parts = sum(wk * aggregate(values[c], mask[c], mode, 5.0) for wk, c in zip(w, chunks))
    assert torch.allclose(parts, full, atol=1e-6)


def test_chunk_weights_hand_values():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0], [1, 1, 1]], dtype=torch.bool)
    chunks = [torch.tensor([0, 2]), torch.tensor([1, 3])]
    assert chunk_weights(mask, chunks, "token_mean") == [2 / 6, 4 / 6]
    assert chunk_weights(mask, chunks, "seq_mean_token_mean") == [1 / 3, 2 / 3]
    assert chunk_weights(mask, chunks, "token_sum_norm") == [2 / 4, 2 / 4]
    assert chunk_weights(torch.zeros(2, 2, dtype=torch.bool), chunks[:1], "token_mean") == [0.0]


def _accumulate(model, tok, trajs, plan, spec, old=None):
    """``(stats, gradients)`` of one accumulated update pass (gradients cleared afterwards)."""
    model.zero_grad(set_to_none=True)
    batch = RolloutBatch.build(trajs, pad_id=tok.pad_token_id, sample_mask=SAMPLE_MASK)
    stats = update_pass(
        model, batch, ADVANTAGES, plan, spec, lambda x: x.backward(), old_logprobs=old
    )
    grads = _grads(model)
    model.zero_grad(set_to_none=True)
    return stats, grads


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("mode", AGG_MODES)
def test_accumulated_gradient_equals_the_full_batch_gradient(tiny_policy, mode):
    model, tok = tiny_policy
    trajs = make_trajectories(len(tok))
    cfg = ClipLossConfig(name="ppo_clip", agg=mode, norm_constant=12.0)
    loss_fn = lambda inputs: ppo_clip_loss(inputs, cfg=cfg)  # noqa: E731

    model.zero_grad(set_to_none=True)
    batch = pack(trajs, tok.pad_token_id)
    logp, _ = token_logprobs(model, batch)
    full = loss_fn(PolicyLossInputs(logp, logp.detach(), ADVANTAGES, batch.loss_mask, SAMPLE_MASK))
    full.loss.backward()
    expected = _grads(model)

    model.zero_grad(set_to_none=True)
    plan = RolloutBatch.build(trajs, pad_id=0, sample_mask=SAMPLE_MASK).plan(
        ADVANTAGES,
        PlanOptions(
            micro_batch_size=2,
            agg=mode,
            skip_zero=True,
        ),
    )
    assert plan.skipped == 3  # two zero advantages, one dropped rollout
    spec = LossSpec(policy_loss=loss_fn, agg=mode, norm_constant=12.0)
    stats, got = _accumulate(model, tok, trajs, plan, spec)
    assert stats["policy_loss"] == pytest.approx(float(full.loss.detach()), abs=1e-6)
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.allclose(got[name], expected[name], atol=1e-6, rtol=1e-4), name


def test_on_policy_shortcut_equals_recomputed_behaviour_logprobs(tiny_policy):
    model, tok = tiny_policy
    trajs = make_trajectories(len(tok), seed=3)
    cfg = ClipLossConfig(name="ppo_clip")
    spec = LossSpec(policy_loss=lambda i: ppo_clip_loss(i, cfg=cfg), agg=cfg.agg)
    plan = RolloutBatch.build(trajs, pad_id=0, sample_mask=SAMPLE_MASK).plan(
        ADVANTAGES,
        PlanOptions(
            micro_batch_size=4,
            agg=cfg.agg,
            skip_zero=False,
        ),
    )
    batch = RolloutBatch.build(trajs, pad_id=tok.pad_token_id)
    old = behaviour_logprobs(model, batch.micro_batches(plan.chunks))
    results = []
    for old_lp in (None, old):
        results.append(_accumulate(model, tok, trajs, plan, spec, old_lp))
    (s1, g1), (s2, g2) = results
    assert s1["policy_loss"] == pytest.approx(s2["policy_loss"], abs=1e-6)
    assert s2["clip_frac"] == 0.0 and s2["ratio_mean"] == pytest.approx(1.0)
    for name in g1:
        assert torch.allclose(g1[name], g2[name], atol=1e-6), name


def test_tool_response_tokens_get_no_gradient(tiny_policy):
    """In a packed batch, only model-generated tokens receive gradient; tool responses, prompts and
    padding get exactly 0."""
    model, tok = tiny_policy
    trajs = make_trajectories(len(tok), seed=5)
    batch = pack(trajs, tok.pad_token_id)
    logp, _ = token_logprobs(model, batch)
    logp.retain_grad()
    old = logp.detach() - 0.05  # off policy, so the loss depends on every trained token
    cfg = ClipLossConfig(name="ppo_clip")
    out = ppo_clip_loss(PolicyLossInputs(logp, old, torch.ones(6), batch.loss_mask), cfg=cfg)
    out.loss.backward()
    model.zero_grad(set_to_none=True)
    trained = batch.loss_mask.bool()
    assert (logp.grad[~trained] == 0).all()
    assert (logp.grad[trained] != 0).all()
    tool_tokens = sum(t.loss_mask[t.prompt_len :].count(0) for t in trajs)
    assert tool_tokens > 0 and int((~trained).sum()) >= tool_tokens


def test_token_budget_bounds_padded_micro_batches():
    from framework.types import Trajectory

    lengths = [5, 40, 12, 30, 8, 100, 9, 33]
    trajs = [Trajectory(0, i // 2, [1] * n, [0] + [1] * (n - 1), 1) for i, n in enumerate(lengths)]
    adv = torch.ones(len(trajs))
    mask = torch.ones(len(trajs), dtype=torch.bool)
    plan = RolloutBatch.build(trajs, pad_id=0, sample_mask=mask).plan(
        adv,
        PlanOptions(
            micro_batch_size=4,
            agg="token_mean",
            skip_zero=True,
            max_tokens=64,
        ),
    )
    rows = sorted(int(i) for c in plan.chunks for i in c)
    assert rows == list(range(len(trajs)))
    for c in plan.chunks:
        longest = max(lengths[int(i)] for i in c)
        assert len(c) <= 4 and (len(c) * longest <= 64 or len(c) == 1)
    assert [len(c) for c in plan.chunks] == [4, 1, 1, 1, 1]  # 5,8,9,12 | 30 | 33 | 40 | 100
    assert sum(plan.weights) == pytest.approx(1.0)


def test_zero_loss_passes_add_nothing(tiny_policy):
    from framework.rl.update import zero_loss

    model, tok = tiny_policy
    model.zero_grad(set_to_none=True)
    loss = zero_loss(model, tok.pad_token_id)
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert float(loss) == 0.0 and all(g is not None and (g == 0).all() for g in grads)
    model.zero_grad(set_to_none=True)
