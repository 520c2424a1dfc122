"""Tests of the example plugin's components; they need the plugin installed.

Every expected number is derived by hand in the comment next to it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

plugin = pytest.importorskip("seekrl_example_plugin")

from seekrl_example_plugin.advantage import RankAdvantageConfig, rank_advantage  # noqa: E402
from seekrl_example_plugin.reward import (  # noqa: E402
    LengthPenalizedOutcomeConfig,
    length_penalized_outcome_reward,
)

from framework.registry import ADVANTAGES, REWARDS  # noqa: E402
from framework.types import AdvantageInputs, RewardInputs  # noqa: E402


def pad(text: str, length: int) -> str:
    """``text`` followed by spaces up to ``length`` characters."""
    assert len(text) <= length
    return text + " " * (length - len(text))


def reward_inputs(completions, golds, status=None) -> RewardInputs:
    return RewardInputs(
        group_index=torch.zeros(len(completions), dtype=torch.long),
        completions=completions,
        columns={"golden_answers": golds},
        status=status,
    )


def rank(rewards, groups) -> torch.Tensor:
    inputs = AdvantageInputs(
        rewards=torch.tensor(rewards), group_index=torch.tensor(groups, dtype=torch.long)
    )
    return rank_advantage(inputs, cfg=RankAdvantageConfig(name="rank"))


# -- registration ---------------------------------------------------------------------------------


def test_importing_registers_both_components():
    reward = REWARDS.get("length_penalized_outcome")
    assert reward.target is length_penalized_outcome_reward
    assert reward.config_cls is LengthPenalizedOutcomeConfig
    advantage = ADVANTAGES.get("rank")
    assert advantage.target is rank_advantage
    assert advantage.config_cls is RankAdvantageConfig


def test_every_reward_field_has_help_text():
    fields = {f.name: f for f in REWARDS.get("length_penalized_outcome").fields()}
    assert set(fields) == {"metric", "max_chars", "penalty", "max_penalty"}
    assert all(f.help for f in fields.values())
    assert fields["max_chars"].default == "2000"
    assert fields["penalty"].default == "0.1"


def test_register_returns_the_config_dir_with_the_preset():
    config_dir = Path(plugin.register())
    assert config_dir.is_absolute() and config_dir.is_dir()
    preset = (config_dir / "experiment" / "example_plugin.yaml").read_text()
    assert "override /reward: length_penalized_outcome" in preset
    assert "override /advantage: rank" in preset
    assert plugin.register() == str(config_dir)  # calling it again changes nothing


def test_bound_components_are_callable_through_the_registry():
    cfg = LengthPenalizedOutcomeConfig(name="length_penalized_outcome")
    out = REWARDS.bind(cfg)(reward_inputs(["<answer>Paris</answer>"], [["Paris"]]))
    assert out.tolist() == [1.0]
    adv = ADVANTAGES.bind(RankAdvantageConfig(name="rank"))(
        AdvantageInputs(rewards=torch.tensor([0.0, 1.0]), group_index=torch.tensor([0, 0]))
    )
    assert adv.tolist() == [-1.0, 1.0]


# -- reward ---------------------------------------------------------------------------------------


def test_reward_subtracts_the_penalty_per_thousand_chars_over_budget():
    cfg = LengthPenalizedOutcomeConfig(name="length_penalized_outcome")  # 2000 chars, 0.1 / 1000
    completions = [
        "<answer>Paris</answer>",  # right, 22 chars: 1
        pad("<answer>Paris</answer>", 2000),  # right, exactly at budget: 1
        pad("<answer>Paris</answer>", 2500),  # right, 500 over: 1 - 0.1 * 0.5 = 0.95
        pad("<answer>Lyon</answer>", 4000),  # wrong, 2000 over: 0 - 0.1 * 2 = -0.2
        pad("I do not know", 3000),  # no answer block (format error), 1000 over: -0.1
        pad("<answer>Paris</answer>", 32000),  # right, 30000 over: 1 - min(1.0, 3.0) = 0
    ]
    out = length_penalized_outcome_reward(reward_inputs(completions, [["Paris"]] * 6), cfg=cfg)
    assert out.dtype == torch.get_default_dtype()
    torch.testing.assert_close(out, torch.tensor([1.0, 1.0, 0.95, -0.2, -0.1, 0.0]))


def test_reward_with_custom_budget_penalty_cap_and_statuses():
    cfg = LengthPenalizedOutcomeConfig(
        name="length_penalized_outcome", max_chars=100, penalty=2.0, max_penalty=0.5
    )  # 0.002 per char over 100, at most 0.5
    completions = [
        pad("<answer>the Paris</answer>", 150),  # em after normalisation, 50 over: 1 - 0.1 = 0.9
        pad("<answer>Paris</answer>", 150),  # over_budget status: 0 - 0.1 = -0.1
        pad("<answer>Paris</answer>", 100),  # format_error status, at budget: 0
        pad("<answer>Paris</answer>", 600),  # right, 500 over: 1 - min(0.5, 1.0) = 0.5
    ]
    status = ["ok", "over_budget", "format_error", "ok"]
    out = length_penalized_outcome_reward(
        reward_inputs(completions, ["Paris"] * 4, status), cfg=cfg
    )
    torch.testing.assert_close(out, torch.tensor([0.9, -0.1, 0.0, 0.5]))


def test_reward_uses_the_chosen_answer_metric():
    # "Paris France" against "Paris": precision 1/2, recall 1, F1 = 2/3; substring: 1; em: 0.
    completions = ["<answer>Paris France</answer>"]
    expected = {"em": 0.0, "substring": 1.0, "f1": 2.0 / 3.0}
    for metric, value in expected.items():
        cfg = LengthPenalizedOutcomeConfig(name="length_penalized_outcome", metric=metric)
        out = length_penalized_outcome_reward(reward_inputs(completions, [["Paris"]]), cfg=cfg)
        torch.testing.assert_close(out, torch.tensor([value]), msg=metric)


def test_zero_penalty_is_exactly_the_outcome_reward():
    from framework.rewards.outcome import OutcomeRewardConfig, outcome_reward

    completions = [pad("<answer>Paris</answer>", 9000), "<answer>Rome</answer>", "none"]
    inputs = reward_inputs(completions, [["Paris"], ["Rome"], ["Oslo"]])
    cfg = LengthPenalizedOutcomeConfig(name="length_penalized_outcome", penalty=0.0)
    expected = outcome_reward(inputs, cfg=OutcomeRewardConfig(name="outcome"))
    torch.testing.assert_close(length_penalized_outcome_reward(inputs, cfg=cfg), expected)


def test_reward_without_golden_answers_says_what_to_do():
    cfg = LengthPenalizedOutcomeConfig(name="length_penalized_outcome")
    inputs = RewardInputs(group_index=torch.zeros(1), completions=["<answer>x</answer>"])
    with pytest.raises(ValueError, match=r"\[reward\.length_penalized_outcome\].*golden_answers"):
        length_penalized_outcome_reward(inputs, cfg=cfg)


# -- reward config --------------------------------------------------------------------------------


def test_default_reward_config_is_valid():
    assert LengthPenalizedOutcomeConfig(name="length_penalized_outcome").problems() == []
    edge = LengthPenalizedOutcomeConfig(
        name="length_penalized_outcome", max_chars=0, penalty=0.0, max_penalty=0.0
    )
    assert edge.problems() == []


def test_invalid_reward_config_reports_every_problem():
    cfg = LengthPenalizedOutcomeConfig(
        name="length_penalized_outcome", metric="bleu", max_chars=-1, penalty=-0.1, max_penalty=-2
    )
    problems = cfg.problems()
    assert [p.path for p in problems] == ["metric", "max_chars", "penalty", "max_penalty"]
    assert [p.got for p in problems] == ["bleu", -1, -0.1, -2]
    for p in problems:
        assert str(p).startswith(f"[{p.path}] got ") and "Fix: " in str(p)
    located = problems[1].under("reward")
    assert str(located).startswith("[reward.max_chars] got -1; expected a number >= 0.")


# -- rank advantage -------------------------------------------------------------------------------


def test_rank_of_distinct_rewards():
    # ranks 1, 3, 2, 4 of n = 4: A = (rank - 2.5) / 1.5
    torch.testing.assert_close(
        rank([0.1, 0.5, 0.3, 0.9], [0, 0, 0, 0]), torch.tensor([-1.0, 1 / 3, -1 / 3, 1.0])
    )


def test_rank_ties_share_their_average_rank():
    # zeros share ranks 1 and 2 (1.5), ones ranks 3 and 4 (3.5): A = (1.5 - 2.5) / 1.5 = -2/3, +2/3
    torch.testing.assert_close(
        rank([1.0, 0.0, 1.0, 0.0], [3, 3, 3, 3]), torch.tensor([2 / 3, -2 / 3, 2 / 3, -2 / 3])
    )
    # 0.2 rank 1, the two 0.5 share 2 and 3 (2.5), 0.9 rank 4: A = -1, 0, 0, 1
    torch.testing.assert_close(
        rank([0.5, 0.2, 0.9, 0.5], [0, 0, 0, 0]), torch.tensor([0.0, -1.0, 1.0, 0.0])
    )


def test_rank_with_uneven_non_contiguous_groups():
    rewards = [3.0, 0.0, 1.0, 42.0, 2.0, 1.0, 0.7, 0.7]
    groups = [5, 2, 5, 7, 2, 2, 9, 9]
    # group 5 (n=2): 3.0 best, 1.0 worst -> 1, -1
    # group 2 (n=3): 0.0, 2.0, 1.0 -> ranks 1, 3, 2 -> A = (rank - 2) / 1 -> -1, 1, 0
    # group 7: one rollout -> 0; group 9: identical rewards -> 0
    expected = torch.tensor([1.0, -1.0, -1.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    torch.testing.assert_close(rank(rewards, groups), expected)


def test_rank_of_degenerate_groups_is_zero():
    assert rank([5.0], [0]).tolist() == [0.0]
    assert rank([0.3, 0.3, 0.3], [1, 1, 1]).tolist() == [0.0, 0.0, 0.0]


def test_rank_depends_only_on_order_and_sums_to_zero_per_group():
    rewards = torch.tensor([0.3, -1.0, 7.0, 0.3, 2.0, 2.0, 5.0])
    groups = [0, 0, 0, 0, 1, 1, 1]
    adv = rank(rewards.tolist(), groups)
    torch.testing.assert_close(adv, rank((100 * rewards - 4).tolist(), groups))
    torch.testing.assert_close(adv[:4].sum(), torch.tensor(0.0))
    torch.testing.assert_close(adv[4:].sum(), torch.tensor(0.0))
    assert adv.abs().max() <= 1.0


def test_rank_accepts_integer_and_boolean_rewards():
    groups = torch.tensor([0, 0, 1, 1])
    for rewards in (torch.tensor([1, 0, 0, 0]), torch.tensor([True, False, False, True])):
        out = rank_advantage(
            AdvantageInputs(rewards=rewards, group_index=groups),
            cfg=RankAdvantageConfig(name="rank"),
        )
        assert out.dtype == torch.get_default_dtype()
    # boolean case: group 0 (True, False) -> 1, -1; group 1 (False, True) -> -1, 1
    assert out.tolist() == [1.0, -1.0, -1.0, 1.0]


def test_rank_config_has_no_problems():
    assert RankAdvantageConfig(name="rank").problems() == []
