"""Rewards of trajectories: the reward batch, E-GRPO on hand-made groups, composite rewards."""

from __future__ import annotations

import pytest
import torch

from framework.config import ConfigError  # noqa: F401  (validation path used below)
from framework.data.schema import QAItem
from framework.registry import load_components
from framework.rewards.composite import FormatRewardConfig, WeightedSumConfig
from framework.rewards.entity import EntityRewardConfig
from framework.rewards.outcome import OutcomeRewardConfig
from framework.rollout.scoring import reward_inputs, score
from framework.types import Trajectory

load_components(plugins=False)

ITEM = QAItem(
    "q0",
    "Which city is the birthplace of the director of Jaws?",
    ("Cincinnati",),
    (("Jaws", "Jaws (film)"), ("Steven Spielberg", "Spielberg"), ("Cincinnati",)),
    2,
    ("Jaws (film)", "Steven Spielberg", "Cincinnati"),
    "test",
)


def traj(group: int, think: str, answer: str | None, status: str = "ok") -> Trajectory:
    text = f"<think>{think}</think>" + (f"<answer>{answer}</answer>" if answer is not None else "")
    t = Trajectory(0, group, [1, 2, 3], [0, 0, 0], 3, status=status, answer=answer)
    t.response_text, t.think_text = text, think
    return t


def e_grpo(alpha: float = 0.3) -> EntityRewardConfig:
    # the literal rule (E_q = every entity): ITEM's question names "Jaws", which the default
    # (skip_question_entities) would leave out; that default has its own tests in test_rewards.py
    return EntityRewardConfig(name="e_grpo", alpha=alpha, skip_question_entities=False)


def test_reward_batch_from_trajectories():
    trajs = [traj(0, "a", "x"), traj(1, "b", None, "format_error")]
    items = [ITEM, ITEM]
    inputs = reward_inputs(trajs, items)
    assert inputs.group_index.tolist() == [0, 1]
    assert inputs.status == ["ok", "format_error"] and inputs.think_texts == ["a", "b"]
    assert inputs.columns["golden_answers"] == [["Cincinnati"], ["Cincinnati"]]
    assert inputs.columns["entities"][0][1] == ["Steven Spielberg", "Spielberg"]


def test_all_wrong_group_with_different_match_rates():
    # gamma = 1/3, 2/3, 0, 3/3 -> group max 1 -> gamma_hat = gamma; reward = 0.3 * gamma_hat
    trajs = [
        traj(0, "Jaws is a film", "Boston"),
        traj(0, "Jaws was directed by Steven Spielberg", "Boston"),
        traj(0, "no idea", "Boston"),
        traj(0, "Jaws, Steven Spielberg, Cincinnati... wait", "Ohio"),
    ]
    got = score(trajs, [ITEM], e_grpo()).total
    torch.testing.assert_close(got, torch.tensor([0.1, 0.2, 0.0, 0.3]))


def test_mixed_group_and_max_normalisation():
    # wrong rollouts' gamma: 1/3 and 2/3 -> max over the group is 3/3 (the correct one), so
    # gamma_hat = 1/3, 2/3; rewards 0.3 * 1/3 = 0.1, 0.3 * 2/3 = 0.2, and 1 for the correct one
    trajs = [
        traj(0, "Jaws", "Boston"),
        traj(0, "Jaws by Steven Spielberg", "Boston"),
        traj(0, "Jaws, Steven Spielberg, born in Cincinnati", "Cincinnati"),
    ]
    torch.testing.assert_close(score(trajs, [ITEM], e_grpo()).total, torch.tensor([0.1, 0.2, 1.0]))


def test_format_errors_and_budget_overruns_get_zero():
    trajs = [
        traj(0, "Jaws Steven Spielberg", None, "format_error"),
        traj(0, "Jaws Steven Spielberg Cincinnati", "Cincinnati", "over_budget"),
        traj(0, "Jaws", "Boston"),
    ]
    # the max over the group counts the invalid rollouts' gamma (3/3), so the valid wrong one
    # gets 0.3 * (1/3) / (3/3) = 0.1
    torch.testing.assert_close(score(trajs, [ITEM], e_grpo()).total, torch.tensor([0.0, 0.0, 0.1]))


def test_no_matches_anywhere_gives_zero_without_nan():
    trajs = [traj(0, "hmm", "Boston"), traj(0, "", "Paris")]
    got = score(trajs, [ITEM], e_grpo()).total
    assert got.tolist() == [0.0, 0.0] and not torch.isnan(got).any()


@pytest.mark.parametrize("seed", range(5))
def test_alpha_zero_equals_the_outcome_reward(seed):
    rng = torch.Generator().manual_seed(seed)
    thinks = ["Jaws", "Steven Spielberg", "Cincinnati", "nothing"]
    answers = ["Cincinnati", "Boston", None]
    statuses = ["ok", "ok", "format_error", "over_budget"]
    trajs = []
    for i in range(12):
        pick = lambda n: int(torch.randint(n, (1,), generator=rng))  # noqa: E731
        answer = answers[pick(3)]
        status = statuses[pick(4)] if answer is not None else "format_error"
        trajs.append(traj(i % 3, thinks[pick(4)], answer, status))
    items = [ITEM] * 3
    torch.testing.assert_close(
        score(trajs, items, e_grpo(alpha=0.0)).total,
        score(trajs, items, OutcomeRewardConfig(name="outcome")).total,
    )


def test_weighted_sum_reports_every_component():
    trajs = [traj(0, "Jaws", "Cincinnati"), traj(0, "Jaws", None, "format_error")]
    cfg = WeightedSumConfig(
        name="weighted_sum",
        terms=[{"name": "outcome", "weight": 1.0}, {"name": "format", "weight": 0.5}],
    )
    s = score(trajs, [ITEM], cfg)
    assert set(s.components) == {"outcome", "format"}
    torch.testing.assert_close(s.components["format"], torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(s.total, torch.tensor([1.0 + 0.5, 0.0]))


def test_weighted_sum_validation_names_bad_terms():
    cfg = WeightedSumConfig(
        name="weighted_sum",
        terms=[{"weight": 1.0}, {"name": "nope"}, {"name": "e_grpo", "alpha": 2.0}],
    )
    paths = [p.path for p in cfg.problems()]
    assert paths == ["terms.0", "terms.1", "terms.2.alpha"]


def test_format_reward():
    trajs = [traj(0, "", "x"), traj(0, "", None, "format_error"), traj(0, "", "y", "over_budget")]
    assert score(trajs, [ITEM], FormatRewardConfig(name="format")).total.tolist() == [1.0, 0.0, 0.0]
