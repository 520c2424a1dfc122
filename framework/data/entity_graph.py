"""The entity graph: articles are nodes, and A -> B when A's text mentions B's title.

Matching rules (so a link is evidence a reader of A would notice B):

* Case-sensitive, on word tokens, greedy longest match first, so matches never overlap
  ("Steven Spielberg" wins over "Steven").
* Surface forms of an article: its title, and the title without a trailing parenthetical qualifier
  (``Mercury (planet)`` -> ``Mercury``).
* Dropped forms: shorter than ``min_form_chars``; purely numeric; a single word that the corpus also
  uses as an ordinary lower-case word (``City``, ``House``, ``Species``: its lower-case count reaches
  ``generic_ratio`` times its standalone capitalised count, which ignores sentence starts and words
  inside longer names such as "White House"); and ambiguous forms shared by several articles
  (``Mercury`` for the planet, the element and the god).
* No self-links.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from framework.config import Problem, check_range, option
from framework.retrieval.corpus import SourceDocument

_TOKEN = re.compile(r"\w+|[^\w\s]")
_QUALIFIER = re.compile(r"^(?P<name>.+?)\s*\((?P<qualifier>[^()]+)\)$")
MAX_FORM_TOKENS = 12


@dataclass
class GraphConfig:
    """How mentions become edges."""

    min_form_chars: int = option(3, "shortest surface form matched")
    generic_ratio: float = option(
        1.0, "drop a one-word form whose lower-case count is >= this x its capitalised"
    )
    max_in_degree: int = option(50, "hubs above this in-degree are never bridges or answers")

    def problems(self) -> list[Problem]:
        out = check_range(self.min_form_chars, "min_form_chars", low=1)
        out += check_range(self.generic_ratio, "generic_ratio", low=0.0, low_inclusive=False)
        out += check_range(self.max_in_degree, "max_in_degree", low=1)
        return out


#: what the graph needs of a document: its id, title, text and description, as the corpus source
#: yields it
Article = SourceDocument


def tokens(text: str) -> list[str]:
    """Word and punctuation tokens (case kept)."""
    return _TOKEN.findall(text)


def strip_qualifier(title: str) -> str:
    """``Mercury (planet)`` -> ``Mercury``; other titles unchanged."""
    m = _QUALIFIER.match(title)
    return m["name"].strip() if m else title


def aliases(title: str) -> tuple[str, ...]:
    """The names an article goes by: its title, then the title without its qualifier."""
    short = strip_qualifier(title)
    return (title,) if short == title else (title, short)


@dataclass
class EntityGraph:
    """Articles, their out-links and the surface form each link was matched by.

    Attributes:
        articles: doc_id -> Article.
        edges: doc_id -> {target doc_id: surface form as it appears in the source text}.
        forms: surface form (token tuple) -> doc_id, the unambiguous forms that were matched.
        dropped: reason -> number of surface forms dropped for it.
    """

    articles: dict[str, Article]
    edges: dict[str, dict[str, str]]
    forms: dict[tuple[str, ...], str]
    dropped: dict[str, int]
    max_in_degree: int
    lower_counts: Counter = field(default_factory=Counter)
    standalone_counts: Counter = field(default_factory=Counter)

    def is_common_word(self, word: str) -> bool:
        """True when the corpus writes ``word`` lower-cased at least as often as standalone capitalised.

        ``Painting``, ``Sea`` and ``Ethnoreligious`` are ordinary words; ``American``, ``Danish-born``
        and ``Orion`` are not (a hyphenated word is judged by its first part).
        """
        if word.isalpha():
            return self.lower_counts[word.lower()] >= self.standalone_counts[word]
        # "Danish-born", "Earth's", "U.S.": judged by the first word, which must occur lower-case
        first = next(iter(tokens(word)), "")
        low = self.lower_counts[first.lower()]
        return low > 0 and low >= self.standalone_counts[first]

    def out(self, doc_id: str) -> dict[str, str]:
        return self.edges.get(doc_id, {})

    def in_degree(self) -> Counter:
        counts: Counter = Counter()
        for targets in self.edges.values():
            counts.update(targets.keys())
        return counts

    def is_hub(self, doc_id: str, in_degree: Counter | None = None) -> bool:
        counts = in_degree if in_degree is not None else self.in_degree()
        return counts[doc_id] > self.max_in_degree

    def stats(self) -> dict[str, object]:
        """Counts worth printing and saving."""
        indeg = self.in_degree()
        n_edges = sum(len(t) for t in self.edges.values())
        with_out = sum(1 for t in self.edges.values() if t)
        hubs = sorted((d for d in indeg if indeg[d] > self.max_in_degree), key=lambda d: -indeg[d])
        two_hop = sum(len(self.out(b)) for a in self.edges for b in self.out(a) if b not in hubs)
        return {
            "articles": len(self.articles),
            "surface_forms": len(self.forms),
            "dropped_forms": dict(self.dropped),
            "edges": n_edges,
            "articles_with_out_edges": with_out,
            "mean_out_degree": round(n_edges / max(with_out, 1), 2),
            "hubs_over_max_in_degree": len(hubs),
            "top_hubs": [(d, indeg[d]) for d in hubs[:10]],
            "two_hop_chains_through_non_hubs": two_hop,
        }

    def save_stats(self, path: Path) -> dict[str, object]:
        stats = self.stats()
        path.write_text(json.dumps(stats, indent=2, ensure_ascii=False))
        return stats


def _word_case_counts(texts: Iterable[list[str]]) -> tuple[Counter, Counter, Counter]:
    """Word counts over all token lists: as written, lower-case only, and standalone capitalised.

    A capitalised token is standalone when it does not open a sentence and neither neighbour is a
    capitalised word: ``House`` in "a House vote" is, in "the White House" it is not.
    """
    exact: Counter = Counter()
    standalone: Counter = Counter()
    for toks in texts:
        for i, t in enumerate(toks):
            if not t.isalpha():
                continue
            exact[t] += 1
            if t[:1].isupper() and i > 0 and toks[i - 1] not in (".", "!", "?", '"', ":"):
                before = toks[i - 1][:1].isupper()
                after = i + 1 < len(toks) and toks[i + 1][:1].isupper()
                if not before and not after:
                    standalone[t] += 1
    lower: Counter = Counter()
    for word, n in exact.items():
        if word.islower():
            lower[word] += n
    return exact, lower, standalone


def surface_forms(
    articles: Iterable[Article], standalone: Counter, lower: Counter, cfg: GraphConfig
) -> tuple[dict[tuple[str, ...], str], dict[str, int]]:
    """Unambiguous surface forms -> doc_id, and how many forms each rule dropped."""
    claims: dict[tuple[str, ...], set[str]] = defaultdict(set)
    dropped: Counter = Counter()
    for art in articles:
        for form in aliases(art.title):
            toks = tuple(tokens(form))
            if not toks or len(toks) > MAX_FORM_TOKENS:
                dropped["too_long_or_empty"] += 1
            elif len(form) < cfg.min_form_chars:
                dropped["too_short"] += 1
            elif all(not any(c.isalpha() for c in t) for t in toks):
                dropped["numeric"] += 1
            elif len(toks) == 1 and _is_generic(toks[0], standalone, lower, cfg.generic_ratio):
                dropped["generic_word"] += 1
            else:
                claims[toks].add(art.doc_id)
    forms = {}
    for toks, ids in claims.items():
        if len(ids) == 1:
            forms[toks] = next(iter(ids))
        else:
            dropped["ambiguous"] += 1
    return forms, dict(dropped)


def _is_generic(word: str, standalone: Counter, lower: Counter, ratio: float) -> bool:
    low = word.lower()
    if word == low:  # a lower-case title is an ordinary word
        return True
    return lower[low] >= ratio * max(standalone[word], 1)


def find_mentions(
    toks: list[str], forms: dict[tuple[str, ...], str], max_len: int
) -> list[tuple[str, int, int]]:
    """``(doc_id, first token, end token)`` for each greedy longest, non-overlapping form match."""
    out = []
    i = 0
    while i < len(toks):
        for n in range(min(max_len, len(toks) - i), 0, -1):
            doc = forms.get(tuple(toks[i : i + n]))
            if doc is not None:
                out.append((doc, i, i + n))
                i += n
                break
        else:
            i += 1
    return out


def build_graph(articles: list[Article], cfg: GraphConfig) -> EntityGraph:
    """The entity graph of ``articles`` under ``cfg``'s matching rules."""
    spans = {a.doc_id: [(m.start(), m.end()) for m in _TOKEN.finditer(a.text)] for a in articles}
    toks = {a.doc_id: [a.text[s:e] for s, e in spans[a.doc_id]] for a in articles}
    _, lower, standalone = _word_case_counts(toks.values())
    forms, dropped = surface_forms(articles, standalone, lower, cfg)
    max_len = max((len(f) for f in forms), default=1)
    edges: dict[str, dict[str, str]] = {}
    for art in articles:
        found: dict[str, str] = {}
        span = spans[art.doc_id]
        for doc, first, end in find_mentions(toks[art.doc_id], forms, max_len):
            if doc != art.doc_id:  # the mention exactly as written in the source text
                found.setdefault(doc, art.text[span[first][0] : span[end - 1][1]])
        edges[art.doc_id] = found
    return EntityGraph(
        {a.doc_id: a for a in articles}, edges, forms, dropped, cfg.max_in_degree, lower, standalone
    )
