"""The SFT objective ignores masked tokens; length buckets cut padding."""

from __future__ import annotations

import torch

from framework.algorithms.losses.sft import sft_loss
from framework.sft.module import LengthBuckets, padding_fraction
from framework.types import Trajectory


def test_sft_loss_hand_value_and_masked_tokens_do_not_matter():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -9.0, -1.5]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 0, 1]])
    loss = sft_loss(logp, mask)
    assert torch.isclose(loss, torch.tensor((1 + 2 + 0.5 + 1.5) / 4))
    loss.backward()
    assert (logp.grad[mask == 0] == 0).all() and (logp.grad[mask == 1] == -0.25).all()
    changed = logp.detach().clone()
    changed[0, 2] = -50.0  # a tool-response token
    changed[1, 1] = 0.0
    assert torch.isclose(sft_loss(changed, mask), loss.detach())


def test_length_buckets_cover_every_row_once_and_cut_padding():
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(50, 1500, (103,), generator=gen).tolist()
    buckets = LengthBuckets(lengths, batch_size=4, seed=0)
    batches = list(buckets)
    assert len(batches) == len(buckets) == 26
    assert sorted(i for b in batches for i in b) == list(range(103))
    trajs = [Trajectory(0, 0, [1] * n, [1] * n, 0) for n in lengths]
    plain = [list(range(i, min(i + 4, 103))) for i in range(0, 103, 4)]
    assert padding_fraction(trajs, batches) < 0.5 * padding_fraction(trajs, plain)
    assert list(buckets) != batches  # a new order every epoch
