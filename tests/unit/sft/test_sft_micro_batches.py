"""A cold-start SFT batch split into token-bounded micro-batches takes the optimiser step of the
whole batch: micro-batch gradients weighted by their share of trained tokens add up to it."""

from __future__ import annotations

import copy

import lightning as L
import pytest
import torch

from framework.sft.config import SFTOptimConfig
from framework.sft.module import SFTModule, token_groups
from tests.unit.training.conftest import make_trajectories


def test_token_groups_bound_the_padded_size():
    assert token_groups([5, 9, 3, 8], 16) == [[2, 0], [3], [1]]  # 2 x 5, 1 x 8, 1 x 9
    assert token_groups([5, 9, 3, 8], 0) == [[2, 0, 3, 1]]
    assert token_groups([40, 3], 16) == [[1], [0]]  # too long for any group: alone
    assert token_groups([], 16) == []
    groups = token_groups([7, 7, 7, 7, 7], 21)
    assert groups == [[0, 1, 2], [3, 4]] and all(len(g) * 7 <= 21 for g in groups)


class Grads(L.Callback):
    """The gradients the optimiser step receives."""

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.grads = {
            n: p.grad.detach().clone()
            for n, p in pl_module.policy.named_parameters()
            if p.grad is not None
        }


def one_step(policy, batch, micro_batch_tokens: int, grad_clip: float):
    optim = SFTOptimConfig(
        lr=1e-3, warmup_steps=0, schedule="constant", micro_batch_tokens=micro_batch_tokens
    )
    module = SFTModule(policy, 0, optim, total_steps=1)
    grads = Grads()
    trainer = L.Trainer(
        callbacks=[grads],
        accelerator="cpu",
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=grad_clip or None,
        limit_val_batches=0,
    )
    loader = torch.utils.data.DataLoader([batch], batch_size=None, collate_fn=lambda b: b)
    trainer.fit(module, train_dataloaders=loader)
    return grads.grads, trainer


@pytest.mark.parametrize("grad_clip", [0.0, 0.05])
@pytest.mark.slow
def test_micro_batches_take_the_step_of_the_whole_batch(grad_clip):
    from framework.rollout.policy import PolicyConfig, load_policy

    model, _ = load_policy(PolicyConfig(source="tiny"))
    batch = make_trajectories(model.config.vocab_size)
    assert len(token_groups([len(t.token_ids) for t in batch], 30)) >= 3
    whole, _ = one_step(copy.deepcopy(model), batch, 0, grad_clip)
    split, trainer = one_step(copy.deepcopy(model), batch, 30, grad_clip)
    assert whole.keys() == split.keys() and len(whole) >= 10
    for k in whole:  # float sums in another order: equal to 1e-5 of the gradient's scale
        assert (whole[k] - split[k]).abs().max() <= 1e-5 * whole[k].abs().max() + 1e-12, k
    # the logged loss is the whole batch's
    assert trainer.callback_metrics["sft/loss"] > 0
