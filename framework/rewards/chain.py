"""The question's chain as a gold trace: its hidden entities, in hop order, against what a rollout
saw and wrote.

A synthesized question is a walk ``e0 -> e1 -> ... -> eh`` over the entity graph
(:mod:`framework.data.synthesis`): the question names the anchor ``e0``, and reading the chain
forward (``e0``'s article mentions ``e1``, whose article mentions ``e2``, ...) answers it with
``eh``. Its ``entities`` column lists the walk's nodes in that order, each with its forms (the
name, then the full article title), and its ``chain`` column the walk's documents; the title of
document ``k`` is the last form of entity ``k``, which is how a search result or a visited page
from that document is headed in an observation. The *hidden chain* is the entities the question
does not name itself (E-GRPO's ``E_q``: for a synthesized question ``e1 .. eh``), in the dataset's
order; the agent has to find them one hop after the other.

Both turn-level chain rewards (``matchtir``, ``citation_rubric``) match with E-GRPO's matcher
(:mod:`framework.rewards.entity_match`) and options, on the evidence the tools returned
(:attr:`~framework.types.RewardInputs.observations`: retrieved text only, the model's own queries
blanked out) and on the rollout's own words (its think text and final answer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from framework.config import ComponentConfig, Problem, check_choice, option
from framework.rewards.common import require_column
from framework.rewards.entity_match import MATCH_CHOICES, EntityMatching, entities_found
from framework.types import RewardInputs

Entity = Sequence[str] | str


@dataclass
class ChainMatchingConfig(ComponentConfig):
    """Matching options shared by the chain rewards (E-GRPO's, with the same defaults)."""

    #: the dataset must carry ground-truth entities (checked before training starts)
    needs_entities: ClassVar[bool] = True

    match: str = option("exact", "exact: the entity's surface form only; aliases: any listed form")
    lowercase: bool = option(False, "case-insensitive entity matching")
    strip_punctuation: bool = option(False, "treat punctuation as spaces before matching")

    def problems(self) -> list[Problem]:
        return check_choice(self.match, "match", MATCH_CHOICES)

    def matching(self) -> EntityMatching:
        """The matching options of this config, for :func:`entities_found`."""
        return EntityMatching.of(self.match, self.lowercase, self.strip_punctuation)


def hidden_chains(
    inputs: RewardInputs, matching: EntityMatching, reward: str
) -> list[list[Entity]]:
    """Per rollout its question's hidden chain: the ``entities`` the question does not name, in the
    dataset's order (hop order for synthesized questions).

    Raises:
        ValueError: the batch has no ``entities`` column.
    """
    entities = require_column(
        inputs, "entities", reward, "the question's chain of entities is the gold trace"
    )
    questions = inputs.columns.get("question") or [""] * len(inputs)
    out = []
    for question, chain in zip(questions, entities, strict=True):
        named = entities_found(question, chain, matching)
        out.append([e for e, n in zip(chain, named, strict=True) if not n])
    return out


def require_observations(inputs: RewardInputs, reward: str) -> Sequence[Sequence[str]]:
    """``inputs.observations``, one list of per-turn evidence per rollout.

    Raises:
        ValueError: the batch carries none, or not one per rollout.
    """
    obs = inputs.observations
    if obs is None or len(obs) != len(inputs):
        got = "none" if obs is None else f"{len(obs)} for {len(inputs)} rollouts"
        raise ValueError(
            f"[reward.{reward}] got observations: {got}; expected per rollout the evidence of each "
            "turn, because this reward reads what the searches returned. Fix: build the batch "
            "with framework.rollout.scoring.reward_inputs (it reads them from the trajectories)."
        )
    return obs


def next_entity_surfaced(
    observations: Sequence[str], chain: Sequence[Entity], matching: EntityMatching
) -> list[float]:
    """Per turn 1.0 when its observation surfaced the next chain entity not found yet, else 0.0.

    Walking the turns in order, the *next* entity is the first of ``chain`` that no earlier
    observation held; a turn scores when its observation holds that one. Every chain entity an
    observation holds counts as found from then on, so an entity is credited to one turn at most
    and a turn to one entity at most (a one-to-one matching of turns to the gold trace's hops).

    Args:
        observations: per turn the evidence its tool response showed (``""``: none).
        chain: the hidden chain, in hop order.
        matching: E-GRPO matching options.

    Returns:
        One float per turn.
    """
    found = [False] * len(chain)
    out = []
    for text in observations:
        held = entities_found(text, chain, matching) if text else [False] * len(chain)
        nxt = next((k for k, f in enumerate(found) if not f), None)
        out.append(1.0 if nxt is not None and held[nxt] else 0.0)
        found = [a or b for a, b in zip(found, held, strict=True)]
    return out
