"""ArenaRL (reconstructed; framework/algorithms/arena.py, the tournament_wins input in
framework/rl/providers.py) against ../shared/METHODS-2.md item 6."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.arena import ArenaAdvantageConfig, arena_advantage, bracket_wins
from framework.data.schema import QAItem
from framework.registry import load_components
from framework.rl.batch import RolloutBatch
from framework.rl.inputs import InputContext, provide_inputs
from framework.rollout.types import Trajectory
from framework.types import AdvantageInputs
from tests.unit.training.conftest import tiny_policy  # noqa: F401  (fixture)

load_components(plugins=False)
CFG = ArenaAdvantageConfig(name="arena")


def test_worked_example():
    # bracket (1 v 4), (2 v 3); 1 and 3 win; the final 1 beats 3 -> rounds won [2, 0, 1, 0]
    wins = bracket_wins(4, lambda a, b: a in (0, 2))
    assert wins == [2, 0, 1, 0]
    adv = arena_advantage(
        AdvantageInputs(
            torch.zeros(4), torch.zeros(4, dtype=torch.long), extras={"tournament_wins": wins}
        ),
        cfg=CFG,
    )
    assert_close(adv, torch.tensor([1.5076, -0.9045, 0.3015, -0.9045]), atol=1e-4, rtol=0)
    assert abs(float(adv.sum())) < 1e-5  # zero group mean


def test_a_judge_preferring_longer_answers_ranks_by_length():
    lengths = [3, 9, 1, 7, 5, 2, 8, 4]
    wins = bracket_wins(8, lambda a, b: lengths[a] >= lengths[b])
    # N - 1 matches; the longest wins three rounds, and an entrant never outranks a longer one
    # that it met
    assert sum(wins) == 7 and wins[1] == 3
    adv = arena_advantage(
        AdvantageInputs(
            torch.zeros(8), torch.zeros(8, dtype=torch.long), extras={"tournament_wins": wins}
        ),
        cfg=CFG,
    )
    assert int(adv.argmax()) == 1 and float(adv[2]) == float(adv.min())


def test_byes_advance_without_a_win():
    assert bracket_wins(3, lambda a, b: True) == [1, 1, 0]
    assert bracket_wins(1, lambda a, b: True) == [0]


def rollout(group: int, answer: str | None) -> Trajectory:
    return Trajectory(group, group, [1, 2, 3], [0, 1, 1], 1, answer=answer)


def test_the_rule_judge_through_the_provider():
    items = [QAItem("q0", "Who directed Jaws?", ("Steven Spielberg",), None, 1, None, "t")]
    trajs = [
        rollout(0, "Spielberg"),
        rollout(0, None),
        rollout(0, "Steven Spielberg"),
        rollout(0, "Boston"),
    ]
    batch = RolloutBatch.build(trajs, items, pad_id=0)
    got = provide_inputs({"advantage": CFG}, InputContext(None, None, batch))
    # round 1: (0 v 3): F1 0.67 beats 0; (1 v 2): no answer loses to F1 1; final 0 v 2: 2 wins
    assert got["tournament_wins"].tolist() == [1.0, 0.0, 2.0, 0.0]


def test_the_policy_judge_runs_on_a_real_model(tiny_policy):  # noqa: F811
    model, tok = tiny_policy
    items = [QAItem("q0", "Who directed Jaws?", ("Steven Spielberg",), None, 1, None, "t")]
    trajs = [
        rollout(0, "Spielberg"),
        rollout(0, "Boston"),
        rollout(0, "a film"),
        rollout(0, "Steven Spielberg"),
    ]
    batch = RolloutBatch.build(trajs, items, pad_id=tok.pad_token_id)
    cfg = ArenaAdvantageConfig(name="arena", judge="policy")
    wins = provide_inputs({"advantage": cfg}, InputContext(model, tok, batch))["tournament_wins"]
    assert sorted(wins.tolist()) == [0.0, 0.0, 1.0, 2.0]  # a bracket of four, whoever won


@pytest.mark.parametrize("judge", ["oracle"])
def test_an_unknown_judge_is_refused(judge):
    assert [p.path for p in ArenaAdvantageConfig(name="arena", judge=judge).problems()] == ["judge"]
