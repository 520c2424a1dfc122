"""MatchTIR-style turn rewards: each search turn matched against the question's chain."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from framework.config import Problem, check_choice, option
from framework.registry.kinds import REWARDS
from framework.rewards.chain import (
    ChainMatchingConfig,
    hidden_chains,
    next_entity_surfaced,
    require_observations,
)
from framework.rewards.common import answer_scores, valid_mask
from framework.rewards.text import ANSWER_METRICS, verdict_of
from framework.types import RewardInputs, RewardOutput


@dataclass
class MatchTIRRewardConfig(ChainMatchingConfig):
    metric: str = option(
        "f1", f"the answer turn's reward, one of {tuple(ANSWER_METRICS)} (paper: f1)"
    )

    def problems(self) -> list[Problem]:
        return super().problems() + check_choice(self.metric, "metric", ANSWER_METRICS)

    def verdict_metric(self) -> str | None:
        return verdict_of(self.metric)


@REWARDS.register("matchtir", config=MatchTIRRewardConfig)
def matchtir_reward(inputs: RewardInputs, *, cfg: MatchTIRRewardConfig) -> RewardOutput:
    """MatchTIR turn rewards against the chain: a search turn earns 1 for surfacing the next hop.

    MatchTIR (Qu et al. 2026, arXiv 2601.10712) matches the agent's tool calls one-to-one to a gold
    trace and rewards each turn with its calls' match; the answer turn gets the answer's F1, and
    the trajectory's reward is the sum of its turn rewards (authors' ``compute_process_KM``, with
    no penalty for an unmatched call). Here the gold trace is the question's hidden chain
    ``e1 .. eh`` (:mod:`framework.rewards.chain`), and a turn's call matches hop ``k`` when its
    observation holds ``e_k``, the first chain entity no earlier observation held (exact string
    match, E-GRPO's options; binary, where the authors' similarity of tool names and arguments is
    graded)::

        r_(i,k) = 1[obs_(i,k) holds the next unfound chain entity] + 1[k = T_i - 1] · outcome_i
        R_i = Σ_k r_(i,k)      (outcome_i: the answer's score by cfg.metric, 0 if invalid)

    Returns a :class:`~framework.types.RewardOutput`: ``rewards`` = ``R_i`` and
    ``extras["turn_rewards"]`` = ``r`` ``[N, T]`` for ``advantage=matchtir``.

    Args:
        inputs: completions, ``golden_answers``, ``entities`` (and ``question``) columns,
            ``observations``, optional statuses.
        cfg: the answer metric and matching options.

    Raises:
        ValueError: the batch has no ``entities`` column or no observations.
    """
    chains = hidden_chains(inputs, cfg.matching(), "matchtir")
    observations = require_observations(inputs, "matchtir")
    outcome = answer_scores(inputs, cfg.metric, "matchtir") * valid_mask(inputs)  # [N]
    width = max([len(o) for o in observations] + [1])
    turns = torch.zeros((len(inputs), width), dtype=torch.get_default_dtype())  # [N, T]
    for i, (obs, chain) in enumerate(zip(observations, chains, strict=True)):
        if obs:
            turns[i, : len(obs)] = torch.tensor(next_entity_surfaced(obs, chain, cfg.matching()))
            turns[i, len(obs) - 1] += outcome[i]
    total = turns.sum(-1)
    no_turns = torch.tensor([not o for o in observations])
    total = torch.where(no_turns, outcome, total)  # a rollout without turns keeps its outcome
    return RewardOutput(total, {"turn_rewards": turns})
