"""E-GRPO's entity-aware reward (arXiv 2510.24694).

A wrong answer earns ``alpha * γ̂``: the share of the question's ground-truth entities that appear in
the rollout's own ``<think>`` text, max-normalised within its group. Entities that the question
itself names are left out of ``E_q`` unless ``skip_question_entities=false`` (see
:func:`hidden_entities`: the paper's questions name none, ours name their anchor). Matching follows METHODS.md:
only think text (never tool calls, observations or the answer) and substring match of the full
surface form. Normalisation is configurable: by default exact and case-sensitive as in the paper;
``lowercase`` and ``strip_punctuation`` relax it, and ``match=aliases`` also accepts any listed alias.
The matching itself lives in :mod:`framework.rewards.entity_match`, which the question synthesizer's
leak check shares.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.rewards.shaping import entity_shaped_reward
from framework.config import ComponentConfig, Problem, check_choice, check_range, option
from framework.registry.kinds import REWARDS
from framework.rewards.common import answer_scores, require_column, valid_mask
from framework.rewards.entity_match import (  # the matching the logged metrics share
    MATCH_CHOICES,
    EntityMatching,
    question_match_rates,
)
from framework.rewards.text import extract_think, verdict_metrics
from framework.types import RewardInputs


@dataclass
class EntityRewardConfig(ComponentConfig):
    #: the dataset must carry ground-truth entities (checked before training starts)
    needs_entities: ClassVar[bool] = True

    alpha: float = option(0.3, "weight of γ̂ for wrong answers (paper 0.3)")
    correctness: str = option("em", "what counts as a correct answer: em or substring")
    match: str = option("exact", "exact: the entity's surface form only; aliases: any listed alias")
    lowercase: bool = option(False, "case-insensitive entity matching")
    strip_punctuation: bool = option(False, "treat punctuation as spaces before matching")
    skip_question_entities: bool = option(
        True, "leave out of E_q the entities the question itself names"
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.alpha, "alpha", low=0.0, high=1.0, fix="the paper tests 0 to 0.5")
        out += check_choice(self.correctness, "correctness", verdict_metrics())
        out += check_choice(self.match, "match", MATCH_CHOICES)
        return out

    def verdict_metric(self) -> str | None:
        return self.correctness

    def entity_rule(self) -> EntityRewardConfig:
        return self  # it has the rule's matching() and skip_question_entities

    def matching(self) -> EntityMatching:
        """The matching options of this config, for :func:`entities_found`."""
        return EntityMatching.of(self.match, self.lowercase, self.strip_punctuation)


@REWARDS.register("e_grpo", config=EntityRewardConfig)
def entity_reward(inputs: RewardInputs, *, cfg: EntityRewardConfig) -> Tensor:
    """E-GRPO reward: 1 if correct, ``alpha * γ̂`` if wrong, 0 on format error / over budget.

    E-GRPO ("Repurposing Synthetic Data for Fine-grained Search Agent
    Supervision", arXiv 2510.24694)::

        r_i = 1                        if rollout i is correct
        r_i = alpha · γ_i / max_g γ_j  if it is wrong (0 when the group's max is 0)
        γ_i = |{e in E_q : e matched in rollout i's thinking}| / |E_q|

    Args:
        inputs: completions (or ``think_texts``), ``golden_answers`` and ``entities`` columns,
            ``group_index``, optional statuses.
        cfg: alpha and matching options.

    Returns:
        ``[N]`` rewards.

    Raises:
        ValueError: the batch has no ``entities`` column (the dataset was not built with them).
    """
    entities = require_column(
        inputs, "entities", "e_grpo", "E-GRPO rewards the ground-truth entities in the reasoning"
    )
    thinks = inputs.think_texts or [extract_think(c) for c in inputs.completions]
    rates = torch.tensor(
        question_match_rates(thinks, entities, inputs.columns.get("question"), cfg),
        dtype=torch.get_default_dtype(),
    )
    correct = answer_scores(inputs, cfg.correctness, "e_grpo") > 0.5
    return entity_shaped_reward(correct, rates, valid_mask(inputs), inputs.group_index, cfg.alpha)
