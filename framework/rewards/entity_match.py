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
