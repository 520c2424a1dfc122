"""ArenaRL: tournament-based relative ranking (arXiv 2601.06487), reconstructed: instead of scoring
each rollout alone, let a pairwise judge play the group's rollouts off in a seeded single-
elimination bracket, and use the rounds each won as its reward, normalised within the group.

The method section could not be read from here (``../shared/METHODS-2.md`` item 6); our choices,
hence "reconstructed":

- the bracket seeds the rollouts in their group order (sampling makes it random) and pairs seed
  ``s`` with seed ``n + 1 - s`` each round (1 v 4, 2 v 3 for four); a group that is not a power of
  two gives its top seeds byes, which advance without counting as a win; ``N - 1`` judge calls per
  group of ``N`` (against ``N (N - 1) / 2`` for a round robin);
- the judge (the ``tournament_wins`` input, ``judge``): ``rule`` prefers the answer with the higher
  token F1 against the gold answers (a rollout without an answer loses; equal F1: the higher seed
  wins), for verifiable questions; ``policy`` asks the policy itself which of two answers is
  better (the log-probability of " A" against " B" after a comparison prompt, averaged over both
  orders to cancel position bias); the paper's rubric and anchor rollout are not recovered;
- the advantage is ``(wins - mean_g) / (std_g + eps)`` with the population std (the worked
  example's), 0 for a group of equal wins.

The authors' code was found afterwards (2026-11-26; github.com/Alibaba-NLP/qqr,
``qqr/reward_models/arena/single_elimination.py``, ``SingleEliminationGroupRewardModel``), and it
differs from the choices above in every step but the bracket's shape: each match is judged by an
LLM (``qwen-plus`` with a scoring rubric, 0.6 tool-use path + 0.4 answer, both orders summed),
which this project has no counterpart of; the rollouts are first seeded by a match of each against
rollout 0 (the "anchor"), then placed in standard bracket order; the reward is a full ranking
(champion, finalist, then each round's losers by their mean judge score), ``r = 1 - rank / (N - 1)``,
normalised with the sample std; and the released configs use the "anchor" format by default, not
the bracket. Matching it (score-returning matches, anchor seeding, the ranking) is left to a later
change; with our judges it could reach "partial", never "exact", so it stays "reconstructed".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.advantages import GRPOAdvantageConfig, grpo_advantage
from framework.config import Problem, check_choice
from framework.registry import ADVANTAGES
from framework.types import AdvantageInputs

#: the pairwise judges of ``advantage=arena``
ARENA_JUDGES = ("rule", "policy")


@dataclass
class ArenaAdvantageConfig(GRPOAdvantageConfig):
    requires: ClassVar[tuple[str, ...]] = ("tournament_wins",)
    paper: ClassVar[str] = "ArenaRL: tournament-based relative ranking, arXiv 2601.06487"
    fidelity: ClassVar[str] = "reconstructed"

    unbiased_std: bool = field(
        default=False, metadata={"help": "Bessel-corrected std; false: the population std"}
    )
    judge: str = field(
        default="rule",
        metadata={"help": f"one of {ARENA_JUDGES}: answer F1 against gold, or the policy (choice)"},
    )
    judge_batch_size: int = field(default=8, metadata={"help": "policy-judge prompts per pass"})

    def problems(self) -> list[Problem]:
        return check_choice(self.judge, "judge", ARENA_JUDGES) + super().problems()


def bracket_wins(n: int, beats: Callable[[int, int], bool]) -> list[int]:
    """Rounds won by each of ``n`` entrants of a seeded single-elimination bracket (seed order
    ``0 .. n-1``; module docstring). ``beats(a, b)``: entrant ``a`` beats ``b`` (``a`` the higher
    seed)."""
    wins = [0] * n
    alive = list(range(n))
    while len(alive) > 1:
        size = 1 << (len(alive) - 1).bit_length()  # the round as a power of two, with byes
        byes = size - len(alive)
        nxt = alive[:byes]  # the top seeds pass
        rest = alive[byes:]
        for k in range(len(rest) // 2):
            a, b = rest[k], rest[len(rest) - 1 - k]
            winner = a if beats(a, b) else b
            wins[winner] += 1
            nxt.append(winner)
        alive = sorted(nxt)  # re-seed: a lower index is a higher seed
    return wins


@ADVANTAGES.register("arena", config=ArenaAdvantageConfig)
def arena_advantage(inputs: AdvantageInputs, *, cfg: ArenaAdvantageConfig) -> Tensor:
    """ArenaRL (reconstructed; module docstring): each rollout's rounds won in its group's
    bracket, normalised within the group::

        w_i = rounds rollout i won (pairwise judge, seeded single elimination)
        A_i = (w_i - mean_g w) / (std_g w + eps)

    Returns:
        ``[N]`` advantages (zero mean per group).
    """
    wins = torch.as_tensor(inputs.extras["tournament_wins"], dtype=torch.float64)
    return grpo_advantage(
        AdvantageInputs(wins.to(inputs.rewards.device), inputs.group_index), cfg=cfg
    ).to(
        torch.get_default_dtype()
        if not inputs.rewards.is_floating_point()
        else inputs.rewards.dtype
    )
