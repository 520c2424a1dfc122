"""Per-token advantages ``[N, L]`` reach the right tokens through micro-batching, and the batch
contracts around them: dataset columns, scoring once, the policy loss's declared aggregation."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from framework.algorithms.losses.base import PolicyLossConfig
from framework.algorithms.losses.ppo_clip import ClipLossConfig, ppo_clip_loss
from framework.algorithms.stats.aggregation import AGG_MODES
from framework.config import ComponentConfig
from framework.data.schema import QAItem
from framework.registry import REWARDS, Registry
from framework.rewards.composite import WeightedSumConfig
from framework.rl.batch import PlanOptions, RolloutBatch
from framework.rl.update import LossSpec, loss_spec
from framework.rollout.scoring import dataset_columns, score
from framework.training.tokens import pack, response_mask, right_aligned, token_logprobs, turn_index
from framework.types import Trajectory, TurnSpan

from .conftest import make_trajectories, update_pass

SAMPLE_MASK = torch.tensor([True, True, True, True, True, False])  # last one over budget
ROW_ADV = torch.tensor([0.7, -0.7, 0.3, -0.2, 1.2, -0.4])


def test_right_aligned_matches_pack_layout():
    # responses of 2 and 3 tokens after prompts of 3 and 1: pack right-aligns them in R = 3 columns
    trajs = [
        Trajectory(0, 0, [5, 6, 7, 8, 9], [0, 0, 0, 1, 1], 3),
        Trajectory(0, 0, [5, 6, 7, 8], [0, 1, 0, 1], 1),
    ]
    values = torch.tensor([[1.0, 2.0, 0.0], [3.0, 4.0, 5.0]])  # left-aligned, as response_mask
    assert response_mask(trajs).tolist() == [[True, True, False], [True, False, True]]
    got = right_aligned(values, trajs, width=3)
    assert got.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    # the generated tokens keep their values, in order
    batch = pack(trajs, pad_id=0)
    assert got[batch.loss_mask.bool()].tolist() == values[response_mask(trajs)].tolist()


def _pass(model, tok, trajs, adv, mode, micro_batch_size):
    cfg = ClipLossConfig(name="ppo_clip", agg=mode, norm_constant=12.0)
    spec = LossSpec(policy_loss=lambda i: ppo_clip_loss(i, cfg=cfg), agg=mode, norm_constant=12.0)
    plan = RolloutBatch.build(trajs, pad_id=0, sample_mask=SAMPLE_MASK).plan(
        adv,
        PlanOptions(
            micro_batch_size=micro_batch_size,
            agg=mode,
            skip_zero=True,
        ),
    )
    model.zero_grad(set_to_none=True)
    batch = RolloutBatch.build(trajs, pad_id=tok.pad_token_id, sample_mask=SAMPLE_MASK)
    stats = update_pass(model, batch, adv, plan, spec, lambda x: x.backward())
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return stats, grads


@pytest.mark.parametrize("mode", AGG_MODES)
def test_constant_token_advantages_equal_row_advantages(tiny_policy, mode):
    """``[N, L]`` holding each rollout's advantage on every token = the ``[N]`` broadcast."""
    model, tok = tiny_policy
    trajs = make_trajectories(len(tok))
    mask = response_mask(trajs)
    per_token = ROW_ADV.unsqueeze(-1) * mask  # [N, L]
    s1, g1 = _pass(model, tok, trajs, ROW_ADV, mode, micro_batch_size=2)
    s2, g2 = _pass(model, tok, trajs, per_token, mode, micro_batch_size=2)
    assert s1["policy_loss"] == pytest.approx(s2["policy_loss"], abs=1e-6)
    for name in g1:
        assert torch.allclose(g1[name], g2[name], atol=1e-6), name


def test_a_token_advantage_trains_exactly_its_token(tiny_policy):
    """Advantage only on each rollout's last generated token: at ratio 1 the token_sum_norm loss
    is ``-(1/N) sum_i A_i logp_i(last)`` (N = 6 rows, norm 12), so its gradient is that one's."""
    model, tok = tiny_policy
    trajs = make_trajectories(len(tok), seed=2)
    lengths = [len(t.token_ids) - t.prompt_len for t in trajs]
    per_token = torch.zeros(response_mask(trajs).shape)
    for i, r in enumerate(lengths):
        per_token[i, r - 1] = ROW_ADV[i]  # every response here ends in a generated token
    _, got = _pass(model, tok, trajs, per_token, "token_sum_norm", micro_batch_size=2)

    batch = pack(trajs, tok.pad_token_id)
    logp, _ = token_logprobs(model, batch)  # [N, R]: every row's last token in the last column
    weights = ROW_ADV * SAMPLE_MASK  # the over-budget rollout is out
    (-(weights * logp[:, -1]).sum() / (6 * 12.0)).backward()
    expected = {
        n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None
    }
    model.zero_grad(set_to_none=True)
    for name in expected:
        assert torch.allclose(got[name], expected[name], atol=1e-6, rtol=1e-4), name


def test_turn_index_follows_the_turns():
    # prompt of 2; turn 0 = tokens 2-4, its observation 5-6; turn 1 = 7-8
    t = Trajectory(0, 0, list(range(9)), [0, 0, 1, 1, 1, 0, 0, 1, 1], 2)
    t.turns = [TurnSpan(2, 5, observation=(5, 7)), TurnSpan(7, 9)]
    short = Trajectory(0, 0, [1, 2, 3], [0, 1, 1], 1)  # no turns recorded
    assert turn_index([t, short]).tolist() == [[0, 0, 0, 0, 0, 1, 1], [-1] * 7]


def test_dataset_columns_carry_every_field_and_the_shared_extras():
    rows = [
        QAItem("a", "Q1?", ("x",), (("E",),), 1, ("d1",), "synth", {"level": 1, "only_a": 1}),
        QAItem("b", "Q2?", ("y", "z"), (("F", "f"),), None, None, "nq", {"level": 2}),
    ]
    cols = dataset_columns(rows)
    assert cols == {
        "question": ["Q1?", "Q2?"],
        "question_id": ["a", "b"],
        "hops": [1, None],
        "golden_answers": [["x"], ["y", "z"]],
        "chain": [["d1"], None],
        "data_source": ["synth", "nq"],
        "entities": [[["E"]], [["F", "f"]]],
        "level": [1, 2],  # on every row; only_a is not
    }


@dataclass
class CountingConfig(ComponentConfig):
    pass


CALLS: list[int] = []


@REWARDS.register("test_counting", config=CountingConfig)
def counting_reward(inputs, *, cfg: CountingConfig) -> torch.Tensor:
    CALLS.append(len(inputs))
    return torch.arange(len(inputs), dtype=torch.float32)


def test_score_computes_every_reward_once():
    item = QAItem("a", "Q?", ("x",), None, 1, None, "t")
    trajs = [Trajectory(0, 0, [1, 2], [0, 1], 1, response_text=f"r{i}") for i in range(3)]
    CALLS.clear()
    single = score(trajs, [item], CountingConfig(name="test_counting"))
    assert CALLS == [3] and single.total.tolist() == [0.0, 1.0, 2.0]
    CALLS.clear()
    terms = [{"name": "test_counting", "weight": 2.0}, {"name": "format", "weight": 0.5}]
    both = score(trajs, [item], WeightedSumConfig(name="weighted_sum", terms=terms))
    assert CALLS == [3]  # the total is summed from the components
    # hand-derived: 2 * [0, 1, 2] + 0.5 * format (no <answer>: 0)
    assert both.total.tolist() == [0.0, 2.0, 4.0] and set(both.components) == {
        "test_counting",
        "format",
    }


def test_loss_aggregation_is_declared_by_the_config_base():
    @dataclass
    class PluginLossConfig(PolicyLossConfig):
        pass

    kl = type("KL", (), {"coef": 0.0})()
    assert loss_spec(ClipLossConfig(name="ppo_clip", agg="token_mean"), kl).agg == "token_mean"
    # a plugin loss that declares nothing gets the base's documented default, not a guess
    assert PluginLossConfig(name="p").agg == "seq_mean_token_mean"
    assert [p.path for p in PluginLossConfig(name="p", agg="bogus").problems()] == ["agg"]
    reg = Registry("loss", config_store=None, config_base=PolicyLossConfig)
    reg.add("plugin", lambda inputs, *, cfg: None, config=PluginLossConfig)

    @dataclass
    class NoAggConfig(ComponentConfig):
        pass

    with pytest.raises(
        TypeError,
        match=r"\[loss.no_agg\] got config NoAggConfig; expected a subclass of PolicyLossConfig",
    ):
        reg.add("no_agg", lambda inputs, *, cfg: None, config=NoAggConfig)
