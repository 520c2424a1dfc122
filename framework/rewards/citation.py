"""CaRR-style citation-aware rubric reward: partial credit for the chain facts a rollout found and
can back with what its searches returned."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from framework.algorithms.rewards.shaping import entity_shaped_reward
from framework.config import Problem, check_choice, check_range, option
from framework.registry.kinds import REWARDS
from framework.rewards.chain import (
    ChainMatchingConfig,
    Entity,
    hidden_chains,
    require_observations,
)
from framework.rewards.common import answer_scores, answers, valid_mask
from framework.rewards.entity_match import EntityMatching, entities_found
from framework.rewards.text import extract_think, verdict_metrics
from framework.types import RewardInputs


@dataclass
class CitationRubricRewardConfig(ChainMatchingConfig):
    lam: float = option(0.3, "λ, the weight of the rubric score for wrong answers (CaRR's 0.3)")
    correctness: str = option("em", "what counts as a correct answer: em or substring")
    connected: bool = option(
        True, "count a fact only when every fact before it in the chain counts"
    )

    def problems(self) -> list[Problem]:
        out = super().problems()
        out += check_range(self.lam, "lam", low=0.0, high=1.0, fix="CaRR trains with 0.3")
        out += check_choice(self.correctness, "correctness", verdict_metrics())
        return out

    def verdict_metric(self) -> str | None:
        return self.correctness


def rubric_score(
    own_words: str,
    evidence: str,
    chain: Sequence[Entity],
    matching: EntityMatching,
    *,
    connected: bool = True,
) -> float:
    """The share of the chain's rubric facts that ``own_words`` states and ``evidence`` supports.

    Fact ``k`` is hop ``k`` of the chain, identified by its hidden entity ``e_k``. It holds when
    the rollout names ``e_k`` (a form of it occurs in ``own_words``) and the evidence it received
    holds ``e_k`` too. With ``connected``, a fact counts only when all facts before it hold (the
    evidence chain from the question is unbroken): the score is the longest held prefix.

    Args:
        own_words: the rollout's think text and final answer.
        evidence: everything its tool responses returned (retrieved text only).
        chain: the hidden chain, in hop order.
        matching: E-GRPO matching options.
        connected: count only the unbroken prefix.

    Returns:
        A score in [0, 1]; 0 for an empty chain.
    """
    if not chain:
        return 0.0
    named = entities_found(own_words, chain, matching)
    seen = entities_found(evidence, chain, matching)
    held = [a and b for a, b in zip(named, seen, strict=True)]
    prefix = next((k for k, h in enumerate(held) if not h), len(held))
    return (prefix if connected else sum(held)) / len(chain)


@REWARDS.register("citation_rubric", config=CitationRubricRewardConfig)
def citation_rubric_reward(inputs: RewardInputs, *, cfg: CitationRubricRewardConfig) -> Tensor:
    """CaRR-style rubric reward: 1 if correct, ``λ·score/max_g score`` if wrong, 0 if invalid.

    Citation-aware Rubric Rewards (Zhang et al. 2026, arXiv 2601.06021) split a question into
    single-hop rubric facts and credit a fact when the agent identifies its hidden entity,
    supports it with the evidence it cites, and connects it to the answer. Here the rubric is the
    question's chain (:mod:`framework.rewards.chain`): fact ``k`` is hop ``k`` with its hidden
    entity ``e_k`` (whose evidence document is chain document ``k``: its title heads any result
    or page from it). Our agent writes no citation marks, so "supported by what it cites" is:
    ``e_k`` occurs both in the rollout's own words (think text and final answer: identified) and
    in the retrieved text of its tool responses (``RewardInputs.observations``, its own queries
    blanked out: supported). Connected: the facts held form an unbroken chain from the anchor the
    question names (CaRR walks its rubric graph from the answer; a wrong rollout's answer connects
    to nothing, so the walk starts at the other end)::

        score_i = max{m : facts 1..m all hold for rollout i} / h     (connected=false: share held)
        R_i = 1                               if rollout i is correct
        R_i = λ · score_i / max_g score_j     if it is wrong (0 when the group's max is 0)
        R_i = 0                               on a format error or over budget

    The shaping is E-GRPO's (METHODS.md), which is the authors' ``--rubric-only-negative
    --normalize-rubric-reward`` setting; their headline C-GRPO run instead gives correct answers
    ``(1-λ) + λ·score`` and wrong ones 0. ``λ = 0.3`` as in their training scripts.

    Args:
        inputs: completions (or ``think_texts``), ``golden_answers``, ``entities`` (and
            ``question``) columns, ``observations``, optional statuses.
        cfg: λ, correctness, connectivity and matching options.

    Returns:
        ``[N]`` rewards in [0, 1].

    Raises:
        ValueError: the batch has no ``entities`` column or no observations.
    """
    chains = hidden_chains(inputs, cfg.matching(), "citation_rubric")
    observations = require_observations(inputs, "citation_rubric")
    thinks = inputs.think_texts or [extract_think(c) for c in inputs.completions]
    words = [f"{t}\n{a or ''}" for t, a in zip(thinks, answers(inputs), strict=True)]
    scores = torch.tensor(
        [
            rubric_score(w, "\n".join(o), c, cfg.matching(), connected=cfg.connected)
            for w, o, c in zip(words, observations, chains, strict=True)
        ],
        dtype=torch.get_default_dtype(),
    )
    correct = answer_scores(inputs, cfg.correctness, "citation_rubric") > 0.5
    return entity_shaped_reward(correct, scores, valid_mask(inputs), inputs.group_index, cfg.lam)
