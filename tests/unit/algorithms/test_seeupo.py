"""SeeUPO (reconstructed; framework/algorithms/sequential.py) against ../shared/METHODS-2.md
item 7: which tokens each pass trains, and equality with GSPO per turn at one pass."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.losses import GSPOLossConfig, gspo_loss
from framework.algorithms.sequential import (
    SeeUPOLossConfig,
    seeupo_loss,
    turn_log_ratios,
    turns_from_end,
)
from framework.types import PolicyLossInputs

F64 = torch.float64
# two rollouts: rollout 0 has three turns (2, 2, 1 tokens) with tool responses between; rollout 1
# one turn of three tokens
TURNS = torch.tensor([[0, 0, -1, 1, 1, -1, 2], [0, 0, 0, -1, -1, -1, -1]])
MASK = TURNS >= 0
CFG = SeeUPOLossConfig(name="seeupo", agg="token_mean")


def inputs(pass_index, passes, seed=0):
    gen = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(2, 7, generator=gen, dtype=F64)).requires_grad_(True)
    old = logp.detach() + 1e-4 * torch.randn(2, 7, generator=gen, dtype=F64)
    return PolicyLossInputs(
        logp,
        old,
        torch.tensor([1.0, -0.5], dtype=F64),
        MASK,
        turn_index=TURNS,
        pass_index=pass_index,
        passes=passes,
    )


def trained_tokens(x):
    loss = seeupo_loss(x, cfg=CFG).loss
    (grad,) = torch.autograd.grad(loss, x.logprobs)
    return (grad != 0).tolist()


def test_positions_count_turns_from_the_end():
    assert turns_from_end(TURNS, MASK).tolist() == [
        [2, 2, -1, 1, 1, -1, 0],
        [0, 0, 0, -1, -1, -1, -1],
    ]


def test_with_three_passes_each_pass_trains_one_turn_from_the_end():
    # pass 1 touches each rollout's last turn only, pass 3 only the first turn of rollout 0
    assert trained_tokens(inputs(0, 3)) == [
        [False, False, False, False, False, False, True],
        [True, True, True, False, False, False, False],
    ]
    assert trained_tokens(inputs(1, 3))[0] == [False, False, False, True, True, False, False]
    assert trained_tokens(inputs(2, 3))[0] == [True, True, False, False, False, False, False]
    assert not any(trained_tokens(inputs(2, 3))[1])


def test_the_last_of_two_passes_trains_every_earlier_turn():
    assert trained_tokens(inputs(1, 2))[0] == [True, True, False, True, True, False, False]


def test_one_pass_is_gspo_per_turn():
    x = inputs(0, 1)
    got = seeupo_loss(x, cfg=CFG).loss
    # one-turn rollouts: GSPO over the rollout; rollout 0's turns each get their own ratio, so
    # compare a batch of the one-turn rollout alone
    single = PolicyLossInputs(
        x.logprobs[1:], x.old_logprobs[1:], x.advantages[1:], MASK[1:], turn_index=TURNS[1:]
    )
    gspo = gspo_loss(single, cfg=GSPOLossConfig(name="gspo", agg="token_mean"))
    assert_close(seeupo_loss(single, cfg=CFG).loss, gspo.loss)
    assert torch.isfinite(got)


def test_turn_ratios_are_means_over_the_turn():
    lr = torch.tensor([[0.1, 0.3, 9.0, 0.2, 0.4, 9.0, 0.5]], dtype=F64)
    got = turn_log_ratios(lr, turns_from_end(TURNS[:1], MASK[:1]))
    assert got[0].tolist() == pytest.approx([0.2, 0.2, 0.0, 0.3, 0.3, 0.0, 0.5])


def test_without_turns_the_loss_refuses():
    x = inputs(0, 1)
    bare = PolicyLossInputs(x.logprobs, x.old_logprobs, x.advantages, MASK)
    with pytest.raises(
        ValueError, match=r"\[loss.seeupo\] got PolicyLossInputs without turn_index"
    ):
        seeupo_loss(bare, cfg=CFG)
