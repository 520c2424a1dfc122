"""ArenaRL (partial; framework/algorithms/advantages/arena.py, the arena_rewards input in
framework/rl/providers.py) against the authors' tournament (github.com/Alibaba-NLP/qqr,
``reward_models/arena``), with examples worked by hand."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.advantages.arena import (
    ArenaAdvantageConfig,
    anchor_rewards,
    arena_advantage,
    bracket_order,
    share_equal,
    single_elimination_rewards,
)
from framework.algorithms.advantages.grpo import GRPOAdvantageConfig, grpo_advantage
from framework.data.schema import QAItem
from framework.registry import load_components
from framework.rl.batch import RolloutBatch
from framework.rl.inputs import InputContext, provide_inputs
from framework.types import AdvantageInputs, Trajectory
from tests.unit.training.conftest import tiny_policy  # noqa: F401  (fixture)

load_components(plugins=False)
CFG = ArenaAdvantageConfig(name="arena")


def by_score(scores: list[float], calls: list | None = None):
    """A judge that scores each entrant by a fixed number of its own (the rule judge's kind)."""

    def match(a: int, b: int) -> tuple[float, float]:
        if calls is not None:
            calls.append((a, b))
        return scores[a], scores[b]

    return match


def advantage(rewards: list[float], cfg: ArenaAdvantageConfig = CFG) -> torch.Tensor:
    n = len(rewards)
    extras = {"arena_rewards": rewards}
    return arena_advantage(
        AdvantageInputs(torch.zeros(n), torch.zeros(n, dtype=torch.long), extras=extras), cfg=cfg
    )


def test_the_standard_bracket_order():
    # seeds 1 and 2 meet only in the final, 1 meets the lowest seed first (the authors' order)
    assert bracket_order(8) == [0, 7, 3, 4, 1, 6, 2, 5]
    assert bracket_order(4) == [0, 3, 1, 2]
    assert bracket_order(5) == [0, 3, 4, 1, 2]  # 8's order without seeds 6-8: 2 has a bye
    assert bracket_order(1) == [0]


def test_worked_example_single_elimination():
    # scores [0.5, 1.0, 0.0, 0.25]. Seeding against rollout 0: 0 scores 0.5 thrice (mean 0.5),
    # 1: 1.0, 2: 0.0, 3: 0.25 -> seeds 1, 0, 3, 2; bracket [0, 3, 1, 2] -> (1 v 2), (0 v 3);
    # 1 and 0 win, 1 wins the final. Ranking 1, 0, then round one's losers by mean score 3, 2;
    # rewards 1 - place / 3 = [2/3, 1, 0, 1/3].
    calls: list = []
    r = single_elimination_rewards(4, by_score([0.5, 1.0, 0.0, 0.25], calls))
    assert r == pytest.approx([2 / 3, 1.0, 0.0, 1 / 3])
    assert calls == [(1, 0), (2, 0), (3, 0), (1, 2), (0, 3), (1, 0)]  # 2 (N - 1) matches
    # mean 1/2, deviations [1/6, 1/2, -1/2, -1/6], sample std sqrt((2/36 + 1/2) / 3) = 0.430331
    assert_close(
        advantage(r), torch.tensor([0.38730, 1.16190, -1.16190, -0.38730]), atol=1e-4, rtol=0
    )
    assert abs(float(advantage(r).sum())) < 1e-6  # zero group mean


def test_worked_example_anchor():
    # scores against rollout 0: 0 -> mean(0.5, 0.5, 0.5) = 0.5, then 1.0, 0.0, 0.5; ranks with ties
    # sharing the best (pandas' method="min", descending): [2, 1, 4, 2]; (4 - rank) / 3
    calls: list = []
    assert anchor_rewards(4, by_score([0.5, 1.0, 0.0, 0.5], calls)) == pytest.approx(
        [2 / 3, 1.0, 0.0, 2 / 3]
    )
    assert calls == [(1, 0), (2, 0), (3, 0)]  # N - 1 matches
    assert anchor_rewards(3, by_score([0.0, 0.0, 0.0])) == [0.0, 0.0, 0.0]  # all tie: 0
    assert anchor_rewards(1, by_score([1.0])) == [0.0]


def test_a_pivot_scored_differently_in_each_match():
    # the anchor's seeding score is the mean of its scores against each entrant (the judge sees
    # both trajectories, so the anchor's score may change from match to match)
    table = {(1, 0): (1.0, 0.0), (2, 0): (0.0, 2.0), (3, 0): (0.5, 1.0)}
    r = anchor_rewards(4, lambda a, b: table[(a, b)])
    # scores [mean(0, 2, 1) = 1.0, 1.0, 0.0, 0.5] -> ranks [1, 1, 4, 3]
    assert r == pytest.approx([1.0, 1.0, 0.0, 1 / 3])


def test_ties_go_to_the_first_in_the_bracket_unless_shared():
    # all scores equal: seeds 0-3 in index order, bracket (0 v 3), (1 v 2); 0 and 1 advance on
    # ties, 0 wins the final; round one's losers keep their order: ranking 0, 1, 3, 2
    r = single_elimination_rewards(4, by_score([0.0] * 4))
    assert r == pytest.approx([1.0, 2 / 3, 0.0, 1 / 3])
    shared = share_equal(r, [0.0] * 4)
    assert shared == pytest.approx([0.5] * 4)
    assert advantage(shared).abs().max() == 0  # a group the judge cannot split learns nothing


def test_a_binary_outcome_with_shared_ties_is_grpo():
    outcome = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0]
    r = share_equal(single_elimination_rewards(8, by_score(outcome)), outcome)
    grpo = grpo_advantage(
        AdvantageInputs(torch.tensor(outcome), torch.zeros(8, dtype=torch.long)),
        cfg=GRPOAdvantageConfig(name="grpo"),
    )
    assert_close(advantage(r), grpo, atol=1e-4, rtol=0)


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_a_judge_preferring_longer_answers_ranks_by_length(n):
    # the methods page's bias test: a fixed judge that prefers the longer answer gives rewards
    # monotone in length (seeding sorts the entrants, and the top seeds meet only late) when the
    # group is a power of two
    lengths = [(7 * k + 3) % 17 for k in range(n)]
    r = single_elimination_rewards(n, by_score([float(x) for x in lengths]))
    order = sorted(range(n), key=lambda i: -lengths[i])
    assert [r[i] for i in order] == pytest.approx([1 - k / (n - 1) for k in range(n)])


def test_byes_follow_the_authors_bracket():
    # three entrants: the bracket of four without seed 4 pairs seeds 1 and 2 at once and gives
    # seed 3 the bye, so seed 3 reaches the final and places second (with a group that is not a
    # power of two the ranking is not monotone in the scores)
    assert single_elimination_rewards(3, by_score([3.0, 2.0, 1.0])) == pytest.approx([1, 0, 0.5])
    # the bye goes FIRST into the next round (the authors' run_tournament appends it while pairing,
    # before any result), so it is the first of its next match and takes a tie: of three equal
    # entrants 0 beats 1 on the tie, then the final is (2 v 0) and 2 wins it; ranking 2, 0, 1
    # (a bye placed last would make the final (0 v 2), won by 0: [1, 0, 0.5])
    calls: list = []
    r = single_elimination_rewards(3, by_score([0.0] * 3, calls))
    assert r == pytest.approx([0.5, 0.0, 1.0])
    assert calls[2:] == [(0, 1), (2, 0)]
    # five entrants, strongest first: bracket [0, 3, 4, 1, 2]; round one (0 v 3), (4 v 1), seed 2's
    # bye -> [2, 0, 1]; round two (2 v 0), seed 1's bye -> [1, 0]; the final (1 v 0). Ranking
    # 0, 1, 2, then round one's losers 3, 4 (a bye placed last: (0 v 1) in round two, 2 reaches
    # the final and places second)
    calls = []
    r = single_elimination_rewards(5, by_score([5.0, 4.0, 3.0, 2.0, 1.0], calls))
    assert r == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0])
    assert calls[4:] == [(0, 3), (4, 1), (2, 0), (1, 0)]
    # five equal entrants: (0 v 3) -> 0, (4 v 1) -> 4, bye 2 -> [2, 0, 4]; (2 v 0) -> 2, bye 4 ->
    # [4, 2]; (4 v 2) -> 4. Ranking 4, 2, 0, then 3, 1 (equal means keep their order)
    calls = []
    r = single_elimination_rewards(5, by_score([0.0] * 5, calls))
    assert r == pytest.approx([0.5, 0.0, 0.75, 0.25, 1.0])
    assert calls[4:] == [(0, 3), (4, 1), (2, 0), (4, 2)]


#: PLACES[n][i]: the place (0 the best) of rollout i in a group of n whose judge always prefers
#: the lower index (rollout i scores n - i in every match, so rollout i is seed i + 1 and the
#: losers of a round are ordered by index). Derived by hand-tracing the authors' code
#: (github.com/Alibaba-NLP/qqr, qqr/reward_models/arena/single_elimination.py, read 2026-12-01:
#: get_seeded_bracket, then run_tournament, where the bye of an odd round, the last entrant, is
#: appended to next_round_players before the round's winners, then determine_final_ranks) on the
#: bracket of 16, 0 15 7 8 3 12 4 11 1 14 6 9 2 13 5 10, with the seeds >= n left out; the same
#: table came out of the authors' class run unchanged with this judge. E.g. 7: bracket
#: [0, 3, 4, 1, 6, 2, 5]; (0 v 3), (4 v 1), (6 v 2), bye 5 -> [5, 0, 1, 2]; (5 v 0), (1 v 2) ->
#: [0, 1]; 0 wins. Ranking 0, 1, then 2, 5, then 3, 4, 6. A bye placed last differs at
#: 5, 7, 9, 10, 13, 14 and 15 (e.g. 7: [0, 2, 1, 4, 5, 3, 6]).
PLACES = {
    2: [0, 1],
    3: [0, 2, 1],
    4: [0, 1, 2, 3],
    5: [0, 1, 2, 3, 4],
    6: [0, 2, 1, 3, 4, 5],
    7: [0, 1, 2, 4, 5, 3, 6],
    8: [0, 1, 2, 3, 4, 5, 6, 7],
    9: [0, 1, 2, 3, 5, 4, 6, 7, 8],
    10: [0, 1, 2, 3, 5, 6, 4, 7, 8, 9],
    11: [0, 2, 1, 3, 6, 7, 4, 8, 9, 10, 5],
    12: [0, 2, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11],
    13: [0, 1, 2, 3, 4, 7, 5, 8, 9, 10, 6, 11, 12],
    14: [0, 1, 2, 4, 5, 3, 6, 7, 8, 9, 10, 11, 12, 13],
    15: [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 7, 11, 12, 13, 14],
    16: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
}


@pytest.mark.parametrize("n", sorted(PLACES))
def test_the_authors_bracket_for_every_group_size(n):
    r = single_elimination_rewards(n, by_score([float(n - i) for i in range(n)]))
    assert r == pytest.approx([1 - p / (n - 1) for p in PLACES[n]])


def test_a_group_of_one():
    assert single_elimination_rewards(1, by_score([1.0])) == [0.0]


def rollout(group: int, answer: str | None) -> Trajectory:
    return Trajectory(group, group, [1, 2, 3], [0, 1, 1], 1, answer=answer)


JAWS = [QAItem("q0", "Who directed Jaws?", ("Steven Spielberg",), None, 1, None, "t")]


def test_the_rule_judge_through_the_provider():
    trajs = [
        rollout(0, "Spielberg"),
        rollout(0, None),
        rollout(0, "Steven Spielberg"),
        rollout(0, "Boston"),
    ]
    batch = RolloutBatch.build(trajs, JAWS, pad_id=0)
    got = provide_inputs({"advantage": CFG}, InputContext(None, None, batch))["arena_rewards"]
    # F1 [2/3, -1 (no answer), 1, 0]: seeds 2, 0, 3, 1; (2 v 1), (0 v 3); the final 2 v 0;
    # ranking 2, 0, 3, 1
    assert got.tolist() == pytest.approx([2 / 3, 0.0, 1.0, 1 / 3])
    cfg = ArenaAdvantageConfig(name="arena", format="anchor")
    got = provide_inputs({"advantage": cfg}, InputContext(None, None, batch))["arena_rewards"]
    # scores [2/3, -1, 1, 0] -> ranks [2, 4, 1, 3] -> (4 - rank) / 3
    assert got.tolist() == pytest.approx([2 / 3, 0.0, 1.0, 1 / 3])


def test_the_policy_judge_runs_on_a_real_model(tiny_policy):  # noqa: F811
    model, tok = tiny_policy
    trajs = [
        rollout(0, "Spielberg"),
        rollout(0, "Boston"),
        rollout(0, "a film"),
        rollout(0, "Steven Spielberg"),
    ]
    batch = RolloutBatch.build(trajs, JAWS, pad_id=tok.pad_token_id)
    cfg = ArenaAdvantageConfig(name="arena", judge="policy")
    got = provide_inputs({"advantage": cfg}, InputContext(model, tok, batch))["arena_rewards"]
    # four places, whoever took them (the policy's scores are never shared)
    assert sorted(got.tolist()) == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0])


@pytest.mark.parametrize(("field", "value"), [("judge", "oracle"), ("format", "swiss")])
def test_an_unknown_choice_is_refused(field, value):
    cfg = ArenaAdvantageConfig(name="arena", **{field: value})
    assert [p.path for p in cfg.problems()] == [field]
