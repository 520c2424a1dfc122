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
