"""D3S (partial; framework/algorithms/advantages/d3s.py) against ../shared/METHODS-2.md item 11."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.advantages.d3s import (
    D3SAdvantageConfig,
    d3s_advantage,
    group_downsample,
    max_variance_subset,
    relaxed,
)
from framework.algorithms.advantages.grpo import grpo_advantage
from framework.algorithms.losses.d3s import D3SLossConfig, d3s_loss, top_tokens
from framework.algorithms.losses.ppo_clip import ClipLossConfig, ppo_clip_loss
from framework.types import AdvantageInputs, PolicyLossInputs

F64 = torch.float64


def test_worked_example_sample_level():
    # A = [1.5, 0.5, -0.5, -1.5], k = 2 -> keep rollouts 1 and 4, variance 2.25
    adv = torch.tensor([1.5, 0.5, -0.5, -1.5])
    kept = max_variance_subset(adv, 2)
    assert sorted(kept) == [0, 3]
    assert float(adv[kept].var(unbiased=False)) == pytest.approx(2.25)
    assert group_downsample(adv, torch.zeros(4, dtype=torch.long), 0.5).tolist() == [
        True,
        False,
        False,
        True,
    ]


def test_worked_example_token_level():
    # scores |A| H: (1, 2) = 3.0 first, then (2, 1) = 0.5; rho 0.25 keeps 2 of 8 tokens
    adv = torch.tensor([[1.5, 1.5], [0.5, 0.5], [0.5, 0.5], [1.5, 1.5]])
    ent = torch.tensor([[0.1, 2.0], [1.0, 0.2], [0.5, 0.5], [0.05, 0.3]])
    kept = top_tokens(adv * ent, torch.ones(4, 2, dtype=torch.bool), 0.25)
    assert kept.nonzero().tolist() == [[0, 1], [1, 0]]


def test_the_schedule_relaxes_to_everything():
    assert relaxed(0.5, 0.0, 0.5) == 0.5
    assert relaxed(0.5, 0.25, 0.5) == pytest.approx(0.75)
    assert relaxed(0.5, 0.5, 0.5) == 1.0 and relaxed(0.5, 0.9, 0.5) == 1.0


def inputs(progress):
    return AdvantageInputs(
        torch.tensor([1.0, 0.0, 1.0, 0.0, 0.2, 0.9, 0.4, 0.6], dtype=F64),
        torch.tensor([0] * 4 + [1] * 4),
        extras={"training_progress": progress},
    )


def test_the_estimator_keeps_half_of_each_group_then_all():
    early = d3s_advantage(inputs(0.0), cfg=D3SAdvantageConfig(name="d3s"))
    assert [int((early[g * 4 : g * 4 + 4] != 0).sum()) for g in (0, 1)] == [2, 2]
    late = d3s_advantage(inputs(0.6), cfg=D3SAdvantageConfig(name="d3s"))
    assert_close(late, grpo_advantage(inputs(0.6), cfg=D3SAdvantageConfig(name="d3s")))


def test_the_loss_keeps_the_top_tokens_and_is_ppo_clip_when_relaxed():
    gen = torch.Generator().manual_seed(2)
    logp = -torch.rand(3, 5, generator=gen, dtype=F64)
    old = logp + 0.2 * torch.randn(3, 5, generator=gen, dtype=F64)
    base = dict(
        logprobs=logp,
        old_logprobs=old,
        advantages=torch.tensor([1.0, -0.5, 0.3], dtype=F64),
        token_mask=torch.ones(3, 5, dtype=torch.bool),
        entropy=torch.rand(3, 5, generator=gen, dtype=F64),
    )
    cfg = D3SLossConfig(name="d3s")
    done = d3s_loss(PolicyLossInputs(**base, extras={"training_progress": 0.7}), cfg=cfg)
    clip = ppo_clip_loss(PolicyLossInputs(**base), cfg=ClipLossConfig(name="ppo_clip"))
    assert_close(done.loss, clip.loss)
    early = d3s_loss(PolicyLossInputs(**base, extras={"training_progress": 0.0}), cfg=cfg)
    assert float(early.metrics["d3s_token_share"]) == pytest.approx(8 / 15)
    with pytest.raises(ValueError, match=r"\[loss.d3s\] got PolicyLossInputs without entropy"):
        d3s_loss(PolicyLossInputs(logp, old, torch.ones(3, dtype=F64), torch.ones(3, 5)), cfg=cfg)


# A hand-worked token-level example: 2 rollouts x 2 trained tokens, A = [2, -1] per rollout,
# entropies [[0.1, 1.0], [1.5, 3.0]], ratios rho [[1.0, 1.1], [0.9, 1.2]] (inside [0.8, 1.28], so
# no clip is active and each token's loss is -rho A):
#   scores |A| H:   (0,0) 0.2  (0,1) 2.0  (1,0) 1.5  (1,1) 3.0
#   (ranked by H alone the top two would be (1,1) and (1,0), by |A| alone (0,0) and (0,1))
#   at progress 0, rho' = 0.5: ceil(0.5 * 4) = 2 tokens kept, (1,1) and (0,1)
#   token losses:   (0,0) -2.0 (0,1) -2.2 (1,0) 0.9  (1,1) 1.2
# The dropped tokens add 0 and still count in the normaliser:
#   token_mean:          (-2.2 + 1.2) / 4                       = -0.25
#   seq_mean_token_mean: (-2.2 / 2 + 1.2 / 2) / 2 = (-1.1 + 0.6) / 2 = -0.25
# (all four kept, i.e. the selection ignored: (-2 - 2.2 + 0.9 + 1.2) / 4 = -0.525; the other two
# kept instead, the selection inverted: (-2 + 0.9) / 4 = -0.275; the kept tokens alone as the
# normaliser: (-2.2 + 1.2) / 2 = -0.5, and (-2.2 / 1 + 1.2 / 1) / 2 = -0.5 per rollout)
# Gradients d loss / d logp = -A rho w on the kept tokens, 0 on the dropped ones, with w = 1/4
# for both aggregations here (token_mean: 1 / 4 tokens; seq_mean_token_mean: 1 / (2 rollouts x 2)):
#   (0,1): -2 x 1.1 / 4 = -0.55,  (1,1): 1 x 1.2 / 4 = 0.3
HAND_RATIOS = [[1.0, 1.1], [0.9, 1.2]]
HAND_ENTROPY = [[0.1, 1.0], [1.5, 3.0]]


def hand_inputs(progress: float) -> PolicyLossInputs:
    old = torch.tensor([[-1.0, -0.5], [-2.0, -0.7]], dtype=F64)
    logp = (old + torch.tensor(HAND_RATIOS, dtype=F64).log()).requires_grad_(True)
    return PolicyLossInputs(
        logp,
        old,
        torch.tensor([2.0, -1.0], dtype=F64),
        torch.ones(2, 2, dtype=torch.bool),
        entropy=torch.tensor(HAND_ENTROPY, dtype=F64),
        extras={"training_progress": progress},
    )


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_mean"])
def test_the_loss_of_a_hand_worked_token_selection(agg):
    x = hand_inputs(0.0)
    out = d3s_loss(x, cfg=D3SLossConfig(name="d3s", agg=agg))
    assert_close(out.loss, torch.tensor(-0.25, dtype=F64))
    (grad,) = torch.autograd.grad(out.loss, x.logprobs)
    assert_close(grad, torch.tensor([[0.0, -0.55], [0.0, 0.3]], dtype=F64))
    assert float(out.metrics["d3s_token_share"]) == 0.5


def test_the_hand_worked_example_relaxed_keeps_every_token():
    # progress 0.25 of relax_until 0.5: rho' = 0.5 + 0.5 x 0.5 = 0.75, ceil(0.75 x 4) = 3 tokens:
    # (1,1), (0,1), (1,0): (-2.2 + 0.9 + 1.2) / 4 = -0.025; at progress 0.5 all four: -0.525
    part = d3s_loss(hand_inputs(0.25), cfg=D3SLossConfig(name="d3s", agg="token_mean"))
    assert_close(part.loss, torch.tensor(-0.025, dtype=F64))
    assert float(part.metrics["d3s_token_share"]) == 0.75
    full = d3s_loss(hand_inputs(0.5), cfg=D3SLossConfig(name="d3s", agg="token_mean"))
    assert_close(full.loss, torch.tensor(-0.525, dtype=F64))
