"""PPO mini-batches (``optim.mini_batch_size``): the batch split into whole groups, one optimiser
step per mini-batch, each mini-batch's loss its own aggregate, the behaviour log-probs from one pass
before the update, and ratio-based losses acting from the second mini-batch on."""

from __future__ import annotations

import copy

import pytest
import torch

from framework.algorithms.stats.aggregation import aggregate
from framework.cli.app import load_config
from framework.rl.batch import PlanOptions, RolloutBatch
from framework.rl.config import OptimConfig
from framework.rl.update import LossSpec, loss_spec, plan_options, policy_update
from framework.training.tokens import token_logprobs

from .conftest import make_trajectories

#: six rollouts in three groups of two (conftest's make_trajectories)
ADVANTAGES = torch.tensor([0.7, -0.7, 0.5, -0.5, 1.2, -1.2])


def _plan(trajs, *, mini: int, micro: int = 8, agg: str = "token_mean", skip_zero=False):
    batch = RolloutBatch.build(trajs, pad_id=0)
    options = PlanOptions(
        micro_batch_size=micro, agg=agg, skip_zero=skip_zero, mini_batch_size=mini
    )
    return batch, batch.plan(ADVANTAGES, options)


def _rows(plan, span):
    a, b = span
    return sorted(int(i) for c in plan.chunks[a:b] for i in c)


def test_mini_batches_hold_whole_groups_in_batch_order(tiny_policy):
    _, tok = tiny_policy
    trajs = make_trajectories(len(tok))
    # 4 rollouts per mini-batch: groups {0,1} and {2,3} fill the first, group {4,5} the second
    _, plan = _plan(trajs, mini=4, micro=1)
    assert plan.mini_batched and len(plan.mini_spans) == 2
    assert [_rows(plan, s) for s in plan.mini_spans] == [[0, 1, 2, 3], [4, 5]]
    assert plan.mini_rollouts == [4, 2]
    # 3 rollouts: a second group would not fit, so one group of two per mini-batch
    _, plan = _plan(trajs, mini=3, micro=1)
    assert [_rows(plan, s) for s in plan.mini_spans] == [[0, 1], [2, 3], [4, 5]]
    # a size smaller than a group: the group is a mini-batch alone
    _, plan = _plan(trajs, mini=1, micro=8)
    assert [_rows(plan, s) for s in plan.mini_spans] == [[0, 1], [2, 3], [4, 5]]


def test_a_batch_that_fits_in_one_mini_batch_plans_as_without_them(tiny_policy):
    _, tok = tiny_policy
    trajs = make_trajectories(len(tok))
    _, whole = _plan(trajs, mini=0, micro=2)
    _, fits = _plan(trajs, mini=6, micro=2)
    assert whole.spans == fits.spans == [] and not whole.mini_batched and fits.mini_batched
    assert whole.weights == fits.weights
    assert [c.tolist() for c in whole.chunks] == [c.tolist() for c in fits.chunks]


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_mean", "token_sum_norm"])
def test_each_mini_batch_weighs_its_own_rows(tiny_policy, agg):
    """Within a mini-batch the micro-batch weights sum to its own aggregate: hand values for
    token_mean on the first mini-batch, and the reassembly of every mode against aggregate()."""
    _, tok = tiny_policy
    trajs = make_trajectories(len(tok))
    batch, plan = _plan(trajs, mini=4, micro=1, agg=agg)
    for a, b in plan.mini_spans:
        assert sum(plan.weights[a:b]) == pytest.approx(1.0)
    if agg == "token_mean":
        # trained tokens (first + second generated span) of rows 0..3: 6, 5, 11, 4 -> 26 in all
        first = dict(zip((int(c) for c in plan.chunks[0:4]), plan.weights[0:4], strict=True))
        assert first == pytest.approx({0: 6 / 26, 1: 5 / 26, 2: 11 / 26, 3: 4 / 26})
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(batch.trained_mask.shape, generator=gen)
    for a, b in plan.mini_spans:
        rows = torch.tensor(_rows(plan, (a, b)))
        mask = batch.trained_mask
        want = aggregate(values[rows], mask[rows], agg, norm_constant=9.0)
        got = sum(
            w * aggregate(values[c], mask[c], agg, norm_constant=9.0)
            for w, c in zip(plan.weights[a:b], plan.chunks[a:b], strict=True)
        )
        assert float(got) == pytest.approx(float(want), abs=1e-6)


class _Steps:
    """Counts optimiser steps and keeps each step's gradients (a step pre-hook)."""

    def __init__(self, model, optimizer):
        self.grads: list[dict[str, torch.Tensor]] = []
        self.model = model
        optimizer.register_step_pre_hook(self)

    def __call__(self, optimizer, args, kwargs) -> None:
        self.grads.append(
            {n: p.grad.clone() for n, p in self.model.named_parameters() if p.grad is not None}
        )


def _update(model, trajs, overrides, *, mini: int, lr: float = 0.0, epochs: int = 1):
    cfg = load_config("train", overrides)
    spec = loss_spec(cfg.loss, cfg.kl)
    optim = OptimConfig(
        micro_batch_size=2,
        micro_batch_tokens=0,
        mini_batch_size=mini,
        policy_epochs=epochs,
        skip_zero_advantage=False,
        grad_clip=0.0,
    )
    batch = RolloutBatch.build(trajs, pad_id=0)
    plan = batch.plan(ADVANTAGES, plan_options(optim, spec))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    steps = _Steps(model, opt)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    figures = policy_update(model, plan, spec, opt, sched, optim)
    return figures, steps, sched, batch, plan


def test_one_optimiser_step_per_mini_batch_and_one_schedule_step_per_epoch(tiny_policy):
    model, tok = tiny_policy
    trajs = make_trajectories(len(tok))
    figures, steps, sched, _, _ = _update(
        copy.deepcopy(model), trajs, ["algorithm=grpo"], mini=2, epochs=2
    )
    assert len(steps.grads) == 6  # 3 mini-batches x 2 epochs
    assert sched.last_epoch == 2  # the schedule counts epochs, not mini-batches
    assert figures["mini_batches"] == 3 and figures["optimizer_steps"] == 6
    assert {f"mini{k}_clip_frac" for k in range(3)} <= figures.keys()


@pytest.mark.slow
def test_with_weights_unchanged_every_mini_batch_is_the_full_batch_gradient_of_its_rows(
    tiny_policy,
):
    """lr 0: nothing moves, so every mini-batch is on policy (ratio exactly 1) and its gradient
    is the policy gradient of its own rows: -grad of token_mean(A * logp) over them."""
    model, tok = tiny_policy
    trajs = make_trajectories(len(tok))
    policy = copy.deepcopy(model)
    overrides = ["algorithm=grpo", "loss.agg=token_mean"]
    figures, steps, _, batch, plan = _update(policy, trajs, overrides, mini=2, lr=0.0)
    assert figures["mini1_ratio_std"] == pytest.approx(0.0, abs=1e-6)
    assert figures["mini1_clip_frac"] == 0.0
    for span, got in zip(plan.mini_spans, steps.grads, strict=True):
        rows = torch.tensor(_rows(plan, span))
        policy.zero_grad(set_to_none=True)
        sub = batch.micro_batches([rows], ADVANTAGES)[0]
        logp, _ = token_logprobs(policy, sub.tokens)
        mask = sub.tokens.loss_mask.bool()
        adv = sub.advantages[:, None].expand_as(logp)
        (-aggregate(adv * logp, mask, "token_mean")).backward()
        for name, g in got.items():
            p = dict(policy.named_parameters())[name]
            assert torch.allclose(g, p.grad, atol=1e-6, rtol=1e-4), name
        policy.zero_grad(set_to_none=True)


def _second_step_gradients(tiny_policy, loss: str) -> dict[str, torch.Tensor]:
    model, tok = tiny_policy
    trajs = make_trajectories(len(tok), seed=2)
    policy = copy.deepcopy(model)
    overrides = ["algorithm=grpo", f"loss={loss}", "loss.agg=token_mean"]
    figures, steps, _, _, _ = _update(policy, trajs, overrides, mini=4, lr=3.0)
    assert len(steps.grads) == 2
    return figures, steps.grads[1]


def _reinforce_second_step(tiny_policy) -> dict[str, torch.Tensor]:
    """REINFORCE on the second mini-batch after the same first step: -A grad logp, no ratio."""
    model, tok = tiny_policy
    trajs = make_trajectories(len(tok), seed=2)
    policy = copy.deepcopy(model)
    _, _, _, batch, plan = _update(policy, trajs, ["algorithm=grpo"], mini=4, lr=0.0)
    first = _rows(plan, plan.mini_spans[0])
    second = torch.tensor(_rows(plan, plan.mini_spans[1]))
    # the same first step as the losses take (all of them are -A grad logp on policy)
    opt = torch.optim.SGD(policy.parameters(), lr=3.0)
    for rows in ([first], [second.tolist()]):
        opt.zero_grad(set_to_none=True)
        sub = batch.micro_batches([torch.tensor(rows[0])], ADVANTAGES)[0]
        logp, _ = token_logprobs(policy, sub.tokens)
        adv = sub.advantages[:, None].expand_as(logp)
        (-aggregate(adv * logp, sub.tokens.loss_mask.bool(), "token_mean")).backward()
        if rows[0] == first:
            opt.step()
    return {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}


def _distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    num = sum(float((a[n] - b[n]).norm() ** 2) for n in a) ** 0.5
    den = sum(float(b[n].norm() ** 2) for n in b) ** 0.5
    return num / den


@pytest.mark.slow
def test_ratio_losses_differ_from_reinforce_and_each_other_in_the_second_mini_batch(tiny_policy):
    """On policy (the first mini-batch) PPO-clip, CISPO and GSPO all give REINFORCE's gradient;
    after one step the second mini-batch is off policy: the ratio spreads, PPO-clip clips, and the
    three gradients part from REINFORCE and from one another."""
    results = {loss: _second_step_gradients(tiny_policy, loss) for loss in ("ppo_clip", "cispo")}
    results["gspo"] = _second_step_gradients(tiny_policy, "gspo")
    reinforce = _reinforce_second_step(tiny_policy)
    figures = results["ppo_clip"][0]
    assert figures["mini0_ratio_std"] == pytest.approx(0.0, abs=1e-6)
    assert figures["mini1_ratio_std"] > 0.05 and figures["mini1_clip_frac"] > 0
    names = list(results)
    for name in names:
        assert _distance(results[name][1], reinforce) > 0.05, name
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert _distance(results[a][1], results[b][1]) > 0.05, (a, b)


def test_mini_batches_are_refused_with_a_turn_by_turn_loss():
    from framework.config import ConfigError

    with pytest.raises(ConfigError, match=r"\[optim.mini_batch_size\] got 8"):
        load_config("train", ["algorithm=seeupo", "optim.mini_batch_size=8"])


def test_the_spec_is_unchanged_by_the_mini_batch_size():
    """The loss spec does not depend on the optim section (mini-batches are a planning choice)."""
    cfg = load_config("train", ["optim.mini_batch_size=4"])
    assert isinstance(loss_spec(cfg.loss, cfg.kl), LossSpec)
    assert plan_options(cfg.optim, loss_spec(cfg.loss, cfg.kl)).mini_batch_size == 4


def test_under_data_parallelism_every_process_makes_as_many_optimiser_steps(tiny_policy):
    """Another process has four mini-batches: this one (three) adds an empty fourth, whose
    optimiser step runs zero-loss passes to match the other's micro-batches."""
    model, tok = tiny_policy
    trajs = make_trajectories(len(tok))
    cfg = load_config("train", ["algorithm=grpo"])
    spec = loss_spec(cfg.loss, cfg.kl)
    optim = OptimConfig(micro_batch_size=2, micro_batch_tokens=0, mini_batch_size=2)
    batch = RolloutBatch.build(trajs, pad_id=0)
    plan = batch.plan(ADVANTAGES, plan_options(optim, spec))
    asked: list[int] = []

    def pad_passes(mine: int) -> int:  # the module's all-reduce of the maximum
        asked.append(mine)
        return 1 if len(asked) == 1 else (1 if mine == 0 else 0)

    policy = copy.deepcopy(model)
    opt = torch.optim.SGD(policy.parameters(), lr=0.0)
    steps = _Steps(policy, opt)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    figures = policy_update(policy, plan, spec, opt, sched, optim, pad_passes=pad_passes)
    assert asked == [3, 1, 1, 1, 0]  # mini-batches, then each one's micro-batches
    assert len(steps.grads) == 4 and figures["mini_batches"] == 4
    # the padded step's gradient is exactly 0 (a zero loss through every parameter)
    assert all(float(g.abs().sum()) == 0.0 for g in steps.grads[3].values())
