"""Multi-hop questions from random walks over the entity graph (WebSailor / ASearcher style).

A walk ``e0 -> e1 -> ... -> eh`` becomes a question that names the anchor ``e0`` and describes every
later entity only by a clue (its one-line description, or the predicate of its first sentence),
optionally fuzzed (years become decades). Reading the chain forward answers it: the article on
``e0`` mentions an entity fitting clue 1, whose article mentions one fitting clue 2, and so on; the
answer is ``eh``. A walk is kept only when every step is unique (no other article linked from the
previous one has the same clue), the question gives none of the hidden entities away (see
:meth:`QuestionSynthesizer.item`), and no bridge or answer is a hub. The ground-truth entities are
the walk's nodes with their aliases.

Splits are decided by a salted hash of the answer, so train, validation and test share no answer.
That alone does not keep a held-out question out of training: a test answer can be a bridge of a
train chain, and a test chain's link can be walked by a train question. So the held-out splits are
drawn first, and a train walk is then refused when any of its entities is a held-out answer, when it
walks a held-out link (either way), or when its question names a held-out answer
(:mod:`framework.data.leakage` counts each kind on the written splits, and 0 is required). Held-out
answers are capped at ``max_answer_repeats`` questions each, so that questions are close to
independent. Quotas per (split, hops) give the configured hop mix: random walks fill them, and what
random walks leave open is filled by searching every walk, so a quota stays short only when the
corpus has no further valid walk for it (``stats.search`` says which).

A fourth held-out split, ``validation2``, is optional (off unless it has a size): answers the main
salt puts in train are hashed again with a second salt, and a share of them becomes validation2's
(:meth:`QuestionSynthesizer.split_of_answer`). Validation and test keep the answers, and so the
questions, they have without it; validation2 is drawn after them and before train, and train walks
are kept off its answers and links like theirs.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from framework.data.entity_graph import Article, EntityGraph, aliases, strip_qualifier
from framework.data.leakage import HELD_OUT, HeldOut, entity_key
from framework.data.schema import QAItem
from framework.progress import Progress
from framework.rewards.entity_match import entities_found_by_any

#: the main partition of answers, by the salted hash (:func:`split_of`)
SPLITS = ("train", "validation", "test")
#: the optional second validation split, carved out of train's answers by a second salt
VALIDATION2 = "validation2"
#: every split a synthesized dataset can have, in the order they are written
ALL_SPLITS = (*SPLITS, VALIDATION2)
_PAREN = re.compile(r"\s*\([^()]*\)")
_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})\b")
_PREDICATE = re.compile(
    r"^[^.]*?\b(?:is|was|are|were)\s+(?:an?|the)\s+(?P<pred>[^.;:]+)", re.IGNORECASE
)
_CUT = re.compile(
    r",| (?:that|which|who|whose|where|and is|and was|known|located|based|made|set|written|"
    r"directed|composed|created|produced|founded|developed|published|released|born)\b"
)
_HEAD_CUT = re.compile(
    r" (?:by|of|from|in|for|on|with|about|at|between|during|featuring|that|who|which|where)\b"
)


class SynthesisError(RuntimeError):
    """The corpus cannot supply the requested questions."""


@dataclass(frozen=True)
class Clue:
    """How the question refers to an entity it does not name."""

    text: str  # "1975 film by Steven Spielberg"
    head: str  # "film": what "that ..." refers back to


def clean_description(text: str) -> str:
    """Drop parentheticals, surrounding space and a final period."""
    text = re.sub(r"\s+", " ", _PAREN.sub("", text or "")).strip()
    if text.endswith(".") and not re.search(r"\b\w\.\w\.$", text):  # keep "D.C."
        text = text[:-1]
    return text.strip()


def first_sentence_predicate(text: str) -> str | None:
    """``"Jaws is a 1975 American thriller film directed by ..."`` -> ``"1975 American thriller film"``."""
    m = _PREDICATE.match(_PAREN.sub("", text))
    if not m:
        return None
    pred = _CUT.split(m["pred"], maxsplit=1)[0].strip()
    return pred if 1 <= len(pred.split()) <= 8 else None


_NOT_HEAD = {
    "north",
    "south",
    "east",
    "west",
    "northwest",
    "northeast",
    "southwest",
    "southeast",
    "central",
    "near",
    "also",
    "mainly",
    "primarily",
    "often",
    "usually",
}


def head_noun(clue: str) -> str:
    """The word a later sentence uses to point back: ``"opera by Georges Bizet"`` -> ``"opera"``.

    The last word before the first preposition or relative clause, skipping trailing participles
    and directions (``"church based in Rome"`` -> ``"church"``, ``"island northwest of ..."`` ->
    ``"island"``).
    """
    words = [w.strip(",;") for w in _HEAD_CUT.split(clue, maxsplit=1)[0].split()]
    words = [w for w in words if w[:1].isalpha()]
    while len(words) > 1 and (words[-1].lower() in _NOT_HEAD or words[-1].endswith("ed")):
        words.pop()
    return words[-1] if words else "one"


def make_clue(article: Article, is_common_word: Callable[[str], bool]) -> Clue | None:
    """The article's clue, or None when it has none or the clue would give its name away."""
    text = clean_description(article.description or "") or first_sentence_predicate(article.text)
    if not text or len(text) < 3:
        return None
    lowered = text.lower()
    if any(a.lower() in lowered for a in aliases(article.title)):
        return None
    first, _, rest = text.partition(" ")
    if first[:1].isupper() and is_common_word(first):
        text = first.lower() + (" " + rest if rest else "")
    head = head_noun(text)
    if head[:1].isupper() and is_common_word(head):
        head = head.lower()
    return Clue(text, head)


def entity_forms(title: str) -> tuple[str, ...]:
    """An entity's surface form, then its aliases: the natural name first (``Jaws``), the full
    title after it (``Jaws (film)``), because E-GRPO's exact mode matches the first form and a
    reasoning trace writes names, not disambiguated titles."""
    return tuple(reversed(aliases(title)))


def nameable(title: str) -> bool:
    """A title a question can name: at least three characters, with letters (not ``1`` or ``1984``)."""
    return len(title) >= 3 and sum(c.isalpha() for c in title) >= 2


def fuzz(clue: Clue) -> Clue:
    """ASearcher-style fuzzing: exact years become decades (``1975`` -> ``1970s``)."""
    text = _YEAR.sub(lambda m: f"{m.group(0)[:3]}0s", clue.text)
    return Clue(text, clue.head)


def with_article(phrase: str) -> str:
    """``"opera"`` -> ``"an opera"``, ``"European movement"`` -> ``"a European movement"``.

    A phrase that starts with a possessive (``"Earth's southernmost continent"``) takes none.
    """
    first = phrase.split(" ", 1)[0]
    if first.endswith(("'s", "’s")):
        return phrase
    low = phrase.lower()
    sounds_like_you = low.startswith(
        ("eu", "uni", "use", "usu", "uti", "one", "once", "ukr", "ura", "u.")
    )
    vowel = (low[:1] in "aeiou" and not sounds_like_you) or low.startswith(
        ("8", "11", "18", "hour", "honest")
    )
    return f"{'an' if vowel else 'a'} {phrase}"


ONE_HOP = (
    "Which {c} is mentioned in the Wikipedia article about {a}?",
    "The Wikipedia article on {a} mentions {ac}. What is its name?",
    "Name the {c} that the Wikipedia article about {a} refers to.",
)
OPENING = (
    "The Wikipedia article on {a} mentions {ac}.",
    "Start from the Wikipedia article about {a}: it mentions {ac}.",
)
MIDDLE = (
    "The article on that {h} mentions {ac}.",
    "That {h}'s article in turn mentions {ac}.",
)
CLOSING = (
    "Which {c} is mentioned in the article on that {h}?",
    "What is the name of the {c} that the article on that {h} mentions?",
)


def render_question(anchor: str, clues: Sequence[Clue], rng: random.Random) -> tuple[str, str]:
    """The question text and the template id for an anchor name and the clues of e1..eh."""
    if len(clues) == 1:
        k = rng.randrange(len(ONE_HOP))
        c = clues[0].text
        return ONE_HOP[k].format(a=anchor, c=c, ac=with_article(c)), f"1hop-{k}"
    o, m, c_ = rng.randrange(len(OPENING)), rng.randrange(len(MIDDLE)), rng.randrange(len(CLOSING))
    parts = [OPENING[o].format(a=anchor, ac=with_article(clues[0].text))]
    for prev, cur in itertools.pairwise(clues[:-1]):
        parts.append(MIDDLE[m].format(h=prev.head, ac=with_article(cur.text)))
    parts.append(CLOSING[c_].format(c=clues[-1].text, h=clues[-2].head))
    return " ".join(parts), f"chain-{o}{m}{c_}"


def split_of(
    answer: str, seed: int | str, weights: Sequence[float], names: Sequence[str] = SPLITS
) -> str:
    """The split an answer belongs to, by a seeded hash (stable across runs and machines); ``seed``
    may carry a salt (``"0:leakfree-1"``) that draws another partition. ``weights`` are those of
    ``names``, in order."""
    h = hashlib.blake2b(f"{seed}:{answer}".encode(), digest_size=8).digest()
    u = int.from_bytes(h, "big") / 2**64
    total = sum(weights)
    acc = 0.0
    for name, w in zip(names, weights, strict=True):
        acc += w / total
        if u < acc:
            return name
    return names[-1]


@dataclass
class SynthesisStats:
    """What happened while sampling (for the quality report)."""

    attempts: int = 0
    rejections: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)
    #: prefixes expanded by the exhaustive search (after random walks ran out of attempts)
    search_steps: int = 0
    #: (split, hops) -> how the last exhaustive search for an open quota ended: "exhausted" (every
    #: valid walk was tried) or "cut" (it stopped at its step budget)
    search: dict[tuple[str, int], str] = field(default_factory=dict)


class QuestionSynthesizer:
    """Samples walks and turns the valid ones into :class:`QAItem` s.

    Args:
        graph: the entity graph.
        seed: everything (walks, templates, fuzzing, split hashing) follows from it.
        fuzz_prob: chance that a clue's years are fuzzed to decades.
        split_salt: mixed into the answer -> split hash; another salt draws another partition
            (a fresh test split), "" keeps the unsalted partition of earlier versions.
        max_answer_repeats: held-out questions per answer at most (0 = no cap).
        validation2_salt: the second salt, which carves validation2's answers out of train's
            (used only when ``generate`` is given a validation2 weight).

    Attributes:
        held_out: once set (after the held-out splits are drawn), train walks that would leak one
            of them are refused (see the module docstring).
    """

    def __init__(
        self,
        graph: EntityGraph,
        *,
        seed: int,
        fuzz_prob: float,
        split_salt: str = "",
        max_answer_repeats: int = 0,
        validation2_salt: str = "",
    ) -> None:
        self.graph = graph
        self.seed = seed
        self.split_seed: int | str = f"{seed}:{split_salt}" if split_salt else seed
        # its own namespace ("v2"), so that no salt makes the second hash repeat the first
        self.validation2_seed = f"{seed}:{split_salt}:v2:{validation2_salt}"
        self.max_answer_repeats = max_answer_repeats
        self.held_out: HeldOut | None = None
        self.answer_counts: Counter = Counter()  # (split, answer key) -> questions kept
        self.fuzz_prob = fuzz_prob
        self.rng = random.Random(seed)
        indeg = graph.in_degree()
        self.clues = {
            d: c
            for d, a in sorted(graph.articles.items())
            if (c := make_clue(a, graph.is_common_word))
        }
        self.eligible = {d for d in self.clues if not graph.is_hub(d, indeg)}
        self.anchors = sorted(
            d
            for d, a in graph.articles.items()
            if nameable(a.title) and any(b in self.eligible for b in graph.out(d))
        )
        self.stats = SynthesisStats()
        self.seen: set[tuple[str, ...]] = set()
        #: whether the last :meth:`search` stopped at its step budget before trying every walk
        self.search_cut = False

    def sample(self, hops: int) -> tuple[list[str], list[Clue]] | None:
        """One walk of ``hops`` edges with its (possibly fuzzed) clues, or None (reason counted)."""
        self.stats.attempts += 1
        if not self.anchors:
            self.stats.rejections["no_anchor"] += 1
            return None
        walk = [self.rng.choice(self.anchors)]
        clues: list[Clue] = []
        for _ in range(hops):
            options = self._options(walk)
            if not options:
                self.stats.rejections["dead_end"] += 1
                return None
            nxt = self.rng.choice(options)
            clue = self._step_clue(walk[-1], nxt)
            if clue is None:
                self.stats.rejections["answer_not_unique"] += 1
                return None
            walk.append(nxt)
            clues.append(clue)
        return walk, clues

    def _options(self, walk: list[str]) -> list[str]:
        """Where a walk can go next: eligible articles linked from its end that it has not visited."""
        return sorted(b for b in self.graph.out(walk[-1]) if b in self.eligible and b not in walk)

    def _step_clue(self, prev: str, nxt: str, fuzzed: bool | None = None) -> Clue | None:
        """The clue of the step ``prev -> nxt`` (fuzzed by chance unless ``fuzzed`` says), or None
        when another article linked from ``prev`` has the same clue (the step would not be unique)."""
        if fuzzed is None:
            fuzzed = self.rng.random() < self.fuzz_prob
        clue = fuzz(self.clues[nxt]) if fuzzed else self.clues[nxt]
        rivals = (
            b
            for b in self.graph.out(prev)
            if b != nxt
            and b in self.clues
            and (fuzz(self.clues[b]) if fuzzed else self.clues[b]).text == clue.text
        )
        return None if any(rivals) else clue

    def search(self, hops: int, max_steps: int) -> Iterator[tuple[list[str], list[Clue]]]:
        """Every valid walk of ``hops`` edges not produced yet, depth first in a seeded order.

        Unlike :meth:`sample`, it cannot miss a walk that exists: when it runs to the end, no other
        walk of this length is left. It stops after expanding ``max_steps`` prefixes (counted in
        ``stats.search_steps``); :attr:`search_cut` then says it did not finish.
        """
        self.search_cut = False
        anchors = list(self.anchors)
        self.rng.shuffle(anchors)
        stack: list[tuple[list[str], list[Clue]]] = [([a], []) for a in reversed(anchors)]
        steps = 0
        while stack:
            walk, clues = stack.pop()
            if len(walk) == hops + 1:
                if tuple(walk) not in self.seen:
                    yield walk, clues
                continue
            if steps == max_steps:
                self.search_cut = True
                return
            steps += 1
            self.stats.search_steps += 1
            options = self._options(walk)
            self.rng.shuffle(options)
            for nxt in reversed(options):
                # fuzzing only merges clues, so a step that is ambiguous fuzzed may be unique plain;
                # trying it plain keeps the search complete
                clue = self._step_clue(walk[-1], nxt) or self._step_clue(walk[-1], nxt, False)
                if clue is not None:
                    stack.append(([*walk, nxt], [*clues, clue]))

    def item(self, walk: list[str], clues: list[Clue], split: str, index: int) -> QAItem | None:
        """The question for a sampled walk, or None when it gives a hidden entity away.

        The anchor ``e0`` is named on purpose; every later node (the bridges and the answer) is
        hidden. A hidden entity leaks when E-GRPO's reward would find it in the question under any
        setting a user can select (surface form or any alias; with or without lowercasing and
        punctuation stripping): one of its forms is a substring of the question, even inside
        another word ("Austria" in "Austrian Empire"). The check calls the reward's own matcher
        (:func:`~framework.rewards.entity_match.entities_found_by_any`), so restating a kept
        question never earns γ for an entity it hides, whatever the reward's settings.
        """
        anchor = self.graph.articles[walk[0]].title
        question, template = render_question(anchor, clues, self.rng)
        entities = tuple(entity_forms(self.graph.articles[d].title) for d in walk)
        if any(entities_found_by_any(question, entities[1:])):
            self.stats.rejections["name_leak"] += 1
            return None
        answer = self.graph.articles[walk[-1]]
        mentions = [self.graph.out(a)[b] for a, b in itertools.pairwise(walk)]
        return QAItem(
            id=f"seekrl-synth-{split}-{index:06d}",
            question=question,
            golden_answers=aliases(answer.title),
            entities=entities,
            hops=len(walk) - 1,
            chain=tuple(walk),
            data_source="seekrl_synth",
            extra={"template": template, "clues": [c.text for c in clues], "mentions": mentions},
        )

    def generate(
        self,
        quotas: dict[str, dict[int, int]],
        split_weights: Sequence[float],
        *,
        max_attempts: int,
        max_search_steps: int | None = None,
        progress: bool,
    ) -> dict[str, list[QAItem]]:
        """New questions filling ``quotas`` (split -> hops -> count) as far as the corpus allows.

        Random walks come first (at most ``max_attempts``); what they leave open is filled by
        :meth:`search` (at most ``max_search_steps`` expanded prefixes per hop count, default
        ``max_attempts``), which records in ``stats.search`` whether each quota it leaves open ran
        out of walks or of budget. ``split_weights`` (train, validation, test, and optionally
        validation2) decide which split each answer belongs to (:meth:`split_of_answer`); walks
        already produced by this synthesizer are never repeated.
        """
        left = {s: dict(q) for s, q in quotas.items()}
        out: dict[str, list[QAItem]] = {s: [] for s in quotas}
        budget = self.stats.attempts + max_attempts
        with Progress("synth", _open(left), "question", enabled=progress) as bar:
            while self.stats.attempts < budget and _open(left) > 0:
                open_hops: Counter = Counter()
                for q in left.values():
                    for h, n in q.items():
                        open_hops[h] += n
                hops = self.rng.choices(list(open_hops), weights=list(open_hops.values()))[0]
                sampled = self.sample(hops)
                if sampled is None:
                    continue
                reason = self._offer(*sampled, split_weights, left, out)
                if reason is None:
                    bar.update(1)
                elif reason != "name_leak":  # item() counts leaks among the rejections
                    self.stats.skipped[reason] += 1
            steps = max_attempts if max_search_steps is None else max_search_steps
            for hops in sorted({h for q in left.values() for h, n in q.items() if n > 0}):
                bar.update(self._fill_by_search(hops, steps, split_weights, left, out))
        return out

    def _fill_by_search(
        self,
        hops: int,
        max_steps: int,
        split_weights: Sequence[float],
        left: dict[str, dict[int, int]],
        out: dict[str, list[QAItem]],
    ) -> int:
        """Fill the open ``hops`` quotas from :meth:`search`; returns how many questions it added.

        A quota the search leaves open is marked "exhausted" (every walk was offered; one whose
        question leaked under the template drawn is not retried) or "cut" in ``stats.search``.
        """
        open_splits = [s for s, q in left.items() if q.get(hops, 0) > 0]
        # an exhausted quota stays so: every walk it could use was offered (used or leaking)
        if all(self.stats.search.get((s, hops)) == "exhausted" for s in open_splits):
            return 0
        added = 0
        for walk, clues in self.search(hops, max_steps):
            added += self._offer(walk, clues, split_weights, left, out) is None
            if not any(q.get(hops, 0) for q in left.values()):
                return added
        for s in open_splits:
            if left[s][hops] > 0 and self.stats.search.get((s, hops)) != "exhausted":
                self.stats.search[(s, hops)] = "cut" if self.search_cut else "exhausted"
        return added

    def split_of_answer(self, answer_key: str, split_weights: Sequence[float]) -> str:
        """The split of an answer: the main partition by ``split_weights[:3]`` (train, validation,
        test); with a fourth weight (validation2), train's answers are hashed again with the
        second salt and go to validation2 with odds validation2 : train, so that validation2's
        share of train's answers is sized like the other held-out splits' share of all answers."""
        split = split_of(answer_key, self.split_seed, split_weights[: len(SPLITS)])
        if split != "train" or len(split_weights) <= len(SPLITS):
            return split
        pair = (split_weights[0], split_weights[len(SPLITS)])
        return split_of(answer_key, self.validation2_seed, pair, ("train", VALIDATION2))

    def _offer(
        self,
        walk: list[str],
        clues: list[Clue],
        split_weights: Sequence[float],
        left: dict[str, dict[int, int]],
        out: dict[str, list[QAItem]],
    ) -> str | None:
        """Add the walk's question to ``out`` if its (split, hops) quota is open; else say why not."""
        hops = len(walk) - 1
        # by the qualifier-free name: "Mercury (planet)" and "Mercury (element)" both accept
        # "Mercury", so they must land in the same split
        answer_key = strip_qualifier(self.graph.articles[walk[-1]].title).lower()
        split = self.split_of_answer(answer_key, split_weights)
        if left.get(split, {}).get(hops, 0) == 0:
            return "quota_full"
        if tuple(walk) in self.seen:
            return "duplicate_chain"
        keys = [entity_key(self.graph.articles[d].title) for d in walk]
        if split == "train" and self.held_out is not None:
            leak = self.held_out.train_walk_leak(keys)
            if leak is not None:
                return leak
        cap = self.max_answer_repeats
        if split in HELD_OUT and cap and self.answer_counts[(split, keys[-1])] >= cap:
            return "answer_cap"
        item = self.item(walk, clues, split, len(out[split]))
        if item is None:
            return "name_leak"
        if (
            split == "train"
            and self.held_out is not None
            and self.held_out.mentioned(item.question)
        ):
            return "answer_in_train_question"
        self.answer_counts[(split, keys[-1])] += 1
        self.seen.add(tuple(walk))
        left[split][hops] -= 1
        out[split].append(item)
        return None


def _open(left: dict[str, dict[int, int]]) -> int:
    return sum(sum(q.values()) for q in left.values())


def quotas_for(n: int, weights: Sequence[float]) -> dict[int, int]:
    """``n`` questions split over hops 1..len(weights) in proportion (largest remainders round up)."""
    total = sum(weights)
    raw = [n * w / total for w in weights]
    counts = [int(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: counts[i] - raw[i])[: n - sum(counts)]:
        counts[i] += 1
    return {h + 1: c for h, c in enumerate(counts)}
