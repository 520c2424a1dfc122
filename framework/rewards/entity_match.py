"""How E-GRPO decides that an entity occurs in a text: one function for the reward and the data.

The reward (:mod:`framework.rewards.entity`) asks it which ground-truth entities a rollout's think
text mentions; the question synthesizer (:mod:`framework.data.synthesis`) asks it whether a question
mentions an entity it must hide. Both use this module so they cannot drift apart: a question that
passes the leak check cannot earn γ for a hidden entity by being restated.

Matching is substring matching of a normalised surface form in a normalised text (METHODS.md): an
entity "Austria" occurs in "Austrian Empire". No torch here, so the data pipeline stays light.
"""

from __future__ import annotations

import itertools
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

_PUNCT = str.maketrans(string.punctuation, " " * len(string.punctuation))


@dataclass(frozen=True)
class EntityMatching:
    """The reward's matching options (``reward.match/lowercase/strip_punctuation``).

    Attributes:
        aliases: any listed form counts, not only the first (the surface form).
        lowercase: compare case-insensitively.
        strip_punctuation: treat punctuation as spaces and collapse runs of whitespace.
    """

    aliases: bool = False
    lowercase: bool = False
    strip_punctuation: bool = False

    @classmethod
    def of(cls, match: str, lowercase: bool, strip_punctuation: bool) -> EntityMatching:
        """The options a reward config's ``match`` (one of :data:`MATCH_CHOICES`),
        ``lowercase`` and ``strip_punctuation`` fields select."""
        return cls(
            aliases=match == "aliases", lowercase=lowercase, strip_punctuation=strip_punctuation
        )


#: the values of a reward config's ``match``: the surface form only, or any listed form
MATCH_CHOICES = ("exact", "aliases")

#: Every combination of options a user can select for the reward. ``reward=e_grpo_robust`` (all on)
#: finds nearly everything the others find, but not all: lowercasing is context-sensitive (Greek
#: final sigma), so "found under any" is taken over all of them rather than over the loosest.
SELECTABLE: tuple[EntityMatching, ...] = tuple(
    EntityMatching(aliases=a, lowercase=low, strip_punctuation=strip)
    for a, low, strip in itertools.product((False, True), repeat=3)
)


def normalize_for_matching(text: str, matching: EntityMatching) -> str:
    """``text`` as the matcher sees it: lowercased and/or with punctuation as single spaces."""
    if matching.lowercase:
        text = text.lower()
    if matching.strip_punctuation:
        text = " ".join(text.translate(_PUNCT).split())
    return text


def entities_found(
    text: str, entities: Sequence[Sequence[str] | str], matching: EntityMatching
) -> list[bool]:
    """Per entity: does one of its forms occur in ``text`` as a substring (after normalisation)?

    Args:
        text: the text searched (a think text, or a question).
        entities: per entity its surface form, optionally followed by aliases (a bare string is an
            entity without aliases).
        matching: which forms count and how both sides are normalised.

    Returns:
        One flag per entity, in order. A form that normalises to the empty string never matches.
    """
    haystack = normalize_for_matching(text, matching)
    flags = []
    for entity in entities:
        forms = [entity] if isinstance(entity, str) else list(entity)
        forms = forms if matching.aliases else forms[:1]
        needles = (normalize_for_matching(f, matching) for f in forms)
        flags.append(any(n in haystack for n in needles if n))
    return flags


def entities_found_by_any(
    text: str,
    entities: Sequence[Sequence[str] | str],
    matchings: Sequence[EntityMatching] = SELECTABLE,
) -> list[bool]:
    """Per entity: would any of ``matchings`` (default: every reward setting) find it in ``text``?

    The leak check of synthesized questions: a question may not give away an entity it hides under
    whichever setting the reward is later trained with (the dataset is built before that choice).

    Args:
        text: the text searched.
        entities: as for :func:`entities_found`.
        matchings: the settings to try.

    Returns:
        One flag per entity, in order.
    """
    flags = [False] * len(entities)
    for matching in matchings:
        found = entities_found(text, entities, matching)
        flags = [a or b for a, b in zip(flags, found, strict=True)]
    return flags


class RulesEntities(Protocol):
    """How a question's entities are matched in a text: an :class:`EntityRule`, or the config of a
    reward that matches entities (E-GRPO's), which has the same two members."""

    @property
    def skip_question_entities(self) -> bool: ...

    def matching(self) -> EntityMatching: ...


@dataclass(frozen=True)
class EntityRule:
    """An entity-matching rule that no reward config carries: by default E-GRPO's (the surface form
    only, case-sensitive, the question's own entities left out of ``E_q``), which the logged
    entity figures use when the trained reward matches no entities."""

    aliases: bool = False
    lowercase: bool = False
    strip_punctuation: bool = False
    skip_question_entities: bool = True

    def matching(self) -> EntityMatching:
        return EntityMatching(self.aliases, self.lowercase, self.strip_punctuation)


def entity_match_rate(
    think: str, entities: Sequence[Sequence[str] | str], cfg: RulesEntities
) -> float:
    """``γ = |found| / |E_q|``: the share of entities whose surface form occurs in ``think``.

    Args:
        think: the rollout's concatenated think text.
        entities: per entity its surface form, optionally followed by aliases (a bare string is an
            entity without aliases).
        cfg: the matching rule.

    Returns:
        A rate in [0, 1]; 0 for an empty entity list.
    """
    if not entities:
        return 0.0
    return sum(entities_found(think, entities, cfg.matching())) / len(entities)


def hidden_entities(
    question: str, entities: Sequence[Sequence[str] | str], cfg: RulesEntities
) -> list[Sequence[str] | str]:
    """The entities that ``question`` does not name itself, under the reward's own matching.

    The paper's questions are obfuscated and name none of their entities; a synthesized question
    here names its anchor ("... the Wikipedia article about Anna Pavlova ..."). Counting an entity
    the question names would pay a wrong rollout for copying the question into its reasoning, so
    with ``skip_question_entities`` (the default) ``E_q`` holds only the entities the agent has to
    find (bridges and the answer). A question that names every entity leaves ``E_q`` empty: its
    wrong rollouts earn 0, as in GRPO.
    """
    named = entities_found(question, entities, cfg.matching())
    return [e for e, n in zip(entities, named, strict=True) if not n]


def question_match_rates(
    thinks: Sequence[str],
    entities: Sequence[Sequence[Sequence[str] | str]],
    questions: Sequence[str] | None,
    cfg: RulesEntities,
) -> list[float]:
    """Per rollout ``γ_i`` over its question's ``E_q``: every entity, or only those the question
    does not name itself (:func:`hidden_entities`) under ``skip_question_entities`` when the
    questions are known."""
    if cfg.skip_question_entities and questions is not None:
        entities = [hidden_entities(q, e, cfg) for q, e in zip(questions, entities, strict=True)]
    return [entity_match_rate(t, e, cfg) for t, e in zip(thinks, entities, strict=True)]
