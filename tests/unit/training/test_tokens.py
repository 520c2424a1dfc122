"""Left-padded batches score every token exactly as an unpadded forward pass does."""

from __future__ import annotations

import torch

from framework.training.tokens import pack, token_logprobs

from .conftest import make_trajectories


def test_pack_left_pads_and_aligns_the_loss_mask_to_the_response_window():
    trajs = make_trajectories(100)
    batch = pack(trajs, pad_id=0)
    width = max(len(t.token_ids) for t in trajs)
    resp = max(len(t.token_ids) - t.prompt_len for t in trajs)
    assert batch.input_ids.shape == (6, width) and batch.loss_mask.shape == (6, resp)
    for row, t in enumerate(trajs):
        k = len(t.token_ids)
        assert batch.input_ids[row, width - k :].tolist() == t.token_ids
        assert batch.attention_mask[row].sum() == k and batch.attention_mask[row, -1] == 1
        assert batch.position_ids[row, width - k :].tolist() == list(range(k))
        assert batch.loss_mask[row].sum() == sum(t.loss_mask)
        assert (
            batch.loss_mask[row, resp - (k - t.prompt_len) :].tolist()
            == t.loss_mask[t.prompt_len :]
        )


def test_logprobs_of_padded_rows_equal_unpadded_forward(tiny_policy):
    model, tok = tiny_policy
    trajs = make_trajectories(len(tok))
    batch = pack(trajs, tok.pad_token_id)
    with torch.no_grad():
        logp, ent = token_logprobs(model, batch, entropy=True)
    r = batch.response_width
    for row, t in enumerate(trajs):
        ids = torch.tensor([t.token_ids])
        with torch.no_grad():
            full = model(input_ids=ids).logits[0].float().log_softmax(-1)  # [k, V]
        k = len(t.token_ids)
        for pos in range(t.prompt_len, k):  # every response token
            col = r - (k - pos)
            if not t.loss_mask[pos]:  # tool responses are not scored
                assert logp[row, col] == 0 and ent[row, col] == 0
                continue
            expected = full[pos - 1, t.token_ids[pos]]
            assert torch.allclose(logp[row, col], expected, atol=1e-4), (row, pos)
            p = full[pos - 1].exp()
            assert torch.allclose(ent[row, col], -(p * full[pos - 1]).sum(), atol=1e-3)


def test_chunked_vocabulary_projection_matches_one_chunk_in_values_and_gradients(tiny_policy):
    """Chunks of 3 trained positions (with recomputation in backward) give the log-probs, entropy
    and parameter gradients of one projection over every trained position."""
    model, tok = tiny_policy
    batch = pack(make_trajectories(model.config.vocab_size), tok.pad_token_id)
    trained = int(batch.loss_mask.sum())
    assert trained > 3  # several chunks, the last one partial
    results = []
    for chunk in (trained, 3):
        model.zero_grad()
        logp, ent = token_logprobs(model, batch, entropy=True, chunk=chunk)
        (logp * torch.linspace(0.5, 1.5, logp.numel()).view_as(logp)).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((logp.detach(), ent, grads))
    (logp_a, ent_a, grads_a), (logp_b, ent_b, grads_b) = results
    assert torch.allclose(logp_a, logp_b, atol=1e-6)
    assert torch.allclose(ent_a, ent_b, atol=1e-6)
    assert (logp_a[~batch.loss_mask.bool()] == 0).all()
    assert grads_a.keys() == grads_b.keys() and grads_a
    for name, g in grads_a.items():
        # float32 sums in another order: equal to 1e-5 of the gradient's scale
        assert (g - grads_b[name]).abs().max() <= 1e-5 * g.abs().max(), name
    model.zero_grad()


def test_gradient_checkpointing_keeps_log_probs_and_gradients(tiny_policy):
    """The trainer's activation recomputation changes memory, not numbers."""
    from framework.lightning.trainer import TrainerConfig, apply_gradient_checkpointing

    model, tok = tiny_policy
    batch = pack(make_trajectories(model.config.vocab_size, seed=1), tok.pad_token_id)
    model.train()
    results = []
    for on in (False, True):
        if on:
            assert apply_gradient_checkpointing(model, TrainerConfig(gradient_checkpointing=True))
        model.zero_grad()
        logp, _ = token_logprobs(model, batch)
        logp.sum().backward()
        results.append((logp.detach(), [p.grad.clone() for p in model.parameters()]))
    getattr(model, "activation_checkpointing_disable", model.gradient_checkpointing_disable)()
    model.eval()
    model.zero_grad()
    assert torch.allclose(results[0][0], results[1][0], atol=1e-6)
    for a, b in zip(results[0][1], results[1][1], strict=True):
        assert (a - b).abs().max() <= 1e-5 * a.abs().max()
    assert not apply_gradient_checkpointing(model, TrainerConfig(gradient_checkpointing=False))
