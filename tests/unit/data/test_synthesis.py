"""Question synthesis: clue helpers, walks, uniqueness, splits and quotas, answerability, datasets.

Hand-built graphs only (no models, no indexes). Expected values are worked out by hand from the
corpora below and from ``tests/unit/data/test_entity_graph.py``'s corpus.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from framework.data import datasets
from framework.data.datasets import (
    AnswerabilityConfig,
    FilesDatasetConfig,
    SynthDatasetConfig,
    files_dataset,
    synth_dataset,
    synthesize,
    unfilled_quotas,
)
from framework.data.entity_graph import Article, EntityGraph, GraphConfig, aliases, build_graph
from framework.data.quality import answerability, evidence_queries
from framework.data.schema import DatasetError, QAItem, read_dataset, write_split
from framework.data.synthesis import (
    SPLITS,
    Clue,
    QuestionSynthesizer,
    SynthesisError,
    SynthesisStats,
    clean_description,
    first_sentence_predicate,
    fuzz,
    head_noun,
    make_clue,
    nameable,
    quotas_for,
    render_question,
    split_of,
    with_article,
)
from framework.retrieval.corpus import CorpusConfig
from framework.retrieval.local import cache_root
from framework.retrieval.types import DocumentNotFound
from framework.rewards.entity_match import entities_found_by_any
from framework.types import Document, Hit
from tests.unit.data.test_entity_graph import corpus


def never_common(word: str) -> bool:
    return False


@pytest.fixture(scope="module")
def tiny() -> EntityGraph:
    """The entity-graph test corpus with max_in_degree=1, so Ohio (2 in-links) is a hub."""
    return build_graph(corpus(), GraphConfig(max_in_degree=1))


GRID_ROWS, GRID_COLS = 5, 8


def grid_articles(rows: int = GRID_ROWS, cols: int = GRID_COLS) -> list[Article]:
    """``Grid Town i`` links its right and lower neighbours; every description is unique."""
    out = []
    for r in range(rows):
        for c in range(cols):
            i = r * cols + c
            links = []
            if c + 1 < cols:
                links.append(f"Grid Town {i + 1}")
            if r + 1 < rows:
                links.append(f"Grid Town {i + cols}")
            text = f"Grid Town {i} is a village."
            if links:
                text += " It borders " + " and ".join(links) + "."
            # postcodes 3000+ are not years, so fuzzing leaves them alone
            out.append(
                Article(f"g{i}", f"Grid Town {i}", text, f"village with postcode {3000 + i}")
            )
    return out


@pytest.fixture(scope="module")
def grid() -> EntityGraph:
    return build_graph(grid_articles(), GraphConfig())


def check_item(item: QAItem, graph: EntityGraph, synth: QuestionSynthesizer) -> None:
    """Every invariant a synthesized item must satisfy."""
    chain = item.chain
    assert item.hops == len(chain) - 1 >= 1
    for a, b in itertools.pairwise(chain):
        assert b in graph.out(a), (a, b)
    assert len(set(chain)) == len(chain)
    # the natural name first (what E-GRPO's exact mode matches), the full title as an alias
    assert item.entities == tuple(tuple(reversed(aliases(graph.articles[d].title))) for d in chain)
    assert item.golden_answers == aliases(graph.articles[chain[-1]].title)
    # no hidden entity under any of the reward's settings (tests/unit/data/test_leaks.py)
    assert not any(entities_found_by_any(item.question, item.entities[1:]))
    assert graph.articles[chain[0]].title in item.question
    assert item.extra["mentions"] == [graph.out(a)[b] for a, b in itertools.pairwise(chain)]
    assert len(item.extra["clues"]) == item.hops
    assert item.data_source == "seekrl_synth"


# --- clue helpers -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "clean"),
    [
        ("American filmmaker (born 1946)", "American filmmaker"),
        ("U.S. state.", "U.S. state"),
        ("  city   in\n Ohio. ", "city in Ohio"),
        ("French poet (1821–1867) and critic.", "French poet and critic"),
        ("(disambiguation)", ""),
        ("", ""),
        (None, ""),
    ],
)
def test_clean_description(text, clean):
    assert clean_description(text) == clean


@pytest.mark.parametrize(
    ("text", "predicate"),
    [
        (
            "Jaws is a 1975 American thriller film directed by Steven Spielberg.",
            "1975 American thriller film",
        ),
        (
            "Steven Allan Spielberg (born December 18, 1946) is an American filmmaker.",
            "American filmmaker",
        ),
        (
            "The Beatles were an English rock band, formed in Liverpool in 1960.",
            "English rock band",
        ),
        (
            "Paris is the capital and most populous city of France.",
            "capital and most populous city of France",
        ),
        ("Cincinnati is a city located in Ohio.", "city"),
        (
            "Mercury is the smallest planet in the Solar System.",
            "smallest planet in the Solar System",
        ),
        ("Ohio borders Lake Erie.", None),  # no "is a / was the"
        ("X is a very long predicate with many many words in it for sure.", None),  # > 8 words
        ("", None),
    ],
)
def test_first_sentence_predicate(text, predicate):
    assert first_sentence_predicate(text) == predicate


@pytest.mark.parametrize(
    ("clue", "head"),
    [
        ("Christian church based in Rome", "church"),
        ("island northwest of continental Europe", "island"),
        ("artistic, literary, musical, and intellectual movement", "movement"),
        ("opera by Georges Bizet", "opera"),
        ("1975 film by Steven Spielberg", "film"),
        ("American filmmaker", "filmmaker"),
        ("city in Ohio, United States", "city"),
        ("instrument that measures temperature", "instrument"),
        ("island south of Cape Cod", "island"),
        ("river mainly in Germany", "river"),
        ("species of flowering plant", "species"),
        ("Italian-born composer", "composer"),
        ("U.S. state", "state"),
        ("located", "located"),  # a lone word is kept even when it looks like a participle
        ("1975", "one"),
        ("", "one"),
    ],
)
def test_head_noun(clue, head):
    assert head_noun(clue) == head


@pytest.mark.parametrize(
    ("phrase", "expected"),
    [
        ("European movement", "a European movement"),
        ("opera", "an opera"),
        ("Earth's southernmost continent", "Earth's southernmost continent"),
        ("Earth’s southernmost continent", "Earth’s southernmost continent"),
        ("1975 film by Steven Spielberg", "a 1975 film by Steven Spielberg"),
        ("American filmmaker", "an American filmmaker"),
        ("Indian actor", "an Indian actor"),
        ("university in Ohio", "a university in Ohio"),
        ("Ukrainian poet", "a Ukrainian poet"),
        ("one-act opera", "a one-act opera"),
        ("umbrella term", "an umbrella term"),
        ("hour-long show", "an hour-long show"),
        ("honest broker", "an honest broker"),
        ("8th-century poem", "an 8th-century poem"),
        ("11th-century king", "an 11th-century king"),
        ("18th-century poem", "an 18th-century poem"),
        ("city", "a city"),
    ],
)
def test_with_article(phrase, expected):
    assert with_article(phrase) == expected


def test_with_article_us_initialism():
    assert with_article("U.S. state") == "a U.S. state"


def test_fuzz_years_become_decades():
    assert fuzz(Clue("1975 film by Steven Spielberg", "film")) == Clue(
        "1970s film by Steven Spielberg", "film"
    )
    assert fuzz(Clue("band formed in 2001", "band")).text == "band formed in 2000s"
    assert fuzz(Clue("poet (born 1946, died 2023)", "poet")).text == "poet (born 1940s, died 2020s)"
    assert fuzz(Clue("war in 1066", "war")).text == "war in 1060s"
    for untouched in ("king of 999 BC", "year 2100", "the 1900s", "postcode 3005", "film"):
        assert fuzz(Clue(untouched, "x")).text == untouched


@pytest.mark.parametrize(
    ("title", "ok"),
    [
        ("1984", False),
        ("1", False),
        ("Hg", False),
        ("U2", False),
        ("A1 road", True),
        ("Ohio", True),
        ("R.E.M.", True),
        ("Jaws (film)", True),
        ("1984 (novel)", True),
    ],
)
def test_nameable(title, ok):
    assert nameable(title) is ok


def test_make_clue_from_description_drops_parenthetical():
    art = Article("s", "Steven Spielberg", "text", "American filmmaker (born 1946)")
    assert make_clue(art, never_common) == Clue("American filmmaker", "filmmaker")


def test_make_clue_falls_back_to_first_sentence_predicate():
    art = Article(
        "jaws", "Jaws (film)", "Jaws is a 1975 American thriller film directed by Steven Spielberg."
    )
    assert make_clue(art, never_common) == Clue("1975 American thriller film", "film")
    art = Article("jaws", "Jaws (film)", "Jaws is a 1975 film.", "  (disambiguation) ")
    assert make_clue(art, never_common) == Clue("1975 film", "film")


@pytest.mark.parametrize(
    "article",
    [
        Article("o", "Ohio", "Ohio is a state.", "state of Ohio"),  # gives the title away
        Article("p", "Mercury (planet)", "x", "planet also called MERCURY"),  # the short alias
        Article("p", "Mercury (planet)", "x", "the Mercury (planet) article"),
        Article("s", "Short", "x", "ab"),  # too short
        Article("n", "Nothing", "Nothing to say here."),  # no description, no predicate
    ],
)
def test_make_clue_none(article):
    assert make_clue(article, never_common) is None


def test_make_clue_lowers_common_words():
    common = {"City", "Painting"}.__contains__
    art = Article("c", "Cincinnati", "x", "City in Ohio, United States")
    assert make_clue(art, common) == Clue("city in Ohio, United States", "city")
    art = Article("b", "Baroque art", "x", "Italian Painting in Rome")
    assert make_clue(art, common) == Clue("Italian Painting in Rome", "painting")
    art = Article("s", "Steven Spielberg", "x", "American filmmaker")
    assert make_clue(art, lambda w: w != "American") == Clue("American filmmaker", "filmmaker")


def test_make_clue_keeps_possessives_and_initialisms(tiny):
    assert make_clue(tiny.articles["ohio"], tiny.is_common_word) == Clue("U.S. state", "state")
    art = Article("a", "Antarctica", "x", "Earth's southernmost continent")
    assert make_clue(art, tiny.is_common_word).text == "Earth's southernmost continent"


# --- render_question ------------------------------------------------------------------------------------


class FixedRng:
    """``randrange`` answers from a list, in order (so the template choice is known)."""

    def __init__(self, *picks: int) -> None:
        self.picks = list(picks)

    def randrange(self, n: int) -> int:
        k = self.picks.pop(0)
        assert 0 <= k < n
        return k


FILMMAKER = Clue("American filmmaker", "filmmaker")
CITY = Clue("city in Ohio, United States", "city")
STATE = Clue("state in the Midwest", "state")
ISLAND = Clue("island south of Cape Cod", "island")


def test_render_one_hop_templates():
    expected = [
        "Which American filmmaker is mentioned in the Wikipedia article about Jaws (film)?",
        "The Wikipedia article on Jaws (film) mentions an American filmmaker. What is its name?",
        "Name the American filmmaker that the Wikipedia article about Jaws (film) refers to.",
    ]
    for k, text in enumerate(expected):
        assert render_question("Jaws (film)", [FILMMAKER], FixedRng(k)) == (text, f"1hop-{k}")


def test_render_two_hop():
    q, template = render_question(
        "Steven Spielberg",
        [Clue("1975 film by Steven Spielberg", "film"), ISLAND],
        FixedRng(0, 0, 0),
    )
    assert template == "chain-000"
    assert q == (
        "The Wikipedia article on Steven Spielberg mentions a 1975 film by Steven Spielberg. "
        "Which island south of Cape Cod is mentioned in the article on that film?"
    )


def test_render_three_and_four_hops():
    q, template = render_question("Jaws (film)", [FILMMAKER, CITY, STATE], FixedRng(1, 1, 1))
    assert template == "chain-111"
    assert q == (
        "Start from the Wikipedia article about Jaws (film): it mentions an American filmmaker. "
        "That filmmaker's article in turn mentions a city in Ohio, United States. "
        "What is the name of the state in the Midwest that the article on that city mentions?"
    )
    q, template = render_question(
        "Jaws (film)", [FILMMAKER, CITY, STATE, ISLAND], FixedRng(0, 0, 1)
    )
    assert template == "chain-001"
    assert q == (
        "The Wikipedia article on Jaws (film) mentions an American filmmaker. "
        "The article on that filmmaker mentions a city in Ohio, United States. "
        "The article on that city mentions a state in the Midwest. "
        "What is the name of the island south of Cape Cod that the article on that state mentions?"
    )


# --- the synthesizer on the tiny graph -------------------------------------------------------------------

ONE_HOP = {
    ("jaws", "spielberg"),
    ("jaws", "marthas"),
    ("spielberg", "cincinnati"),
    ("spielberg", "jaws"),
    ("marthas", "steven"),
}
TWO_HOP = {
    ("jaws", "spielberg", "cincinnati"),
    ("jaws", "marthas", "steven"),
    ("spielberg", "jaws", "marthas"),
}
# The only 3-hop walk, Steven Spielberg -> Jaws -> Martha's Vineyard -> Steven, names its answer
# ("Steven") inside the anchor's name, so it is always rejected as a name leak.


def test_clues_anchors_and_eligibility(tiny):
    synth = QuestionSynthesizer(tiny, seed=0, fuzz_prob=0.0)
    clues = {d: (c.text, c.head) for d, c in synth.clues.items() if d != "ohio"}
    assert clues == {
        "jaws": ("1975 film by Steven Spielberg", "film"),
        "spielberg": ("American filmmaker", "filmmaker"),
        "cincinnati": ("city in Ohio, United States", "city"),  # "City" is a common word
        "thermometer": ("instrument that measures temperature", "instrument"),
        "planet": ("smallest planet in the Solar System", "planet"),
        "element": ("chemical element with symbol Hg", "element"),
        "city": ("large human settlement", "settlement"),
        "y1984": ("year", "year"),
        "steven": ("masculine given name", "name"),
        "marthas": ("island south of Cape Cod", "island"),
        "hg": ("chemical symbol", "symbol"),
    }
    assert "ohio" in synth.clues
    assert synth.eligible == set(synth.clues) - {"ohio"}  # the hub is never a bridge or answer
    # Cincinnati and Thermometer link only the hub, so they cannot start a walk.
    assert synth.anchors == ["jaws", "marthas", "spielberg"]


def test_generate_on_tiny_graph_yields_exactly_the_valid_walks(tiny):
    synth = QuestionSynthesizer(tiny, seed=3, fuzz_prob=0.0)
    out = synth.generate(
        {"train": {1: 5, 2: 3, 3: 1}}, [1, 0, 0], max_attempts=1500, progress=False
    )
    items = out["train"]
    chains = [it.chain for it in items]
    assert len(chains) == len(set(chains))
    assert set(chains) == ONE_HOP | TWO_HOP
    assert Counter(it.hops for it in items) == {1: 5, 2: 3}
    assert synth.stats.rejections["name_leak"] > 0  # the 3-hop walk
    assert synth.stats.rejections["dead_end"] > 0  # e.g. Spielberg -> Cincinnati -> (hub)
    assert synth.stats.rejections["answer_not_unique"] == 0
    assert synth.stats.skipped["duplicate_chain"] > 0
    assert synth.stats.attempts == 1500
    assert [it.id for it in items] == [f"seekrl-synth-train-{i:06d}" for i in range(len(items))]
    for it in items:
        check_item(it, tiny, synth)
        assert "ohio" not in it.chain
        assert it.extra["clues"] == [synth.clues[d].text for d in it.chain[1:]]
    by_chain = {it.chain: it for it in items}
    jaws_spielberg = by_chain[("jaws", "spielberg")]
    assert jaws_spielberg.golden_answers == ("Steven Spielberg",)
    assert jaws_spielberg.entities == (("Jaws", "Jaws (film)"), ("Steven Spielberg",))
    assert jaws_spielberg.extra["mentions"] == ["Steven Spielberg"]
    assert "American filmmaker" in jaws_spielberg.question
    assert by_chain[("spielberg", "jaws")].golden_answers == ("Jaws (film)", "Jaws")


def test_items_match_their_template(tiny):
    synth = QuestionSynthesizer(tiny, seed=5, fuzz_prob=0.0)
    items = synth.generate({"train": {1: 5, 2: 3}}, [1, 0, 0], max_attempts=800, progress=False)
    for it in items["train"]:
        template = it.extra["template"]
        picks = [int(template.split("-")[1])] if it.hops == 1 else [int(c) for c in template[-3:]]
        anchor = tiny.articles[it.chain[0]].title
        clues = [synth.clues[d] for d in it.chain[1:]]
        assert render_question(anchor, clues, FixedRng(*picks)) == (it.question, template)


def test_sample_without_anchors_is_rejected():
    g = build_graph(
        [Article("a", "Lone Page", "Nothing links anywhere.", "lonely page")], GraphConfig()
    )
    synth = QuestionSynthesizer(g, seed=0, fuzz_prob=0.0)
    assert synth.anchors == []
    assert synth.sample(1) is None
    assert synth.stats.rejections == {"no_anchor": 1}
    assert synth.generate({"train": {1: 2}}, [1, 1, 1], max_attempts=10, progress=False) == {
        "train": []
    }
    assert synth.stats.attempts == 11


# --- answer uniqueness -------------------------------------------------------------------------------


def twin_articles() -> list[Article]:
    """Grand Tour -> {Alpha Town, Beta Town: same clue; Gamma Lake};
    Gamma Lake -> {Delta Creek, Epsilon Creek: same clue; Zeta Hill}."""
    return [
        Article(
            "tour",
            "Grand Tour",
            "The Grand Tour visits Alpha Town, Beta Town and Gamma Lake.",
            "itinerary of a journey",
        ),
        Article("alpha", "Alpha Town", "Alpha Town is small.", "town in Ohio"),
        Article("beta", "Beta Town", "Beta Town is small.", "town in Ohio"),
        Article(
            "gamma",
            "Gamma Lake",
            "Gamma Lake lies between Delta Creek, Epsilon Creek and Zeta Hill.",
            "lake in Ohio",
        ),
        Article("delta", "Delta Creek", "Delta Creek is short.", "creek in Ohio"),
        Article("epsilon", "Epsilon Creek", "Epsilon Creek is short.", "creek in Ohio"),
        Article("zeta", "Zeta Hill", "Zeta Hill is low.", "hill in Ohio"),
    ]


def test_walks_through_ambiguous_clues_are_rejected():
    g = build_graph(twin_articles(), GraphConfig())
    assert g.out("tour").keys() == {"alpha", "beta", "gamma"}
    assert g.out("gamma").keys() == {"delta", "epsilon", "zeta"}
    synth = QuestionSynthesizer(g, seed=1, fuzz_prob=0.0)
    valid = {("tour", "gamma"), ("gamma", "zeta"), ("tour", "gamma", "zeta")}
    sampled = [synth.sample(h) for h in (1, 2) * 100]
    walks = {tuple(s[0]) for s in sampled if s is not None}
    assert walks == valid
    assert synth.stats.rejections["answer_not_unique"] > 0
    out = synth.generate({"train": {1: 2, 2: 1}}, [1, 0, 0], max_attempts=500, progress=False)
    assert {it.chain for it in out["train"]} == valid
    for it in out["train"]:
        check_item(it, g, synth)
        assert not {"alpha", "beta", "delta", "epsilon"} & set(it.chain)


def festival_articles() -> list[Article]:
    return [
        Article(
            "fest",
            "Film Festival",
            "The Film Festival showed Red Film, Blue Film and Green Film.",
            "yearly event",
        ),
        Article("red", "Red Film", "Red Film is a drama.", "1975 drama film"),
        Article("blue", "Blue Film", "Blue Film is a drama.", "1978 drama film"),
        Article("green", "Green Film", "Green Film is a comedy.", "2001 comedy film"),
    ]


def test_uniqueness_is_judged_on_the_fuzzed_clue():
    g = build_graph(festival_articles(), GraphConfig())
    exact = QuestionSynthesizer(g, seed=0, fuzz_prob=0.0)
    walks = {tuple(s[0]) for s in (exact.sample(1) for _ in range(60)) if s is not None}
    assert walks == {("fest", "red"), ("fest", "blue"), ("fest", "green")}
    assert exact.stats.rejections["answer_not_unique"] == 0
    # Fuzzed, 1975 and 1978 both read "1970s drama film": neither can be asked for.
    fuzzed = QuestionSynthesizer(g, seed=0, fuzz_prob=1.0)
    results = [fuzzed.sample(1) for _ in range(60)]
    kept = [s for s in results if s is not None]
    assert {tuple(w) for w, _ in kept} == {("fest", "green")}
    assert all(clues == [Clue("2000s comedy film", "film")] for _, clues in kept)
    assert fuzzed.stats.rejections["answer_not_unique"] == 60 - len(kept) > 0


def test_search_asks_with_the_plain_clue_when_the_fuzzed_one_is_ambiguous():
    g = build_graph(festival_articles(), GraphConfig())
    fuzzed = QuestionSynthesizer(g, seed=0, fuzz_prob=1.0)
    walks = {tuple(w): clues for w, clues in fuzzed.search(1, 100)}
    assert walks == {
        ("fest", "red"): [Clue("1975 drama film", "film")],
        ("fest", "blue"): [Clue("1978 drama film", "film")],
        ("fest", "green"): [Clue("2000s comedy film", "film")],
    }
    assert not fuzzed.search_cut


# --- quotas, splits, generate ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "weights", "expected"),
    [
        # raw 3, 3, 2.5, 1.5 -> floors 3, 3, 2, 1 (9); the one left goes to the largest remainder,
        # a 0.5 tie between hops 3 and 4 that the stable sort gives to the lower hop (3).
        (10, [0.3, 0.3, 0.25, 0.15], {1: 3, 2: 3, 3: 3, 4: 1}),
        (2, [1, 1, 1, 1], {1: 1, 2: 1, 3: 0, 4: 0}),  # ties: lower hops first
        (3, [1, 1], {1: 2, 2: 1}),
        (100, [0.3, 0.3, 0.25, 0.15], {1: 30, 2: 30, 3: 25, 4: 15}),
        (7, [1], {1: 7}),
        (5, [0, 1], {1: 0, 2: 5}),
        (0, [0.3, 0.7], {1: 0, 2: 0}),
        (10, [0.15, 0.25, 0.6], {1: 2, 2: 2, 3: 6}),  # raw 1.5, 2.5, 6 -> tie goes to hop 1
    ],
)
def test_quotas_for(n, weights, expected):
    assert quotas_for(n, weights) == expected


def test_quotas_for_always_sums_to_n():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randrange(0, 500)
        weights = [rng.random() for _ in range(rng.randrange(1, 6))]
        quotas = quotas_for(n, weights)
        assert sum(quotas.values()) == n
        assert list(quotas) == list(range(1, len(weights) + 1))
        total = sum(weights)
        for h, count in quotas.items():
            assert abs(count - n * weights[h - 1] / total) < 1


def test_split_of_is_deterministic_and_seeded():
    answers = [f"answer {i}" for i in range(300)]
    w = [0.8, 0.1, 0.1]
    first = [split_of(a, 7, w) for a in answers]
    assert first == [split_of(a, 7, w) for a in answers]
    assert set(first) <= set(SPLITS)
    assert first != [split_of(a, 8, w) for a in answers]
    # only the proportions matter
    assert [split_of(a, 7, [2, 1, 1]) for a in answers] == [
        split_of(a, 7, [0.5, 0.25, 0.25]) for a in answers
    ]


def test_split_of_respects_weights():
    answers = [f"entity {i}" for i in range(4000)]
    counts = Counter(split_of(a, 0, [0.8, 0.1, 0.1]) for a in answers)
    assert abs(counts["train"] / 4000 - 0.8) < 0.03
    assert abs(counts["validation"] / 4000 - 0.1) < 0.02
    assert abs(counts["test"] / 4000 - 0.1) < 0.02
    assert {split_of(a, 0, [1, 0, 1]) for a in answers} == {"train", "test"}
    assert {split_of(a, 0, [0, 0, 1]) for a in answers} == {"test"}
    assert {split_of(a, 0, [1, 0, 0]) for a in answers} == {"train"}
    assert {split_of(a, 0, [0, 3, 0]) for a in answers} == {"validation"}


GRID_QUOTAS = {"train": {1: 4, 2: 4, 3: 3, 4: 2}, "test": {1: 2, 2: 2, 3: 1, 4: 1}}


def grid_items(
    graph: EntityGraph, seed: int
) -> tuple[QuestionSynthesizer, dict[str, list[QAItem]]]:
    synth = QuestionSynthesizer(graph, seed=seed, fuzz_prob=0.0)
    return synth, synth.generate(GRID_QUOTAS, [1, 0, 1], max_attempts=4000, progress=False)


def test_generate_fills_quotas_without_leaking_answers_across_splits(grid):
    assert grid.stats()["edges"] == GRID_ROWS * (GRID_COLS - 1) + (GRID_ROWS - 1) * GRID_COLS
    synth, out = grid_items(grid, seed=11)
    assert set(out) == {"train", "test"}  # validation has weight 0 and no quota
    for split, items in out.items():
        hops = Counter(it.hops for it in items)
        assert all(hops[h] <= n for h, n in GRID_QUOTAS[split].items())
        assert set(hops) <= set(GRID_QUOTAS[split])
        assert dict(hops) == GRID_QUOTAS[split]  # a 40-node grid has walks to spare
        for it in items:
            check_item(it, grid, synth)
        assert [it.id for it in items] == [
            f"seekrl-synth-{split}-{i:06d}" for i in range(len(items))
        ]
    answers = {s: {it.chain[-1] for it in items} for s, items in out.items()}
    assert not answers["train"] & answers["test"]
    golden = {s: {a for it in items for a in it.golden_answers} for s, items in out.items()}
    assert not golden["train"] & golden["test"]
    chains = [it.chain for items in out.values() for it in items]
    assert len(chains) == len(set(chains))
    assert synth.stats.skipped["quota_full"] > 0
    # A second call never repeats a walk of the first.
    again = synth.generate(GRID_QUOTAS, [1, 0, 1], max_attempts=4000, progress=False)
    assert not {it.chain for items in again.values() for it in items} & set(chains)


def test_generate_is_deterministic_per_seed(grid):
    _, a = grid_items(grid, seed=4)
    _, b = grid_items(grid, seed=4)
    _, c = grid_items(grid, seed=5)
    assert a == b
    assert [it.question for it in a["train"]] == [it.question for it in b["train"]]
    assert a != c


def test_generate_respects_max_attempts(grid):
    synth = QuestionSynthesizer(grid, seed=0, fuzz_prob=0.0)
    out = synth.generate({"train": {1: 1000}}, [1, 0, 0], max_attempts=25, progress=False)
    assert synth.stats.attempts == 25  # random walks
    assert synth.stats.search_steps == 25  # then the search, cut at the same budget
    assert synth.stats.search == {("train", 1): "cut"}
    assert len(out["train"]) <= 25 + 25 * 2  # a grid town links at most two others
    out = synth.generate(
        {"train": {1: 1000}}, [1, 0, 0], max_attempts=5, max_search_steps=3, progress=False
    )
    assert synth.stats.attempts == 30 and synth.stats.search_steps == 28


def test_search_yields_every_valid_walk_once(tiny, grid):
    synth = QuestionSynthesizer(tiny, seed=0, fuzz_prob=0.0)
    assert {tuple(w) for w, _ in synth.search(1, 1000)} == ONE_HOP
    assert not synth.search_cut
    walks = [tuple(w) for w, _ in synth.search(2, 1000)]
    # TWO_HOP plus the walks whose question leaks (item() rejects those, not the search)
    assert len(walks) == len(set(walks)) and set(walks) >= TWO_HOP
    for w, clues in synth.search(2, 1000):
        assert clues == [synth.clues[d] for d in w[1:]]
    synth.seen.add(("jaws", "spielberg"))
    assert {tuple(w) for w, _ in synth.search(1, 1000)} == ONE_HOP - {("jaws", "spielberg")}
    assert len(list(synth.search(1, 1))) <= 2 and synth.search_cut  # one anchor expanded
    g = QuestionSynthesizer(grid, seed=0, fuzz_prob=0.0)
    edges = {(a, b) for a in grid.articles for b in grid.out(a)}
    assert {tuple(w) for w, _ in g.search(1, 10_000)} == edges


def test_search_fills_what_random_walks_cannot(grid):
    # no random walk at all: the search alone fills the quotas, in its seeded order
    synth = QuestionSynthesizer(grid, seed=0, fuzz_prob=0.0)
    quotas = {"train": {1: 3, 2: 3, 3: 2}, "test": {1: 2, 2: 1}}
    out = synth.generate(quotas, [1, 0, 1], max_attempts=0, max_search_steps=10_000, progress=False)
    assert synth.stats.attempts == 0 and synth.stats.search == {}
    for split, items in out.items():
        assert Counter(it.hops for it in items) == {h: n for h, n in quotas[split].items() if n}
        for it in items:
            check_item(it, grid, synth)


def test_anchors_are_nameable():
    arts = [
        Article("y1984", "1984", "1984 was the year Sally Ride flew again.", "year"),
        Article("ride", "Sally Ride", "Sally Ride was an astronaut.", "American astronaut"),
    ]
    synth = QuestionSynthesizer(build_graph(arts, GraphConfig()), seed=0, fuzz_prob=0.0)
    assert "y1984" not in synth.anchors


def test_no_golden_answer_string_in_two_splits():
    # "Mercury (planet)" and "Mercury (element)" both accept "Mercury": splits are keyed by the
    # qualifier-free name, so both answers must land in one split.
    arts = [
        Article(
            "solar", "Solar System", "The Solar System includes Mercury (planet).", "star system"
        ),
        Article("thermo", "Thermometer", "A Thermometer can hold Mercury (element).", "instrument"),
        Article("planet", "Mercury (planet)", "A planet.", "smallest planet"),
        Article("element", "Mercury (element)", "An element.", "chemical element"),
    ]
    g = build_graph(arts, GraphConfig())
    w = [1, 0, 1]
    for seed in range(20):
        synth = QuestionSynthesizer(g, seed=seed, fuzz_prob=0.0)
        out = synth.generate({"train": {1: 2}, "test": {1: 2}}, w, max_attempts=400, progress=False)
        answers = {s: {it.chain[-1] for it in items} for s, items in out.items()}
        assert sum(len(a) for a in answers.values()) == 2  # both Mercurys were generated
        assert any(a == {"planet", "element"} for a in answers.values()), answers
        golden = {s: {g for it in items for g in it.golden_answers} for s, items in out.items()}
        assert not golden["train"] & golden["test"]


# --- answerability ---------------------------------------------------------------------------------------


def hit(doc_id: str) -> Hit:
    return Hit(doc_id, doc_id, doc_id.title(), "text", 1.0)


class FakeRetriever:
    """Fixed hits per query; ``missing`` ids are not in the corpus."""

    def __init__(self, results: dict[str, list[str]], missing: set[str] = frozenset()) -> None:
        self.results = results
        self.missing = set(missing)
        self.calls: list[tuple[list[str], int]] = []
        self.closed = False

    def search(self, queries, k):
        self.calls.append((list(queries), k))
        return [[hit(d) for d in self.results.get(q, [])][:k] for q in queries]

    def document(self, *, doc_id=None, title=None):
        if doc_id in self.missing:
            raise DocumentNotFound(f"no document {doc_id}")
        return Document(doc_id, doc_id, "text")

    def close(self):
        self.closed = True


def qa(i: int, chain: tuple[str, ...], mentions: list[str]) -> QAItem:
    return QAItem(
        id=f"q{i}",
        question=f"Q{i}",
        golden_answers=(chain[-1],),
        entities=tuple((d,) for d in chain),
        hops=len(chain) - 1,
        chain=chain,
        data_source="seekrl_synth",
        extra={"mentions": mentions},
    )


def test_evidence_queries_are_question_then_mentions():
    assert evidence_queries(qa(1, ("a", "b", "c"), ["B name", "C name"])) == [
        "Q1",
        "B name",
        "C name",
    ]
    plain = QAItem("x", "Who?", ("A",), None, None, None, "nq")
    assert evidence_queries(plain) == ["Who?"]


def test_answerability_per_hop_flags():
    items = [qa(1, ("a", "b", "c"), ["B name", "C name"]), qa(2, ("a", "c"), ["C alias"])]
    retriever = FakeRetriever(
        {
            "Q1": ["a"],  # anchor found
            "B name": ["x", "b"],  # found, but b is missing from the corpus
            "C name": ["x"],  # c not retrieved
            "Q2": ["c"],  # the anchor a is not retrieved
            "C alias": ["c"],
        },
        missing={"b"},
    )
    assert answerability(items, retriever, k=5) == [[True, False, False], [False, True]]
    assert retriever.calls == [(["Q1", "B name", "C name", "Q2", "C alias"], 5)]


def test_answerability_batches_and_top_k():
    items = [qa(1, ("a", "b"), ["B name"]), qa(2, ("c", "d"), ["D name"])]
    retriever = FakeRetriever({"Q1": ["a"], "B name": ["x", "b"], "Q2": ["c"], "D name": ["d"]})
    assert answerability(items, retriever, k=1, batch=3) == [[True, False], [True, True]]
    assert retriever.calls == [(["Q1", "B name", "Q2"], 1), (["D name"], 1)]
    assert answerability([], retriever, k=1) == []


# --- datasets: synthesize, synth_dataset, files_dataset ---------------------------------------------------


def write_corpus(path: Path, articles: list[Article]) -> Path:
    with path.open("w") as fh:
        for a in articles:
            row = {"id": a.doc_id, "contents": f'"{a.title}"\n{a.text}'}
            if a.description is not None:
                row["description"] = a.description
            fh.write(json.dumps(row) + "\n")
    return path


SIZES = {"train": 8, "validation": 3, "test": 3}


def synth_cfg(root: Path, corpus_path: Path, **kw) -> SynthDatasetConfig:
    fields = {
        "name": "synth",
        "corpus": CorpusConfig(source="jsonl", path=str(corpus_path)),
        "seed": 0,
        "train_size": SIZES["train"],
        "validation_size": SIZES["validation"],
        "test_size": SIZES["test"],
        "hop_weights": [0.5, 0.5],
        "answerability": AnswerabilityConfig(enabled=False),
        "output_dir": str(root / "out"),
        "cache_dir": str(root / "cache"),
        "progress": False,
    }
    fields.update(kw)
    return SynthDatasetConfig(**fields)


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory) -> tuple[SynthDatasetConfig, Path]:
    root = tmp_path_factory.mktemp("synth")
    cfg = synth_cfg(root, write_corpus(root / "corpus.jsonl", grid_articles()))
    assert cfg.problems() == []
    logs: list[str] = []
    out = synthesize(cfg, log=logs.append)
    assert logs and "entity graph: 40 articles" in logs[0]
    return cfg, out


def test_synthesize_writes_splits_and_reports(synthesized):
    cfg, out = synthesized
    assert out == Path(cfg.output_dir) == cfg.directory()
    names = {p.name for p in out.iterdir()}
    for split in SPLITS:
        assert {f"{split}.jsonl", f"{split}.parquet"} <= names
    assert {
        "graph_stats.json",
        "quality_report.md",
        "quality_report.json",
        "manifest.json",
    } <= names
    splits = {s: read_dataset(out / f"{s}.jsonl") for s in SPLITS}
    graph = build_graph(grid_articles(), GraphConfig())
    for split, items in splits.items():
        assert read_dataset(out / f"{split}.parquet") == items
        assert len(items) == SIZES[split]
        assert Counter(it.hops for it in items) == quotas_for(SIZES[split], [0.5, 0.5])
        assert [it.id for it in items] == [
            f"seekrl-synth-{split}-{i:06d}" for i in range(len(items))
        ]
        assert [(it.hops, it.chain) for it in items] == sorted((it.hops, it.chain) for it in items)
        for it in items:
            assert it.hops == len(it.chain) - 1
            assert all(b in graph.out(a) for a, b in itertools.pairwise(it.chain))
            assert it.golden_answers == aliases(graph.articles[it.chain[-1]].title)
            assert "answerable" not in it.extra  # None (not checked) is dropped
    answers = {s: {it.chain[-1] for it in items} for s, items in splits.items()}
    for a, b in itertools.combinations(SPLITS, 2):
        assert not answers[a] & answers[b], (a, b)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["key"] == cfg.key()
    assert manifest["sizes"] == SIZES
    stats = json.loads((out / "graph_stats.json").read_text())
    assert stats["articles"] == 40 and stats["edges"] == 67
    report = json.loads((out / "quality_report.json").read_text())
    assert report["sizes"] == SIZES
    assert report["answerability"] is None
    assert report["shortfall"] == manifest["shortfall"] == []
    assert report["sampling"]["attempts"] > 0
    assert report["settings"]["seed"] == 0
    markdown = (out / "quality_report.md").read_text()
    assert "Answer-uniqueness rejections" in markdown
    assert "Answerability" not in markdown
    assert "hop mix is exact" in markdown


def test_synth_dataset_reuses_matching_output(synthesized, monkeypatch):
    cfg, out = synthesized

    def boom(*args, **kwargs):
        raise AssertionError("synthesize must not run again")

    monkeypatch.setattr(datasets, "synthesize", boom)
    mtime = (out / "train.jsonl").stat().st_mtime_ns
    for split in SPLITS:
        assert synth_dataset(split, cfg=cfg) == read_dataset(out / f"{split}.jsonl")
    assert (out / "train.jsonl").stat().st_mtime_ns == mtime
    # Another setting changes the key, so the existing manifest no longer matches.
    other = dataclasses.replace(cfg, seed=1)
    assert other.key() != cfg.key()
    with pytest.raises(AssertionError, match="must not run again"):
        synth_dataset("train", cfg=other)
    with pytest.raises(DatasetError, match="split 'dev'"):
        synth_dataset("dev", cfg=cfg)


def test_synth_dataset_synthesizes_once_when_missing(tmp_path, monkeypatch):
    cfg = synth_cfg(tmp_path, write_corpus(tmp_path / "c.jsonl", grid_articles()), seed=2)
    calls = []
    real = datasets.synthesize

    def spy(c, **kw):
        calls.append(c)
        return real(c, log=lambda *a: None)

    monkeypatch.setattr(datasets, "synthesize", spy)
    test = synth_dataset("test", cfg=cfg)
    train = synth_dataset("train", cfg=cfg)
    assert len(calls) == 1
    assert len(test) == SIZES["test"] and len(train) == SIZES["train"]
    (cfg.directory() / "manifest.json").write_text("{not json")
    synth_dataset("validation", cfg=cfg)  # an unreadable manifest means "not ready"
    assert len(calls) == 2


def test_synthesize_drops_and_refills_unanswerable_questions(tmp_path, monkeypatch):
    arts = grid_articles()
    blocked = {f"g{i}" for i in range(GRID_COLS, 2 * GRID_COLS)}  # the second row is not indexed
    retriever = FakeRetriever({}, missing=blocked)
    everything = [a.doc_id for a in arts if a.doc_id not in blocked]
    retriever.search = lambda queries, k: [[hit(d) for d in everything] for _ in queries]
    monkeypatch.setattr(datasets, "_answerability_retriever", lambda cfg: retriever)
    cfg = synth_cfg(
        tmp_path,
        write_corpus(tmp_path / "c.jsonl", arts),
        seed=3,
        answerability=AnswerabilityConfig(enabled=True, k=5),
    )
    out = synthesize(cfg, log=lambda *a: None)
    assert retriever.closed
    report = json.loads((out / "quality_report.json").read_text())["answerability"]
    assert report["dropped"] > 0
    assert report["checked"] == sum(SIZES.values()) + report["dropped"]
    assert report["rate"] == pytest.approx(1 - report["dropped"] / report["checked"])
    for split, n in SIZES.items():
        items = read_dataset(out / f"{split}.jsonl")
        assert len(items) == n
        for it in items:
            assert it.extra["answerable"] is True
            assert not blocked & set(it.chain)
    assert "Answerability" in (out / "quality_report.md").read_text()
    assert json.loads((out / "manifest.json").read_text())["shortfall"] == []


def test_synthesize_reports_each_quota_it_cannot_fill(tmp_path):
    # Grid Town 0 -> 1 -> 2 -> 3 -> 4: four 1-hop walks, one per answer; with sizes 3 / 1 / 1 the
    # answers fall in validation, test, train, train; the walk 2 -> 3 starts at the test answer,
    # so the leak check refuses it and train gets 1 of its 3
    answers = [f"grid town {i}" for i in range(1, 5)]
    assert [split_of(a, 0, [3, 1, 1]) for a in answers] == [
        "validation",
        "test",
        "train",
        "train",
    ]
    cfg = synth_cfg(
        tmp_path,
        write_corpus(tmp_path / "c.jsonl", grid_articles(1, 5)),
        train_size=3,
        validation_size=1,
        test_size=1,
        hop_weights=[1.0],
        split_salt="",
        min_fill=0.3,
    )
    logs: list[str] = []
    out = synthesize(cfg, log=logs.append)
    assert {s: len(read_dataset(out / f"{s}.jsonl")) for s in SPLITS} == {
        "train": 1,
        "validation": 1,
        "test": 1,
    }
    (short,) = json.loads((out / "quality_report.json").read_text())["shortfall"]
    why = short.pop("why")
    assert short == {"split": "train", "hops": 1, "got": 1, "wanted": 3}
    leak, exhausted = why.split("; ")
    assert re.fullmatch(
        r"train walks that would leak a held-out question \(its answer or a link of its chain\) "
        r"were refused [1-9][0-9]* times",
        leak,
    )
    assert exhausted == (
        "walks exhausted: the corpus has no other valid 1-hop walk whose answer belongs to train"
    )
    expected = [{**short, "why": why}]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["shortfall"] == expected
    assert set(manifest["overlaps"].values()) == {0}
    assert f"[dataset] train 1-hop quota not filled: got 1 of 3: {why}" in logs
    assert f"- train 1-hop: 1 of 3; {why}" in (out / "quality_report.md").read_text()


def test_unfilled_quotas_say_why():
    wanted = {"train": {1: 2, 2: 2, 3: 1, 4: 1}, "test": {1: 1, 2: 0}}
    kept = {"train": [qa(0, ("a", "b"), ["B"]), qa(1, ("a", "c"), ["C"])], "test": []}
    stats = SynthesisStats(search={("train", 2): "exhausted", ("train", 3): "cut"})
    dropped = Counter({("train", 2): 4, ("test", 1): 1})
    rows = unfilled_quotas(wanted, kept, stats, dropped)
    assert [(r["split"], r["hops"], r["got"], r["wanted"]) for r in rows] == [
        ("train", 2, 0, 2),
        ("train", 3, 0, 1),
        ("train", 4, 0, 1),
        ("test", 1, 0, 1),
    ]
    whys = [r["why"] for r in rows]
    assert whys[0].startswith("the answerability check dropped 4; walks exhausted")
    assert whys[1].startswith("walk budget exhausted") and "attempts_per_question" in whys[1]
    assert whys[2] == f"{datasets.MAX_REFILL_ROUNDS} answerability refill rounds ran out"
    assert whys[3].startswith("the answerability check dropped 1; ")
    assert unfilled_quotas({"train": {1: 2}}, {"train": kept["train"]}, stats, Counter()) == []


def test_synthesize_fails_on_a_corpus_without_links(tmp_path):
    arts = [
        Article(f"d{i}", f"Island Number {name}", f"A remote place called {name}.", "remote island")
        for i, name in enumerate(("Alpha", "Bravo", "Charlie", "Delta"))
    ]
    cfg = synth_cfg(tmp_path, write_corpus(tmp_path / "c.jsonl", arts), attempts_per_question=2)
    with pytest.raises(SynthesisError, match=r"dataset\.train_size") as err:
        synthesize(cfg, log=lambda *a: None)
    assert "Fix:" in str(err.value)
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"hop_weights": []}, "hop_weights"),
        ({"hop_weights": [0.5, -0.1]}, "hop_weights"),
        ({"hop_weights": [0, 0]}, "hop_weights"),
        ({"train_size": -1}, "train_size"),
        ({"validation_size": -5}, "validation_size"),
        ({"fuzz_prob": 1.5}, "fuzz_prob"),
        ({"attempts_per_question": 0}, "attempts_per_question"),
        ({"min_fill": -0.1}, "min_fill"),
    ],
)
def test_synth_config_problems(change, path):
    cfg = SynthDatasetConfig(name="synth", **change)
    assert [p.path for p in cfg.problems()] == [path]


def test_synth_config_defaults_are_valid_and_key_ignores_locations(tmp_path):
    assert SynthDatasetConfig(name="synth").problems() == []
    assert SynthDatasetConfig(name="synth", train_size=0, hop_weights=[0, 1]).problems() == []
    path = write_corpus(tmp_path / "c.jsonl", grid_articles(1, 3))
    cfg = synth_cfg(tmp_path, path, output_dir=None)
    moved = dataclasses.replace(cfg, cache_dir=str(tmp_path / "elsewhere"), progress=True)
    assert moved.key() == cfg.key()
    assert dataclasses.replace(cfg, hop_weights=[1.0]).key() != cfg.key()
    assert cfg.directory() == cache_root(cfg.cache_dir) / "data" / f"synth-{cfg.key()}"


def test_files_dataset(tmp_path):
    items = [qa(i, ("a", "b"), ["B"]) for i in range(3)]
    jsonl, parquet = write_split(items, tmp_path, "train")
    cfg = FilesDatasetConfig(name="files", train=str(jsonl), validation=str(parquet))
    assert cfg.problems() == []
    assert files_dataset("train", cfg=cfg) == items
    assert files_dataset("validation", cfg=cfg) == items
    with pytest.raises(DatasetError, match=r"Fix: set dataset\.test="):
        files_dataset("test", cfg=cfg)
    missing = FilesDatasetConfig(name="files", train=str(tmp_path / "nope.jsonl"))
    assert [p.path for p in missing.problems()] == ["train"]
    with pytest.raises(DatasetError, match="no such file"):
        files_dataset("train", cfg=missing)
    with pytest.raises(DatasetError, match="expected one of"):
        files_dataset("dev", cfg=cfg)
