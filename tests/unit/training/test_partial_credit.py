"""The share of wrong rollouts that E-GRPO's entity term credits, and the distribution of their
normalised entity rate, computed by hand."""

from __future__ import annotations

import pytest

from framework.data.schema import QAItem
from framework.rewards.entity import EntityRewardConfig
from framework.rollout.metrics import partial_credit
from framework.types import Trajectory

# a two-hop question that names its anchor: E_q = the bridge and the answer
ITEM = QAItem(
    "q",
    "Which river flows through the city that Kent mentions?",
    ("Thames",),
    (("Kent",), ("London",), ("Thames",)),
    2,
    ("a", "b", "c"),
    "t",
)


def traj(think: str, status: str = "ok") -> Trajectory:
    return Trajectory(
        question=0,
        group=0,
        token_ids=[],
        loss_mask=[],
        prompt_len=0,
        status=status,
        think_text=think,
    )


def test_partial_credit_of_wrong_rollouts_by_hand():
    trajs = [
        traj("Kent mentions London; London's river is the Thames."),  # correct: rate 1 (the max)
        traj("Kent mentions London."),  # wrong: 1 of 2 hidden entities -> 0.5 / 1
        traj("Kent is a county."),  # wrong: the anchor does not count -> 0
        traj("London, London.", status="format_error"),  # wrong and invalid: no credit
    ]
    m = partial_credit(trajs, [ITEM], [True, False, False, False])
    assert m["partial_credit_share"] == pytest.approx(1 / 3)
    assert m["wrong_entity_rate_mean"] == pytest.approx(0.5 / 3)
    assert m["wrong_entity_rate_zero"] == pytest.approx(2 / 3)
    assert m["wrong_entity_rate_full"] == 0.0


def test_the_paper_rule_counts_the_anchor_too():
    trajs = [traj("Kent mentions London."), traj("Kent is a county.")]
    literal = EntityRewardConfig(name="e_grpo", skip_question_entities=False)
    m = partial_credit(trajs, [ITEM], [False, False], literal)
    # rates 2/3 and 1/3, normalised by the group's best: 1 and 0.5; both credited
    assert m["partial_credit_share"] == 1.0
    assert m["wrong_entity_rate_mean"] == pytest.approx(0.75)
    assert m["wrong_entity_rate_full"] == pytest.approx(0.5)


def test_no_entities_or_no_wrong_rollouts_give_nothing():
    bare = QAItem("q", "Which?", ("x",), None, 1, None, "t")
    assert partial_credit([traj("x")], [bare], [False]) == {}
    assert partial_credit([traj("London")], [ITEM], [True]) == {}
