"""SeeUPO (partial; framework/algorithms/losses/seeupo.py) against the authors' code (AgentEvolver,
branch seeupo): which turn each stage trains, the running correction factor, the loss of a worked
example by hand, and the update's one pass per turn (framework/rl/update.py)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.advantages.reinforce_pp import (
    ReinforcePPBaselineConfig,
    reinforce_pp_baseline_advantage,
)
from framework.algorithms.losses.gspo import GSPOLossConfig, gspo_loss
from framework.algorithms.losses.seeupo import (
    SeeUPOLossConfig,
    correction_factors,
    model_turns,
    seeupo_loss,
)
from framework.cli.app import load_config
from framework.config import ConfigError
from framework.rl.batch import RolloutBatch
from framework.rl.config import OptimConfig
from framework.rl.update import loss_spec, plan_options, policy_update
from framework.types import AdvantageInputs, PolicyLossInputs, Trajectory, TurnSpan
from tests.unit.training.conftest import make_trajectories, tiny_policy  # noqa: F401

F64 = torch.float64
CFG = SeeUPOLossConfig(name="seeupo")
# two rollouts of two turns: A's turn 0 has two tokens, then a tool response, then turn 1 of two;
# B's turn 0 has one token, a tool response, turn 1 of three; then padding
TURNS = torch.tensor([[0, 0, -1, 1, 1, -1], [0, -1, 1, 1, 1, -1]])
MASK = torch.tensor([[1, 1, 0, 1, 1, 0], [1, 0, 1, 1, 1, 0]], dtype=torch.bool)


def inputs(lp, adv, p, passes, earlier=(), turns=TURNS, mask=MASK):
    lp = lp.clone().requires_grad_(True)
    return PolicyLossInputs(
        lp,
        lp.detach(),  # each stage is on policy: its ratio is against the stage's own start
        adv,
        mask,
        turn_index=turns,
        pass_index=p,
        passes=passes,
        earlier_logprobs=tuple(earlier),
    )


def test_the_advantage_is_centred_whitened_and_clamped():
    # rewards 1.0 and 0.2 in one group: centred +-0.4, whitened by the Bessel std 0.5657: +-0.7071
    adv = reinforce_pp_baseline_advantage(
        AdvantageInputs(torch.tensor([1.0, 0.2]), torch.zeros(2, dtype=torch.long)),
        cfg=ReinforcePPBaselineConfig(name="reinforce_pp_baseline", epsilon=0.0, clip=3.0),
    )
    assert_close(adv, torch.tensor([0.70711, -0.70711]), atol=1e-5, rtol=0)
    # one correct of twelve: centred 11/12 and -1/12, batch std sqrt(1/12): 11 / sqrt(12) = 3.175
    # for the correct one, clamped to 3
    many, index = torch.tensor([1.0] + [0.0] * 11), torch.zeros(12, dtype=torch.long)
    raw = reinforce_pp_baseline_advantage(
        AdvantageInputs(many, index), cfg=ReinforcePPBaselineConfig(name="r", epsilon=0.0)
    )
    clamped = reinforce_pp_baseline_advantage(
        AdvantageInputs(many, index), cfg=ReinforcePPBaselineConfig(name="r", epsilon=0.0, clip=3)
    )
    assert float(raw[0]) == pytest.approx(11 / math.sqrt(12), rel=1e-6)
    assert float(clamped[0]) == 3.0
    assert_close(clamped[1:], raw[1:])


def test_worked_example_of_two_stages():
    # stage 0 of 2 trains turn 1 with factor 1; it moved A's turn-1 tokens by [+0.10, +0.30]
    # (mean 0.2: e^0.2 = 1.2214, clipped to 1.2) and B's by [-0.05, -0.15, -0.10] (mean -0.1:
    # e^-0.1 = 0.90484). Stage 1 trains turn 0 with the advantages times those factors:
    # A 0.7071 x 1.2 = 0.84853, B -0.7071 x 0.90484 = -0.63982; at ratio 1 the loss is
    # -(0.84853 - 0.63982) / 2 = -0.10436, and each turn-0 token's gradient is
    # -A M / (the row's turn-0 tokens) / 2 rollouts
    adv = torch.tensor([0.70711, -0.70711], dtype=F64)
    s0 = -torch.rand(2, 6, generator=torch.Generator().manual_seed(0), dtype=F64)
    moved = torch.tensor([[0.3, -0.2, 0.0, 0.10, 0.30, 0.0], [0.5, 0.0, -0.05, -0.15, -0.10, 0.0]])
    s1 = s0 + moved.to(F64)
    first = seeupo_loss(inputs(s0, adv, 0, 2), cfg=CFG)
    x = inputs(s1, adv, 1, 2, earlier=[s0])
    out = seeupo_loss(x, cfg=CFG)
    assert float(out.loss.detach()) == pytest.approx(
        -(0.70711 * 1.2 - 0.70711 * math.exp(-0.1)) / 2, 1e-5
    )
    (grad,) = torch.autograd.grad(out.loss, x.logprobs)
    a, b = -0.70711 * 1.2 / 2 / 2, 0.70711 * math.exp(-0.1) / 1 / 2
    want = torch.tensor([[a, a, 0, 0, 0, 0], [b, 0, 0, 0, 0, 0]], dtype=F64)
    assert_close(grad, want, atol=1e-6, rtol=0)
    assert float(out.metrics["seeupo_correction_mean"]) == pytest.approx(
        (1.2 + math.exp(-0.1)) / 2, 1e-6
    )
    # stage 0: turn 1 only, factor 1: -(0.7071 - 0.7071) / 2 = 0, with the gradient on turn 1
    assert float(first.loss.detach()) == pytest.approx(0.0, abs=1e-12)


def test_the_running_factor_is_clipped_again_after_each_stage():
    # four turns; stages 0, 1, 2 moved turns 3, 2, 1 by e^x = 1.15, 1.10, 0.9: 1.15 x 1.10 = 1.265
    # is clipped to 1.2, then 1.2 x 0.9 = 1.08 (unclipped: 1.1385)
    turns = torch.tensor([[0, 1, 2, 3]])
    s = [torch.zeros(1, 4, dtype=F64)]
    for k, r in ((3, 1.15), (2, 1.10), (1, 0.9)):
        step = torch.zeros(1, 4, dtype=F64)
        step[0, k] = math.log(r)
        s.append(s[-1] + step)
    factor = correction_factors(turns, s[:3], passes=4, clip=0.2)
    assert float(factor) == pytest.approx(1.2)
    assert float(correction_factors(turns, s, passes=4, clip=0.2)) == pytest.approx(1.08)


def test_a_rollout_without_the_stage_turn_keeps_its_factor():
    # rollout 1 has one turn: stage 0 of 2 (turn 1) leaves it untrained and its factor at 1
    turns = torch.tensor([[0, 0, 1, 1], [0, 0, -1, -1]])
    mask = turns >= 0
    s0 = torch.zeros(2, 4, dtype=F64)
    s1 = s0 + torch.tensor([[0.0, 0.0, 0.5, 0.5], [0.4, 0.4, 0.0, 0.0]], dtype=F64)
    assert correction_factors(turns, [s0, s1], 2, 0.2).tolist() == pytest.approx([1.2, 1.0])
    adv = torch.tensor([1.0, -1.0], dtype=F64)
    x = inputs(s0, adv, 0, 2, turns=turns, mask=mask)
    (grad,) = torch.autograd.grad(seeupo_loss(x, cfg=CFG).loss, x.logprobs)
    assert (grad[1] == 0).all() and (grad[0, 2:] != 0).all() and (grad[0, :2] == 0).all()


def test_each_stage_trains_one_turn_counted_from_the_start():
    turns = torch.tensor([[0, 0, -1, 1, 1, -1, 2], [0, 0, 0, -1, -1, -1, -1]])
    mask = turns >= 0
    lp = -torch.rand(2, 7, generator=torch.Generator().manual_seed(1), dtype=F64)
    adv = torch.tensor([1.0, -0.5], dtype=F64)

    def trained(p):
        x = inputs(lp, adv, p, 3, earlier=[lp] * p, turns=turns, mask=mask)
        (grad,) = torch.autograd.grad(seeupo_loss(x, cfg=CFG).loss, x.logprobs)
        return (grad != 0).tolist()

    assert trained(0) == [[False] * 6 + [True], [False] * 7]  # turn 2: rollout 0 only
    assert trained(1)[0] == [False, False, False, True, True, False, False]
    assert trained(2) == [[True, True] + [False] * 5, [True] * 3 + [False] * 4]


def test_one_stage_is_gspo():
    # one-turn rollouts at one stage: the sequence-mean GSPO objective
    turns = torch.tensor([[0, 0, 0, -1], [0, 0, -1, -1]])
    mask = turns >= 0
    gen = torch.Generator().manual_seed(2)
    lp = (-torch.rand(2, 4, generator=gen, dtype=F64)).requires_grad_(True)
    old = lp.detach() + 1e-4 * torch.randn(2, 4, generator=gen, dtype=F64)
    adv = torch.tensor([1.0, -0.5], dtype=F64)
    x = PolicyLossInputs(lp, old, adv, mask, turn_index=turns)
    assert_close(seeupo_loss(x, cfg=CFG).loss, gspo_loss(x, cfg=GSPOLossConfig(name="g")).loss)


def test_model_turns():
    turns = torch.tensor([[0, 0, -1, 1], [-1, -1, -1, -1]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    # a tool response belongs to its turn but is not trained; a rollout without turns is turn 0
    assert model_turns(turns, mask).tolist() == [
        [0, 0, -1, 1],
        [0, 0, -1, -1],
    ]


def test_without_turns_the_loss_refuses_and_bad_settings_are_refused():
    x = inputs(torch.zeros(2, 6), torch.ones(2), 0, 1)
    bare = PolicyLossInputs(x.logprobs, x.old_logprobs, x.advantages, MASK)
    with pytest.raises(ValueError, match=r"\[loss.seeupo\] got PolicyLossInputs without"):
        seeupo_loss(bare, cfg=CFG)
    bad = SeeUPOLossConfig(name="seeupo", agg="token_mean", correction_clip=1.0)
    assert [p.path for p in bad.problems()] == ["correction_clip", "agg"]


def test_the_bundle_is_one_epoch_and_more_are_refused():
    cfg = load_config("train", ["algorithm=seeupo"])
    assert (cfg.advantage.name, cfg.advantage.clip, cfg.optim.policy_epochs) == (
        "reinforce_pp_baseline",
        3.0,
        1,
    )
    with pytest.raises(ConfigError, match=r"\[optim.policy_epochs\] got 2; expected 1 with"):
        load_config("train", ["algorithm=seeupo", "optim.policy_epochs=2"])


def with_turns(traj: Trajectory, turns: int) -> Trajectory:
    """The conftest trajectory (prompt, first span, tool response, second span) as one turn that
    called a tool and a second turn, or as one turn over both spans."""
    mask = traj.loss_mask
    p = traj.prompt_len
    first_end = next(i for i in range(p, len(mask)) if mask[i] == 0)
    second = next(i for i in range(first_end, len(mask)) if mask[i] == 1)
    if turns == 2:
        spans = [
            TurnSpan(p, first_end, observation=(first_end, second)),
            TurnSpan(second, len(mask)),
        ]
    else:
        spans = [TurnSpan(p, len(mask))]
    traj.turns = spans
    return traj


def test_the_update_makes_one_pass_per_turn(tiny_policy):  # noqa: F811
    import copy

    model, tok = tiny_policy
    model = copy.deepcopy(model)
    trajs = make_trajectories(len(tok), seed=3)
    trajs = [with_turns(t, 2 if i % 3 else 1) for i, t in enumerate(trajs)]
    spec = loss_spec(CFG, SimpleNamespace(coef=0.0))
    assert spec.stages_per_turn
    seen = []
    inner = spec.policy_loss

    def spy(x):
        seen.append((x.pass_index, x.passes, len(x.earlier_logprobs)))
        return inner(x)

    spec.policy_loss = spy
    optim = OptimConfig(micro_batch_size=4, micro_batch_tokens=0)
    steps = []

    class CountingSGD(torch.optim.SGD):
        def step(self, closure=None):
            steps.append(1)
            return super().step(closure)

    opt = CountingSGD(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0])
    batch = RolloutBatch.build(trajs, pad_id=tok.pad_token_id)
    plan = batch.plan(adv, plan_options(optim, spec))
    figures = policy_update(model, plan, spec, opt, sched, optim)
    micro = len(plan.micro)
    assert figures["turn_stages"] == 2 and len(steps) == 2  # one optimiser step per turn
    assert sched.last_epoch == 1  # the scheduler steps once per RL step
    # each micro-batch, each stage: stage p of 2 with the p earlier stages' log-probs
    assert seen == [(0, 2, 0)] * micro + [(1, 2, 1)] * micro


def test_under_data_parallelism_every_process_makes_the_most_stages(tiny_policy):  # noqa: F811
    # another process's rollouts had three turns: this one (two) makes three stages as well, the
    # first training nothing here, so that every process steps its optimiser as often
    import copy

    model, tok = tiny_policy
    model = copy.deepcopy(model)
    trajs = [with_turns(t, 2) for t in make_trajectories(len(tok), seed=4)]
    spec = loss_spec(CFG, SimpleNamespace(coef=0.0))
    optim = OptimConfig(micro_batch_size=8, micro_batch_tokens=0)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    batch = RolloutBatch.build(trajs, pad_id=tok.pad_token_id)
    plan = batch.plan(torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0]), plan_options(optim, spec))
    asked = []

    def pad_passes(mine: int) -> int:  # what the module's all-reduce of the maximum returns
        asked.append(mine)
        return max(3 - mine, 0) if len(asked) == 2 else 0

    before = [p.detach().clone() for p in model.parameters()]
    figures = policy_update(model, plan, spec, opt, sched, optim, pad_passes=pad_passes)
    assert asked == [len(plan.micro), 2]  # micro-batches, then the local turn count
    assert figures["turn_stages"] == 3
    assert figures["seeupo_turn_rollouts"] == 0.0  # the first stage (turn 2) trains none here
    assert any((p != b).any() for p, b in zip(model.parameters(), before, strict=True))


def test_each_stage_ratio_is_clipped_before_it_joins_the_factor():
    # the code clips each stage's ratio to [1 - c, 1 + c] and then the running product again. The
    # first stage alone cannot tell the two apart (M = clip(1 x r) = clip(r)); the second can.
    # c = 0.2, three turns, so stage 0 trains turn 2, stage 1 turn 1, stage 2 turn 0:
    # - rollout 0, turns 0, 1, 2 of 1, 2 and 1 tokens: stage 0 moved turn 2 by e^x = 1.5, stage 1
    #   moved turn 1's two tokens by log 0.6 and log 0.8 (mean: r = sqrt(0.48) = 0.69282):
    #     M after stage 0 = clip(1.5) = 1.2
    #     M after stage 1 = clip(1.2 x clip(0.69282)) = clip(1.2 x 0.8) = 0.96
    #     (without the per-stage clip: 1.2 x 0.69282 = 0.83138, inside [0.8, 1.2])
    # - rollout 1, turn 0 only (two tokens): no later turn of it moved, M = 1
    # - rollout 2, turns 0, 1, 2 of one token each, the mirror case: stage 0 moved turn 2 by 0.5,
    #   stage 1 turn 1 by 1.5:
    #     M = clip(0.5) = 0.8, then clip(0.8 x clip(1.5)) = clip(0.8 x 1.2) = 0.96
    #     (without the per-stage clip: 0.8 x 1.5 = 1.2)
    turns = torch.tensor([[0, 1, 1, 2], [0, 0, -1, -1], [0, 1, 2, -1]])
    mask = turns >= 0
    s0 = torch.zeros(3, 4, dtype=F64)
    s1 = s0.clone()
    s1[0, 3], s1[2, 2] = math.log(1.5), math.log(0.5)
    s2 = s1.clone()
    s2[0, 1], s2[0, 2], s2[2, 1] = math.log(0.6), math.log(0.8), math.log(1.5)
    after_one = correction_factors(turns, [s0, s1], 3, 0.2)
    assert after_one.tolist() == pytest.approx([1.2, 1.0, 0.8])
    after_two = correction_factors(turns, [s0, s1, s2], 3, 0.2)
    assert after_two.tolist() == pytest.approx([0.96, 1.0, 0.96])
    # stage 2 of 3 trains turn 0 at ratio 1 with A = [1, -0.5, 0.25]: the rollouts' turn means of
    # -A M are -0.96, 0.5 and -0.24, so the loss is (-0.96 + 0.5 - 0.24) / 3 = -0.233333; the
    # gradient per turn-0 token is -A M / (the row's turn-0 tokens) / 3 rollouts:
    # -0.96 / 1 / 3 = -0.32, 0.5 / 2 / 3 = 0.083333 and -0.24 / 1 / 3 = -0.08
    adv = torch.tensor([1.0, -0.5, 0.25], dtype=F64)
    x = inputs(s2, adv, 2, 3, earlier=[s0, s1], turns=turns, mask=mask)
    out = seeupo_loss(x, cfg=CFG)
    assert float(out.loss.detach()) == pytest.approx(-0.7 / 3, abs=1e-12)
    (grad,) = torch.autograd.grad(out.loss, x.logprobs)
    want = torch.zeros(3, 4, dtype=F64)
    want[0, 0], want[1, :2], want[2, 0] = -0.32, 0.5 / 6, -0.08
    assert_close(grad, want, atol=1e-12, rtol=0)
    assert float(out.metrics["seeupo_correction_mean"]) == pytest.approx((0.96 + 1.0 + 0.96) / 3)
