"""``optim.over_budget``: whether rollouts that spent a budget are in the loss.

``train`` (the default) trains them like any other rollout; ``drop`` (every run before it) leaves
them out of the loss, their reward still counting in their group's advantage. Issue 79's attempt 10 showed why the
choice matters: with over-budget rollouts out of the loss, a wrong answer is pushed down and running
out of tool calls is not, and GRPO's policy drifted into never answering (docs/study.md item 32).
"""

from __future__ import annotations

import pytest
import torch

from framework.algorithms.losses.ppo_clip import ClipLossConfig, ppo_clip_loss
from framework.rl.batch import RolloutBatch
from framework.rl.config import OptimConfig
from framework.training.tokens import pack
from framework.types import STATUS_OVER_BUDGET, GroupRequest, PolicyLossInputs

from .conftest import make_trajectories
from .test_step import ANSWER, SEARCH, run_step

ADVANTAGES = torch.tensor([0.7, -0.7, 0.0, 0.0, 1.2, -0.4])
#: generated tokens of make_trajectories' six rollouts (first + second generated span)
GENERATED = [6, 5, 11, 4, 5, 7]


def _batch(over_budget: str) -> RolloutBatch:
    trajs = make_trajectories(50)
    trajs[5].status = STATUS_OVER_BUDGET
    return RolloutBatch.build(trajs, pad_id=0, over_budget=over_budget)


def test_drop_leaves_over_budget_rollouts_out_of_the_loss():
    batch = _batch("drop")
    assert batch.sample_mask.tolist() == [True] * 5 + [False]
    assert batch.token_mask[5].sum() == GENERATED[5] and not batch.trained_mask[5].any()


def test_train_keeps_them_in_the_loss():
    batch = _batch("train")
    assert batch.sample_mask.tolist() == [True] * 6
    assert torch.equal(batch.trained_mask, batch.token_mask)
    assert batch.token_mask.sum(dim=1).tolist() == GENERATED


@pytest.mark.parametrize(
    ("mode", "drop", "train"),
    [
        # at ratio 1 every token's PPO-clip loss is -A of its rollout
        # seq-mean of token-means: -(sum of A over the rollouts in the loss) / their number
        ("seq_mean_token_mean", -(0.7 - 0.7 + 1.2) / 5, -(0.7 - 0.7 + 1.2 - 0.4) / 6),
        # token-mean: -(sum of A x generated tokens) / (generated tokens in the loss)
        (
            "token_mean",
            -(0.7 * 6 - 0.7 * 5 + 1.2 * 5) / 31,
            -(0.7 * 6 - 0.7 * 5 + 1.2 * 5 - 0.4 * 7) / 38,
        ),
    ],
)
def test_the_loss_at_ratio_one_by_hand(mode, drop, train):
    for over_budget, expected in (("drop", drop), ("train", train)):
        batch = _batch(over_budget)
        packed = pack(batch.trajectories, 0)
        logp = torch.zeros(packed.loss_mask.shape)
        inputs = PolicyLossInputs(logp, logp, ADVANTAGES, packed.loss_mask, batch.sample_mask)
        out = ppo_clip_loss(inputs, cfg=ClipLossConfig(name="ppo_clip", agg=mode))
        assert float(out.loss) == pytest.approx(expected, abs=1e-6)


def test_the_step_trains_an_over_budget_rollout_only_with_train():
    """A group of two on one question: one rollout searches until it has spent the agent's
    budget (8 turns, 8 tool calls by default) and ends over budget, the other answers right."""
    scripts = [[SEARCH] * 9, [ANSWER.format("Steven Spielberg")]]
    groups = [GroupRequest(0, 2)]
    for setting, trained in (("drop", 1.0), ("train", 2.0)):
        result, moved = run_step(scripts, groups, f"optim.over_budget={setting}")
        assert [t.status for t in result.trajectories] == [STATUS_OVER_BUDGET, "ok"]
        assert result.figures["loss/trained_rollouts"] == trained and moved


def test_the_default_trains_them():
    assert OptimConfig().over_budget == "train"
    assert RolloutBatch.build(_batch("drop").trajectories, pad_id=0).sample_mask.all()


def test_an_unknown_setting_is_refused_with_its_choices():
    (problem,) = OptimConfig(over_budget="keep").problems()
    assert "over_budget" in str(problem) and "drop" in str(problem) and "train" in str(problem)
