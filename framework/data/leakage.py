"""Held-out questions must not be learnable from the training data: the overlap check.

A held-out (validation, validation2 or test) question measures generalisation only when its
answer, and the steps that lead to it, were never shown in training. The splits of
``seekrl-synth`` are checked for each way a held-out question can leak into the training data:

* ``{split}_answer_in_train_chain``: the held-out answer is an entity (anchor, bridge or answer) of
  a train question's chain, or a whole-word part of one's name (``Ural`` in ``Ural Mountains``), so
  the SFT expert writes it and RL rewards reaching it;
* ``{split}_answer_in_train_question``: a train question's text names the held-out answer (in a clue
  it describes another entity, but the name is shown);
* ``{split}_link_in_train_chain``: a link of a held-out chain (two consecutive entities, in either
  order) is a link of a train chain, so training walks the held-out question's own step;
* ``{split}_answer_in_train_split``: a held-out answer is also the answer of a train question (the
  split by answer rules this out; counted in case a user's files break it).

Each count is the number of held-out questions with at least one leak of that kind (0 is required
to write the splits). :func:`trained_text_overlaps` applies the answer check to any other text that
is trained on (the SFT expert trajectories' model-written tokens).

Entities are compared by :func:`entity_key`: lower-cased, punctuation dropped, a trailing
``(qualifier)`` dropped, so ``Mercury (planet)`` and ``mercury`` are one entity. Text mentions are
whole-word matches of that key in the text normalised the same way.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from framework.data.entity_graph import strip_qualifier
from framework.data.schema import DatasetError, QAItem
from framework.rewards.entity_match import EntityMatching, normalize_for_matching

#: the held-out splits, each kept off the training data (validation2 only when synthesized)
HELD_OUT = ("validation", "test", "validation2")
KINDS = (
    "answer_in_train_chain",
    "answer_in_train_question",
    "link_in_train_chain",
    "answer_in_train_split",
)
#: lower-cased, punctuation as spaces: the E-GRPO reward's loosest text normalisation
_LOOSE = EntityMatching(lowercase=True, strip_punctuation=True)


class LeakError(DatasetError):
    """Held-out questions overlap the training data (the message lists the counts)."""


def normalize_words(text: str) -> tuple[str, ...]:
    """``"Jaws (film), 1975!"`` -> ``("jaws", "film", "1975")``."""
    return tuple(normalize_for_matching(text, _LOOSE).split())


def entity_key(name: str) -> str:
    """The name an entity is compared by: ``"Mercury (planet)"`` -> ``"mercury"``."""
    return " ".join(normalize_words(strip_qualifier(name)))


def answer_key(item: QAItem) -> str:
    """The key of a question's answer: its chain's last entity, else its first gold answer."""
    if item.entities:
        return entity_key(item.entities[-1][-1])
    return entity_key(item.golden_answers[0])


def chain_keys(item: QAItem) -> tuple[str, ...]:
    """The keys of a question's chain entities, anchor first (only the answer when unknown)."""
    if item.entities:
        return tuple(entity_key(forms[-1]) for forms in item.entities)
    return (answer_key(item),)


def links(keys: Sequence[str]) -> set[frozenset[str]]:
    """The links of a chain of entity keys, each an unordered pair of consecutive entities."""
    return {frozenset(p) for p in itertools.pairwise(keys) if p[0] != p[1]}


@dataclass
class HeldOut:
    """What training must not show: the answers and chain links of the held-out questions."""

    answers: set[str] = field(default_factory=set)  # answer keys of the held-out splits
    links: set[frozenset[str]] = field(default_factory=set)  # links of their chains
    longest: int = 1  # words of the longest answer key (for text matching)

    @classmethod
    def of(cls, splits: Mapping[str, Sequence[QAItem]]) -> HeldOut:
        items = [it for split in HELD_OUT for it in splits.get(split, ())]
        answers = {answer_key(it) for it in items} - {""}
        return cls(
            answers=answers,
            links=set().union(*(links(chain_keys(it)) for it in items)),
            longest=max((len(k.split()) for k in answers), default=1),
        )

    def mentioned(self, text: str) -> set[str]:
        """The held-out answer keys that ``text`` names as whole words."""
        words = normalize_words(text)
        found = set()
        for n in range(1, self.longest + 1):
            for i in range(len(words) - n + 1):
                gram = " ".join(words[i : i + n])
                if gram in self.answers:
                    found.add(gram)
        return found

    def train_walk_leak(self, keys: Sequence[str]) -> str | None:
        """Why a train chain of entity ``keys`` would leak a held-out question, or None."""
        if any(self.mentioned(k) for k in keys):
            return "answer_in_train_chain"
        if links(keys) & self.links:
            return "link_in_train_chain"
        return None


def split_overlaps(splits: Mapping[str, Sequence[QAItem]]) -> dict[str, int]:
    """Per kind and held-out split (``test_answer_in_train_chain``, ...): how many held-out
    questions leak into the train split in that way (see the module docstring). Only the held-out
    splits in ``splits`` are counted (validation2 exists only when it was synthesized)."""
    train = splits.get("train", ())
    train_entities: set[str] = set()
    train_links: set[frozenset[str]] = set()
    train_answers = {answer_key(it) for it in train}
    for it in train:
        keys = chain_keys(it)
        train_entities.update(keys)
        train_links |= links(keys)
    held = HeldOut.of(splits)
    mentioned: set[str] = set()
    for it in train:
        mentioned |= held.mentioned(it.question)
    in_chains: set[str] = set()  # held-out answers named by (or inside the name of) a chain entity
    for key in train_entities:
        in_chains |= held.mentioned(key)
    out: dict[str, int] = {}
    for split in (s for s in HELD_OUT if s in splits):
        counts: Counter = Counter()
        for it in splits.get(split, ()):
            key = answer_key(it)
            counts["answer_in_train_chain"] += key in in_chains
            counts["answer_in_train_question"] += key in mentioned
            counts["link_in_train_chain"] += bool(links(chain_keys(it)) & train_links)
            counts["answer_in_train_split"] += key in train_answers
        out.update({f"{split}_{kind}": counts[kind] for kind in KINDS})
    return out


def trained_text_overlaps(
    texts: Iterable[str], held_out: Mapping[str, Sequence[QAItem]]
) -> dict[str, int]:
    """Per held-out split: how many of its questions' answers the trained ``texts`` name."""
    held = HeldOut.of(held_out)
    named: set[str] = set()
    for text in texts:
        named |= held.mentioned(text)
    return {
        f"{split}_answer_in_trained_text": sum(answer_key(it) in named for it in held_out[split])
        for split in HELD_OUT
        if split in held_out
    }


def answer_repeats(items: Sequence[QAItem]) -> dict[str, int]:
    """``questions``, ``distinct_answers`` and ``max_repeats`` (questions of the commonest answer)."""
    counts = Counter(answer_key(it) for it in items)
    return {
        "questions": len(items),
        "distinct_answers": len(counts),
        "max_repeats": max(counts.values(), default=0),
    }


def refuse_leaks(overlaps: Mapping[str, int], where: str) -> None:
    """Raise :class:`LeakError` naming every non-zero overlap.

    Raises:
        LeakError: some count is not 0.
    """
    bad = {k: v for k, v in overlaps.items() if v}
    if bad:
        lines = ", ".join(f"{k}={v}" for k, v in sorted(bad.items()))
        raise LeakError(
            f"[{where}] got held-out questions that leak into the training data ({lines}); "
            "expected 0 of every kind (framework/data/leakage.py). Fix: synthesize the splits "
            "again with seekrl-synth (it keeps train chains off held-out answers and links), or "
            "remove the leaking train questions from your files."
        )
