"""A tiny policy and hand-built trajectories for the training math."""

from __future__ import annotations

import pytest
import torch

from framework.types import Trajectory


@pytest.fixture(scope="session")
def tiny_policy():
    """``(model, tokenizer)``: the 2-layer random Llama with SmolLM2's tokenizer."""
    from framework.rollout.policy import PolicyConfig, load_policy

    return load_policy(PolicyConfig(source="tiny"))


def make_trajectories(vocab: int, seed: int = 0) -> list[Trajectory]:
    """Six rollouts in three groups, of different prompt and response lengths, each response with
    a tool-response span (loss mask 0) between two generated spans."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    shapes = [(5, 4, 3, 2), (7, 2, 4, 3), (4, 6, 2, 5), (6, 3, 3, 1), (5, 1, 5, 4), (8, 5, 2, 2)]
    for i, (prompt, first, tool, second) in enumerate(shapes):
        n = prompt + first + tool + second
        ids = torch.randint(3, vocab, (n,), generator=gen).tolist()
        mask = [0] * prompt + [1] * first + [0] * tool + [1] * second
        out.append(
            Trajectory(
                question=i // 2, group=i // 2, token_ids=ids, loss_mask=mask, prompt_len=prompt
            )
        )
    return out


def update_pass(model, batch, advantages, plan, spec, backward, **kwargs) -> dict[str, float]:
    """:func:`run_update_pass` over ``plan``'s micro-batches of ``batch`` (a ``RolloutBatch``),
    sliced as :func:`~framework.rl.update.policy_update` slices them."""
    from framework.rl.update import run_update_pass

    micro = batch.micro_batches(plan.chunks, advantages)
    return run_update_pass(
        model, micro, plan.weights, spec, backward, pad_id=batch.pad_id, **kwargs
    )
