"""The RL step (:func:`rl_step`) with the real agent loop, a scripted policy and a tiny trainable LM.

Components here are registered the way a plugin registers them (a module of its own, no framework
edits): a token-level advantage estimator that reads the token mask and the turn structure, a
reward that reads a dataset column the framework does not know (from ``QAItem.extra``), and an
estimator that declares an input the framework does not compute, with the provider that computes
it. The fake
tokenizer is byte level (one ASCII character = one token; see ``tests/unit/rollout/fakes.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

import pytest
import torch
from torch import Tensor

from framework.algorithms.losses.ppo_clip import ClipLossConfig, ppo_clip_loss
from framework.cli.app import load_config
from framework.config import ComponentConfig, ConfigError
from framework.data.schema import QAItem
from framework.registry import ADVANTAGES, INPUT_PROVIDERS, POLICY_LOSSES, REWARDS
from framework.rl.inputs import InputContext
from framework.rl.step import StepParts, rl_step
from framework.rollout.config import AgentConfig
from framework.rollout.engine import AgentLoop
from framework.training.schedule import optimizer_and_schedule
from framework.types import AdvantageInputs, GroupRequest, LossOutput, PolicyLossInputs, ToolCall
from tests.unit.rollout.fakes import EOS, FakeBackend, FakeRetriever, FakeTokenizer, search_call

TOK = FakeTokenizer()
SEARCH = "<think>look</think>" + search_call("Jaws director")
ANSWER = "<think>so</think><answer>{}</answer>"

DATASET = [
    QAItem("q0", "Who directed Jaws?", ("Steven Spielberg",), None, 1, None, "t", {"level": 3}),
    QAItem("q1", "Where was he born?", ("Cincinnati",), None, 2, None, "t", {"level": 5}),
]


# -- plugin-style components ------------------------------------------------------------------------
@dataclass
class TurnDiscountConfig(ComponentConfig):
    gamma: float = field(default=0.5, metadata={"help": "weight per turn before the last"})


SEEN: list[AdvantageInputs] = []


@ADVANTAGES.register("test_turn_discount", config=TurnDiscountConfig)
def turn_discount_advantage(inputs: AdvantageInputs, *, cfg: TurnDiscountConfig) -> Tensor:
    """Per token ``(r - mean of the group) * gamma ** (turns after the token's turn)`` on generated
    tokens, 0 elsewhere: ``[N]`` rewards -> ``[N, L]``."""
    SEEN.append(inputs)
    r = inputs.rewards  # [N]
    g = inputs.group_index  # [N]
    mean = torch.zeros(int(g.max()) + 1).index_add(0, g, r) / torch.bincount(g).float()
    centred = r - mean[g]  # [N]
    last = inputs.turn_index.max(dim=-1, keepdim=True).values  # [N, 1]
    weight = cfg.gamma ** (last - inputs.turn_index).clamp(min=0).float()  # [N, L]
    return centred.unsqueeze(-1) * weight * inputs.token_mask.float()  # [N, L]


@dataclass
class LevelRewardConfig(ComponentConfig):
    pass


@REWARDS.register("test_level", config=LevelRewardConfig)
def level_reward(inputs, *, cfg: LevelRewardConfig) -> Tensor:
    """Reads ``level``, a column only the dataset knows (``QAItem.extra``), plus the length."""
    levels = inputs.columns["level"]
    return torch.tensor([10.0 * lv + len(c) for lv, c in zip(levels, inputs.completions)])


# -- the step ------------------------------------------------------------------------------------------
def tiny_lm() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=260,  # the fake tokenizer's 256 bytes + 3 specials
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=EOS,
    )
    return LlamaForCausalLM(config).eval()


class ScriptedLoop(AgentLoop):
    """The real agent loop whose policy plays ``rounds[i]`` (scripts per rollout) in its ``i``-th
    run: dynamic sampling rolls out reserve groups in later runs of one step."""

    def __init__(self, rounds) -> None:
        self.rounds = list(rounds)
        super().__init__(
            FakeBackend(TOK, self.rounds[0]),
            FakeRetriever(),
            AgentConfig(system_prompt="Tools: search."),
        )

    def run(self, *args, **kwargs):
        self.backend = FakeBackend(TOK, self.rounds.pop(0))
        return super().run(*args, **kwargs)

    def run_from(self, prefixes, **kwargs):
        """Continuations (an augmenter's): the next round, or each answers at once."""
        scripts = self.rounds.pop(0) if self.rounds else [[CONTINUATION]] * len(prefixes)
        self.backend = FakeBackend(TOK, scripts)
        return super().run_from(prefixes, **kwargs)


#: what a continuation says when a test scripts none (after a forced ``<answer>`` it is an answer)
CONTINUATION = "Steven Spielberg</answer>"


def run_step(scripts, groups, *overrides: str, keep=None, rounds=False):
    """One :func:`rl_step` on ``groups`` of :data:`DATASET` with the policy playing ``scripts``
    (with ``rounds``: one list of scripts per run of the loop)."""
    cfg = load_config("train", ["algorithm=grpo", "optim.lr=1e-2", *overrides])
    policy = tiny_lm()
    before = [p.detach().clone() for p in policy.parameters()]
    loop = ScriptedLoop(scripts if rounds else [scripts])
    parts = StepParts.of(cfg, policy, loop, EOS)
    opt, sched = optimizer_and_schedule(policy, cfg.optim, 1)
    result = rl_step(parts, groups, DATASET, opt, sched, keep=keep)
    moved = any(not torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))
    return result, moved


def test_token_level_estimator_plugin_runs_through_the_step():
    SEEN.clear()
    scripts = [[SEARCH, ANSWER.format("Steven Spielberg")], [ANSWER.format("Boston")]] * 2
    groups = [GroupRequest(0, 2), GroupRequest(1, 2)]
    result, moved = run_step(scripts, groups, "advantage=test_turn_discount", "reward=test_level")
    assert moved and result.figures["loss/trained_rollouts"] == 4.0

    (inputs,) = SEEN
    trajs = result.trajectories
    n, width = inputs.token_mask.shape
    assert n == 4 and width == max(len(t.token_ids) - t.prompt_len for t in trajs)
    assert result.advantages.shape == (4, width)
    # turn structure of rollout 0: a search turn, its observation, then the answer turn
    first, second = inputs.turns[0]
    assert first.calls == (ToolCall("search", queries=("Jaws director",)),)
    assert first.start == 0 and first.end == len(SEARCH)
    start, end = first.observation
    assert start == first.end and second.start == end and second.calls == ()
    mask = inputs.token_mask[0]
    assert mask[: first.end].all() and not mask[start:end].any() and mask[end : second.end].all()
    assert (
        inputs.turn_index[0, :end].eq(0).all()
        and inputs.turn_index[0, end : second.end].eq(1).all()
    )
    assert inputs.turn_index[0, second.end :].eq(-1).all()  # padding
    assert inputs.stats[0]["queries"] == 1 and len(inputs.turns[1]) == 1
    assert inputs.columns["level"] == [3, 3, 5, 5]  # every dataset column, per rollout
    # the estimator's per-token values reached the logged figures: |A| over generated tokens
    adv = result.advantages
    expected = float(adv.abs()[inputs.token_mask].mean())
    assert result.figures["loss/advantage_abs_mean"] == pytest.approx(expected)
    # rollout 0's search turn weighs gamma = 0.5 of its answer turn
    torch.testing.assert_close(adv[0, 0], 0.5 * adv[0, end])


def test_reward_reads_a_dataset_column_the_framework_does_not_know():
    scripts = [[ANSWER.format("x")], [ANSWER.format("yy")], [ANSWER.format("x")]] * 2
    groups = [GroupRequest(0, 3), GroupRequest(1, 3)]
    result, _ = run_step(scripts, groups, "reward=test_level")
    lengths = torch.tensor([float(len(t.response_text)) for t in result.trajectories])
    level = torch.tensor([30.0, 30.0, 30.0, 50.0, 50.0, 50.0])
    torch.testing.assert_close(result.scores.total, level + lengths)
    assert result.figures["rollout/reward/test_level"] == pytest.approx(
        float(result.scores.total.mean())
    )
    # GRPO: within a group only the length differs (the middle answer is one character longer)
    adv = result.advantages.view(2, 3)
    torch.testing.assert_close(adv.sum(-1), torch.zeros(2), atol=1e-4, rtol=0)  # float32 rounding
    assert (adv[:, 1] > 0).all() and (adv[:, [0, 2]] < 0).all()


def test_groups_keep_their_own_sizes():
    scripts = [[ANSWER.format(a)] for a in ("Steven Spielberg", "no", "Cincinnati", "no", "no")]
    groups = [GroupRequest(1, 3), GroupRequest(0, 2)]
    result, _ = run_step(scripts, groups, "reward=test_level")
    trajs = result.trajectories
    assert [t.group for t in trajs] == [0, 0, 0, 1, 1]
    assert [t.question for t in trajs] == [1, 1, 1, 0, 0]
    assert [it.id for it in result.items] == ["q1", "q0"]
    assert result.figures["train/rollouts"] == 5.0
    assert [r["question_id"] for r in result.records(step=1)] == ["q1"] * 3 + ["q0"] * 2


def test_an_advantage_of_the_wrong_shape_names_the_estimator():
    @dataclass
    class BadShapeConfig(ComponentConfig):
        pass

    if "test_bad_shape" not in ADVANTAGES:

        @ADVANTAGES.register("test_bad_shape", config=BadShapeConfig)
        def bad_shape(inputs: AdvantageInputs, *, cfg: BadShapeConfig) -> Tensor:
            return torch.zeros(len(inputs.rewards), 3, 7)

    scripts = [[ANSWER.format("a")], [ANSWER.format("b")]]
    with pytest.raises(ValueError, match=r"\[advantage.test_bad_shape\] got advantages of shape"):
        run_step(scripts, [GroupRequest(0, 2)], "advantage=test_bad_shape")


# -- dynamic sampling: dropped groups, reserve refills ------------------------------------------------
def varied(rewards: Tensor, correct: Tensor) -> bool:  # dapo_dynamic's rule
    return bool(rewards.max() > rewards.min())


def test_a_dropped_group_is_replaced_by_a_reserve_group():
    # q0's two rollouts are both wrong (equal rewards: dropped); the reserve q1 is then rolled out
    first = [[ANSWER.format("Boston")]] * 2
    second = [[ANSWER.format("Cincinnati")], [ANSWER.format("no")]]
    groups = [GroupRequest(0, 2), GroupRequest(1, 2, reserve=True)]
    result, moved = run_step([first, second], groups, keep=varied, rounds=True)
    assert moved
    assert [it.id for it in result.items] == ["q1"]  # trained on the reserve group only
    assert [t.group for t in result.trajectories] == [0, 0]
    torch.testing.assert_close(result.scores.total, torch.tensor([1.0, 0.0]))
    f = result.figures
    assert (f["sampler/drawn_groups"], f["sampler/kept_groups"]) == (2.0, 1.0)
    assert f["sampler/generated_rollouts"] == 4.0 and f["sampler/rollouts_per_kept_group"] == 4.0
    assert f["train/rollouts"] == 2.0
    assert f["rollout/accuracy"] == pytest.approx(0.25)  # over every rollout generated: 1 of 4
    assert f["rollout/zero_variance_groups"] == pytest.approx(0.5)


def test_a_step_records_what_it_spent():
    """The compute a screen compares arms at (framework/study/compute.py): every rollout generated,
    the dropped group's and the reserve's too, their generated tokens, and the optimiser steps."""
    first = [[ANSWER.format("Boston")]] * 2
    second = [[ANSWER.format("Cincinnati")], [ANSWER.format("no")]]
    groups = [GroupRequest(0, 2), GroupRequest(1, 2, reserve=True)]
    result, _ = run_step([first, second], groups, keep=varied, rounds=True)
    f = result.figures
    assert f["train/generated_rollouts"] == 4.0 and f["train/rollouts"] == 2.0
    assert f["train/generated_tokens"] == pytest.approx(4 * f["rollout/generated_tokens"])
    assert f["train/optimizer_steps"] == 1.0  # one epoch, one mini-batch
    scripts = [[ANSWER.format(a)] for a in ("Steven Spielberg", "no", "Cincinnati", "no")]
    two = [GroupRequest(0, 2), GroupRequest(1, 2)]
    result, _ = run_step(scripts, two, "optim.policy_epochs=2")
    assert result.figures["train/optimizer_steps"] == 2.0
    result, _ = run_step(scripts, two, "optim.policy_epochs=2", "optim.mini_batch_size=2")
    assert result.figures["train/optimizer_steps"] == 4.0  # 2 mini-batches x 2 epochs
    assert result.figures["loss/optimizer_steps"] == 4.0


def test_no_reserve_is_rolled_out_when_every_group_is_kept():
    scripts = [[ANSWER.format("Steven Spielberg")], [ANSWER.format("no")]]
    groups = [GroupRequest(0, 2), GroupRequest(1, 2, reserve=True)]
    result, _ = run_step(scripts, groups, keep=varied)
    assert [it.id for it in result.items] == ["q0"]
    assert result.figures["sampler/generated_rollouts"] == 2.0
    # without a keep rule reserve groups are never rolled out (and no sampler figures appear)
    result, _ = run_step(scripts, groups)
    assert [it.id for it in result.items] == ["q0"] and "sampler/kept_groups" not in result.figures


def test_a_step_that_keeps_no_group_changes_no_weight():
    rounds = [[[ANSWER.format("no")]] * 2] * 2
    groups = [GroupRequest(0, 2), GroupRequest(1, 2, reserve=True)]
    result, moved = run_step(rounds, groups, keep=varied, rounds=True)
    assert not moved
    assert result.trajectories == [] and result.figures["train/rollouts"] == 0.0
    assert result.figures["sampler/kept_groups"] == 0.0
    assert "sampler/rollouts_per_kept_group" not in result.figures
    assert result.figures["loss/trained_rollouts"] == 0.0


# -- an estimator that needs an input the framework does not compute ---------------------------------
@dataclass
class LengthScaledConfig(ComponentConfig):
    #: declared, not wired: the step asks the registered provider below for it
    requires: ClassVar[tuple[str, ...]] = ("test_response_lengths",)

    scale: float = field(default=100.0, metadata={"help": "divides the response length"})


LENGTH_CALLS: list[tuple[int, float]] = []


@INPUT_PROVIDERS.register("test_response_lengths", config=LengthScaledConfig)
def response_lengths(ctx: InputContext, *, cfg: LengthScaledConfig) -> Tensor:
    """``[N]`` each rollout's response length over the requiring config's ``scale``."""
    LENGTH_CALLS.append((len(ctx.trajectories), cfg.scale))
    return torch.tensor([(len(t.token_ids) - t.prompt_len) / cfg.scale for t in ctx.trajectories])


@ADVANTAGES.register("test_length_scaled", config=LengthScaledConfig)
def length_scaled_advantage(inputs: AdvantageInputs, *, cfg: LengthScaledConfig) -> Tensor:
    """``r - length / scale``: reads the input its config requires from ``extras``."""
    return inputs.rewards - inputs.extras["test_response_lengths"]


def test_an_estimator_gets_the_input_it_declares_from_a_registered_provider():
    LENGTH_CALLS.clear()
    scripts = [[SEARCH, ANSWER.format("Steven Spielberg")], [ANSWER.format("Boston")]]
    result, moved = run_step(
        scripts, [GroupRequest(0, 2)], "advantage=test_length_scaled", "advantage.scale=10.0"
    )
    assert moved and LENGTH_CALLS == [(2, 10.0)]  # once per step, with the requiring config
    lengths = torch.tensor([(len(t.token_ids) - t.prompt_len) / 10.0 for t in result.trajectories])
    assert torch.equal(result.batch.extras["test_response_lengths"], lengths)
    assert torch.allclose(result.advantages, result.scores.total - lengths)


def test_a_required_input_without_a_provider_is_a_config_error():
    @dataclass
    class NeedsNothingKnown(ComponentConfig):
        requires: ClassVar[tuple[str, ...]] = ("test_no_such_input",)

    ADVANTAGES.register("test_needs_unknown", config=NeedsNothingKnown)(
        lambda inputs, *, cfg: inputs.rewards
    )
    try:
        with pytest.raises(ConfigError) as err:
            load_config("train", ["advantage=test_needs_unknown"])
        assert (
            "[advantage.name] got 'test_needs_unknown'; expected a component whose required "
            "input 'test_no_such_input' has a registered provider"
        ) in str(err.value)
        assert "Fix: register one with @INPUT_PROVIDERS.register('test_no_such_input'" in str(
            err.value
        )
    finally:
        ADVANTAGES.remove("test_needs_unknown")


# -- a loss that needs an input the framework does not compute ---------------------------------------
@dataclass
class WeightedClipConfig(ClipLossConfig):
    #: declared on the loss: the step computes it once and slices it to each micro-batch
    requires: ClassVar[tuple[str, ...]] = ("test_rollout_weights",)


LOSS_SEEN: list[tuple[int, list[float]]] = []


@INPUT_PROVIDERS.register("test_rollout_weights", config=WeightedClipConfig)
def rollout_weights(ctx: InputContext, *, cfg: WeightedClipConfig) -> Tensor:
    """``[N]`` 1, 2, 3, ...: one weight per rollout of the step, in batch order."""
    return torch.arange(1, ctx.batch.size + 1, dtype=torch.float32)


@POLICY_LOSSES.register("test_weighted_clip", config=WeightedClipConfig)
def weighted_clip_loss(inputs: PolicyLossInputs, *, cfg: WeightedClipConfig) -> LossOutput:
    """PPO-clip with each rollout's advantage scaled by its required weight."""
    n = inputs.logprobs.shape[0]
    # [n] of this micro-batch's rows (1 when called outside a step, as the loss-contract tests do)
    weights = inputs.extras.get("test_rollout_weights", torch.ones(n))
    LOSS_SEEN.append((len(weights), weights.tolist()))
    scaled = replace(
        inputs,
        advantages=inputs.advantages * weights.reshape(-1, *[1] * (inputs.advantages.dim() - 1)),
    )
    return ppo_clip_loss(scaled, cfg=cfg)


def test_a_loss_gets_the_input_it_declares_sliced_to_its_micro_batch():
    LOSS_SEEN.clear()
    scripts = [[ANSWER.format("Steven Spielberg")], [ANSWER.format("Boston")]] * 2
    groups = [GroupRequest(0, 2), GroupRequest(1, 2)]
    result, moved = run_step(scripts, groups, "loss=test_weighted_clip", "optim.micro_batch_size=1")
    assert moved and torch.equal(
        result.batch.extras["test_rollout_weights"], torch.tensor([1.0, 2.0, 3.0, 4.0])
    )
    # one micro-batch per trained rollout (zero advantages are skipped), each with its own weight
    trained = [i for i, a in enumerate(result.advantages.tolist()) if a != 0]
    assert sorted(w for _, (w,) in LOSS_SEEN) == [float(i + 1) for i in trained]
    assert all(n == 1 for n, _ in LOSS_SEEN)


def test_a_loss_input_without_a_provider_is_a_config_error():
    @dataclass
    class LossNeedsUnknown(ClipLossConfig):
        requires: ClassVar[tuple[str, ...]] = ("test_no_such_loss_input",)

    POLICY_LOSSES.register("test_loss_needs_unknown", config=LossNeedsUnknown)(ppo_clip_loss)
    try:
        with pytest.raises(ConfigError, match=r"\[loss.name\] got 'test_loss_needs_unknown'"):
            load_config("train", ["loss=test_loss_needs_unknown"])
    finally:
        POLICY_LOSSES.remove("test_loss_needs_unknown")
