"""ArenaRL: tournament-based relative ranking (arXiv 2601.06487), partial: the group's rollouts
meet in pairwise matches, a seeded single-elimination tournament ranks them, and each rollout's
place in the ranking, normalised within the group, is its advantage.

The tournament and the reward follow the authors' code (github.com/Alibaba-NLP/qqr,
``qqr/reward_models/arena/single_elimination.py`` and ``anchor.py``, read 2026-11-26):

- a match between rollouts ``a`` and ``b`` gives each a score (the judge scores both orders and
  sums them); ``a`` wins when its score is at least ``b``'s;
- seeding (``format=single_elimination``, the paper's scheme): every rollout meets rollout 0 (the
  anchor); rollout 0's seeding score is the mean of its scores in those matches; the rollouts are
  sorted by their mean score (stable, highest first) and placed in the standard bracket order
  (seed 1 meets the lowest seed, seeds 1 and 2 can meet only in the final; for 8:
  1 8 4 5 2 7 3 6), where a missing entrant gives its opponent a bye;
- the tournament pairs neighbours of the bracket round by round; in a round of odd size the last
  one has a bye and goes FIRST into the next round, ahead of the winners in their pairing order
  (``SingleEliminationGroupRewardModel.run_tournament`` in ``single_elimination.py`` appends it
  to ``next_round_players`` while pairing, before any result); so it meets the first pair's
  winner next, as the first of that match (the one a tie favours). In a group that is not a power
  of two a bye can fall to a low seed: of three, seeds 1 and 2 meet at once and seed 3 reaches
  the final; of five, seed 3 has the bye and meets seed 1 in round two, while seed 2 has the bye
  of round two and meets seed 1 in the final (placing the bye last instead, as this module did
  until 2026-12-01, gives other rewards for groups of 5, 7, 9, 10, 13, 14 and 15);
- the ranking: the champion first, then the final's loser, then each earlier round's losers, the
  losers of one round ordered by the mean of all their scores (seeding included; stable);
- the reward of place ``k`` (0 the best) of ``N`` is ``1 - k / (N - 1)``; the advantage is that
  reward normalised in the group with the sample std, ``(r - mean) / (std + 1e-6)`` (the authors
  feed it to the trainer as is, with no further normalisation);
- ``format=anchor`` (the default of the authors' released configs): only the matches against
  rollout 0; places are ranked by score with ties sharing the best place (``rank(method="min")``),
  ``r = (max_rank - rank) / (max_rank - 1)``, 0 for everyone if all tie; then the same
  normalisation. ``2 (N - 1)`` judge calls per group for the tournament, ``N - 1`` for the anchor
  format.

What is ours, hence "partial" (the paper's method section was not readable here; the judge is the
paper's central ingredient and has no counterpart in this project):

- the judge. The authors' is an LLM (``qwen-plus``) with a rubric over the whole trajectory (0.6
  research path + 0.4 answer), run in both orders. Ours: ``rule`` scores each answer by its token
  F1 against the gold answers (a rollout without an answer scores -1, below any answer); ``policy``
  asks the policy itself which of two answers is better, the probability of " A" against " B"
  after a comparison prompt in both orders, summed (scores ``s`` and ``2 - s``);
- ties under the rule judge (``share_ties``, on by default): an F1 judge ties far more often than an
  LLM judge, and a tie goes to the rollout placed first in the bracket, so rollouts of equal F1
  would get different rewards from their bracket position alone (a group of eight wrong answers
  gets places 0-7). With ``share_ties`` the rollouts of equal rule score share the mean reward of
  their places, so such a group gets 0 and a binary-outcome group gets GRPO's advantage;
  ``share_ties=false`` keeps the authors' tie-breaking. The policy judge's scores are continuous
  and are never shared.

An earlier reconstruction (before 2026-11-26) used the rounds each rollout won as its score, seeded
the bracket in sampling order and normalised with the population std.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.advantages.grpo import GRPOAdvantageConfig, grpo_advantage
from framework.config import Problem, check_choice, option
from framework.registry import ADVANTAGES
from framework.types import AdvantageInputs

#: the pairwise judges of ``advantage=arena``
ARENA_JUDGES = ("rule", "policy")
#: the tournament formats of ``advantage=arena`` (the authors' code has three more)
ARENA_FORMATS = ("single_elimination", "anchor")

#: a match: the scores of entrants ``a`` and ``b`` (``a`` wins when its score is at least ``b``'s)
Match = Callable[[int, int], tuple[float, float]]


@dataclass
class ArenaAdvantageConfig(GRPOAdvantageConfig):
    requires: ClassVar[tuple[str, ...]] = ("arena_rewards",)
    paper: ClassVar[str] = "ArenaRL: tournament-based relative ranking, arXiv 2601.06487"
    fidelity: ClassVar[str] = "partial"

    judge: str = option(
        "rule", f"one of {ARENA_JUDGES}: answer F1 against gold, or the policy (choice)"
    )
    format: str = option(
        "single_elimination", f"one of {ARENA_FORMATS}: the seeded tournament, or only the anchor"
    )
    share_ties: bool = option(
        True, "rule judge: rollouts of equal F1 share the mean reward of their places"
    )

    def problems(self) -> list[Problem]:
        return (
            check_choice(self.judge, "judge", ARENA_JUDGES)
            + check_choice(self.format, "format", ARENA_FORMATS)
            + super().problems()
        )


def bracket_order(n: int) -> list[int]:
    """The standard seeded bracket of ``n`` entrants: seed ranks (0 the best) in the order the
    first round pairs them, neighbours meeting; built for the next power of two, and the seeds
    beyond ``n`` (byes) left out. ``bracket_order(8) == [0, 7, 3, 4, 1, 6, 2, 5]``."""
    order = [0]
    while len(order) < n:
        size = 2 * len(order)
        order = [x for i in order for x in (i, size - 1 - i)]
    return [i for i in order if i < n]


def anchor_rewards(n: int, match: Match) -> list[float]:
    """``format=anchor``: each entrant ``1 .. n-1`` meets entrant 0; entrant 0 scores the mean of
    its scores; ranks by score (ties share the best rank), ``r = (max_rank - rank) / (max_rank -
    1)``, all 0 when every score ties."""
    if n < 2:
        return [0.0] * n
    results = [match(i, 0) for i in range(1, n)]
    scores = [statistics.mean(s0 for _, s0 in results)] + [s for s, _ in results]
    ranks = [1 + sum(other > s for other in scores) for s in scores]
    top = max(ranks)
    return [0.0] * n if top == 1 else [(top - r) / (top - 1) for r in ranks]


def single_elimination_rewards(n: int, match: Match) -> list[float]:
    """``format=single_elimination``: anchor seeding, the seeded bracket, the ranking (champion,
    finalist, each earlier round's losers by their mean score) and ``1 - place / (n - 1)``
    (module docstring). In a round of odd size the last entrant has a bye and goes first into the
    next round, as in the authors' ``run_tournament`` (``single_elimination.py``)."""
    if n < 2:
        return [0.0] * n
    points: list[list[float]] = [[] for _ in range(n)]
    anchor_scores = []
    for i in range(1, n):
        s_i, s_0 = match(i, 0)
        points[i].append(s_i)
        anchor_scores.append(s_0)
    points[0].append(statistics.mean(anchor_scores))

    def mean_points(i: int) -> float:
        return statistics.mean(points[i])

    seeded = sorted(range(n), key=mean_points, reverse=True)  # stable: ties keep index order
    alive = [seeded[k] for k in bracket_order(n)]
    eliminated: list[list[int]] = []
    while len(alive) > 1:
        # an odd one out (the last of the round) has a bye and goes first into the next round,
        # ahead of the winners (the authors' ``run_tournament`` adds it while pairing, before any
        # result), so it meets the first pair's winner next, and wins there on a tie
        nxt: list[int] = [alive[-1]] if len(alive) % 2 else []
        losers: list[int] = []
        for k in range(0, len(alive) - 1, 2):
            a, b = alive[k], alive[k + 1]
            s_a, s_b = match(a, b)
            points[a].append(s_a)
            points[b].append(s_b)
            winner, loser = (a, b) if s_a >= s_b else (b, a)
            nxt.append(winner)
            losers.append(loser)
        eliminated.append(losers)
        alive = nxt
    ranking = alive + [
        i for losers in reversed(eliminated) for i in sorted(losers, key=mean_points, reverse=True)
    ]
    rewards = [0.0] * n
    for place, i in enumerate(ranking):
        rewards[i] = 1.0 - place / (n - 1)
    return rewards


def share_equal(rewards: Sequence[float], scores: Sequence[float]) -> list[float]:
    """Each entrant's reward replaced by the mean reward of the entrants with its score
    (``share_ties``)."""
    by_score: dict[float, list[float]] = {}
    for r, s in zip(rewards, scores, strict=True):
        by_score.setdefault(s, []).append(r)
    return [statistics.mean(by_score[s]) for s in scores]


@ADVANTAGES.register("arena", config=ArenaAdvantageConfig)
def arena_advantage(inputs: AdvantageInputs, *, cfg: ArenaAdvantageConfig) -> Tensor:
    """ArenaRL (partial; module docstring): each rollout's ranking reward from its group's
    tournament (the ``arena_rewards`` input), normalised within the group::

        r_i = 1 - place_i / (N - 1)          (single elimination; anchor: by rank)
        A_i = (r_i - mean_g r) / (std_g r + eps)

    Returns:
        ``[N]`` advantages (zero mean per group).
    """
    ranked = torch.as_tensor(inputs.extras["arena_rewards"], dtype=torch.float64)
    dtype = (
        inputs.rewards.dtype if inputs.rewards.is_floating_point() else torch.get_default_dtype()
    )
    return grpo_advantage(
        AdvantageInputs(ranked.to(inputs.rewards.device), inputs.group_index), cfg=cfg
    ).to(dtype)
