"""The entity graph: surface forms, dropped forms, greedy longest matching, edges, hubs and stats.

Every expected value below was worked out by reading the tiny corpus in :func:`corpus` by hand.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from framework.data.entity_graph import (
    MAX_FORM_TOKENS,
    Article,
    EntityGraph,
    GraphConfig,
    aliases,
    build_graph,
    find_mentions,
    strip_qualifier,
    surface_forms,
    tokens,
)


def corpus() -> list[Article]:
    """Twelve articles; the comments say what each one exercises."""
    return [
        # Mentions Spielberg only through a possessive, itself ("Jaws", no self-edge) and an
        # apostrophe title; "Steven Spielberg's" must link Spielberg, never the article "Steven".
        Article(
            "jaws",
            "Jaws (film)",
            "Jaws is a 1975 American thriller film. It was Steven Spielberg's first hit and was "
            "filmed on Martha's Vineyard.",
            "1975 film by Steven Spielberg",
        ),
        # Self-mention "Steven Spielberg" (no self-edge, and it hides "Steven").
        Article(
            "spielberg",
            "Steven Spielberg",
            "Steven Spielberg is an American filmmaker. He grew up in Cincinnati and became famous "
            "with Jaws.",
            "American filmmaker (born 1946)",
        ),
        # Lower-case "city" twice (makes the title "City" generic); "Ohio River" still links Ohio.
        Article(
            "cincinnati",
            "Cincinnati",
            "Cincinnati is a city in Ohio. The city lies on the Ohio River.",
            "City in Ohio, United States",
        ),
        Article(
            "ohio",
            "Ohio",
            "Ohio is a state in the Midwestern United States. Its capital is Columbus.",
            "U.S. state",
        ),
        # "Mercury" is ambiguous (no edge); "Ohio" links (second in-link: a hub at max_in_degree=1);
        # lower-case "martha's vineyard" and "ohio" must not link.
        Article(
            "thermometer",
            "Thermometer",
            "Old thermometers were filled with Mercury. Many were made in Ohio. A travel page about "
            "martha's vineyard spells ohio in lower case.",
            "instrument that measures temperature",
        ),
        Article(
            "planet",
            "Mercury (planet)",
            "Mercury is the smallest planet in the Solar System.",
            "smallest planet in the Solar System",
        ),
        # "Hg" is shorter than min_form_chars: no edge to the article "Hg".
        Article(
            "element",
            "Mercury (element)",
            "Mercury is a chemical element with the symbol Hg.",
            "chemical element with symbol Hg",
        ),
        Article(
            "city",
            "City",
            "A City is a large human settlement, bigger than a town.",
            "large human settlement",
        ),
        Article("y1984", "1984", "1984 was a leap year.", "year"),
        Article("steven", "Steven", "Steven is a masculine given name.", "masculine given name"),
        # "1984" is numeric (no edge); a lone "Steven" links the article "Steven".
        Article(
            "marthas",
            "Martha's Vineyard",
            "Martha's Vineyard is an island south of Cape Cod. In 1984 a man named Steven filmed "
            "there.",
            "island south of Cape Cod",
        ),
        Article("hg", "Hg", "Hg is the chemical symbol of an element.", "chemical symbol"),
    ]


EXPECTED_EDGES = {
    "jaws": {"spielberg": "Steven Spielberg", "marthas": "Martha's Vineyard"},
    "spielberg": {"cincinnati": "Cincinnati", "jaws": "Jaws"},
    "cincinnati": {"ohio": "Ohio"},
    "ohio": {},
    "thermometer": {"ohio": "Ohio"},
    "planet": {},
    "element": {},
    "city": {},
    "y1984": {},
    "steven": {},
    "marthas": {"steven": "Steven"},
    "hg": {},
}


@pytest.fixture(scope="module")
def graph() -> EntityGraph:
    return build_graph(corpus(), GraphConfig(max_in_degree=1))


# --- small helpers ----------------------------------------------------------------------------------


def test_tokens_split_words_and_punctuation_keeping_case():
    assert tokens("Martha's Vineyard, 1975.") == ["Martha", "'", "s", "Vineyard", ",", "1975", "."]
    assert tokens("Jaws (film)") == ["Jaws", "(", "film", ")"]
    assert tokens("  ") == []


@pytest.mark.parametrize(
    ("title", "short"),
    [
        ("Mercury (planet)", "Mercury"),
        ("Jaws (film)", "Jaws"),
        ("Love (2015 film)", "Love"),
        ("Ohio", "Ohio"),
        ("Rock (music) band", "Rock (music) band"),  # the qualifier must be trailing
        ("(film)", "(film)"),  # nothing before the qualifier
        ("Washington, D.C.", "Washington, D.C."),
    ],
)
def test_strip_qualifier(title, short):
    assert strip_qualifier(title) == short


def test_aliases_title_first_then_short_form():
    assert aliases("Mercury (planet)") == ("Mercury (planet)", "Mercury")
    assert aliases("Ohio") == ("Ohio",)
    assert aliases("Steven Spielberg") == ("Steven Spielberg",)


def test_graph_config_problems():
    assert GraphConfig().problems() == []
    paths = [p.path for p in GraphConfig(min_form_chars=0).problems()]
    assert paths == ["min_form_chars"]
    assert [p.path for p in GraphConfig(generic_ratio=0.0).problems()] == ["generic_ratio"]
    assert [p.path for p in GraphConfig(max_in_degree=0).problems()] == ["max_in_degree"]


# --- find_mentions ----------------------------------------------------------------------------------

FORMS = {
    ("Steven",): "steven",
    ("Steven", "Spielberg"): "spielberg",
    ("Spielberg", "Films"): "studio",
    ("Ohio",): "ohio",
}


def test_find_mentions_greedy_longest_non_overlapping():
    toks = tokens("Steven Spielberg Films opened in Ohio; Steven came too.")
    # "Steven Spielberg" wins at position 0 and consumes "Spielberg", so "Spielberg Films"
    # (which overlaps it) is never matched.
    # tokens: Steven(0) Spielberg(1) Films(2) opened(3) in(4) Ohio(5) ;(6) Steven(7) ...
    assert find_mentions(toks, FORMS, max_len=2) == [
        ("spielberg", 0, 2),
        ("ohio", 5, 6),
        ("steven", 7, 8),
    ]


def test_find_mentions_respects_max_len_and_case():
    toks = tokens("Steven Spielberg and steven and OHIO")
    assert find_mentions(toks, FORMS, max_len=1) == [("steven", 0, 1)]
    assert find_mentions([], FORMS, max_len=2) == []


def test_find_mentions_repeats_each_occurrence():
    toks = tokens("Ohio, Ohio and Ohio")
    # tokens: Ohio(0) ,(1) Ohio(2) and(3) Ohio(4)
    assert find_mentions(toks, FORMS, max_len=2) == [("ohio", 0, 1), ("ohio", 2, 3), ("ohio", 4, 5)]


# --- build_graph on the corpus -----------------------------------------------------------------------


def test_edge_targets_exactly_as_expected(graph):
    assert {s: set(t) for s, t in graph.edges.items()} == {
        s: set(t) for s, t in EXPECTED_EDGES.items()
    }


def test_edge_mentions_exactly_as_expected_for_plain_word_forms(graph):
    # Every edge except the apostrophe one (see test_mention_text_is_the_source_text below).
    plain = {
        s: {t: m for t, m in targets.items() if "'" not in m}
        for s, targets in EXPECTED_EDGES.items()
    }
    got = {
        s: {t: m for t, m in targets.items() if t != "marthas"}
        for s, targets in graph.edges.items()
    }
    assert got == plain


def test_matching_rules_on_the_corpus(graph):
    assert "jaws" not in graph.out("jaws")  # self-mention
    assert "spielberg" not in graph.out("spielberg")
    assert graph.out("jaws")["spielberg"] == "Steven Spielberg"  # possessive "Spielberg's"
    targets = Counter(t for out in graph.edges.values() for t in out)
    # "Steven" is a valid form (Martha's Vineyard links it) but "Steven Spielberg" is matched
    # first wherever it occurs.
    assert graph.forms[("Steven",)] == "steven"
    assert targets["steven"] == 1
    # Ambiguous, generic, numeric and too-short forms never produce edges.
    for doc in ("planet", "element", "city", "y1984", "hg"):
        assert targets[doc] == 0, doc
    # Lower-case "martha's vineyard" / "ohio" in the thermometer text do not link.
    assert graph.out("thermometer") == {"ohio": "Ohio"}
    assert graph.out("unknown") == {}


def test_surface_forms_and_dropped_reasons(graph):
    assert graph.dropped == {"numeric": 1, "generic_word": 1, "ambiguous": 1, "too_short": 1}
    assert graph.forms == {
        ("Jaws", "(", "film", ")"): "jaws",
        ("Jaws",): "jaws",
        ("Steven", "Spielberg"): "spielberg",
        ("Cincinnati",): "cincinnati",
        ("Ohio",): "ohio",
        ("Thermometer",): "thermometer",
        ("Mercury", "(", "planet", ")"): "planet",
        ("Mercury", "(", "element", ")"): "element",
        ("Steven",): "steven",
        ("Martha", "'", "s", "Vineyard"): "marthas",
    }


def test_word_case_counts(graph):
    # "city" twice lower-case; "City" never standalone ("A City" follows a capital).
    assert graph.lower_counts["city"] == 2
    assert graph.standalone_counts["City"] == 0
    # "Ohio": "in Ohio." twice standalone; "the Ohio River" and the sentence start are not.
    assert graph.standalone_counts["Ohio"] == 2
    assert graph.lower_counts["ohio"] == 1
    assert graph.standalone_counts["American"] == 2


def test_generic_ratio_controls_generic_words():
    # "city" appears twice lower-case, "City" never standalone: generic at ratio 1 and 2, not 3.
    for ratio, generic in ((1.0, True), (2.0, True), (3.0, False)):
        g = build_graph(corpus(), GraphConfig(generic_ratio=ratio))
        assert (("City",) not in g.forms) is generic, ratio
        assert ("generic_word" in g.dropped) is generic, ratio


@pytest.mark.parametrize(
    ("title", "reason"),
    [
        ("tea", "generic_word"),  # a lower-case title is an ordinary word
        ("42", "too_short"),  # length is checked before digits
        ("1984", "numeric"),
        ("1,000", "numeric"),
        ("Hg", "too_short"),
        (" ".join(["Word"] * (MAX_FORM_TOKENS + 1)), "too_long_or_empty"),
    ],
)
def test_dropped_form_reasons(title, reason):
    forms, dropped = surface_forms(
        [Article("d", title, "text")], Counter(), Counter(), GraphConfig()
    )
    assert forms == {}
    assert dropped == {reason: 1}


def test_unambiguous_forms_survive_with_min_form_chars():
    arts = [Article("a", "Ab", "x"), Article("b", "Abc", "y")]
    forms, dropped = surface_forms(arts, Counter(), Counter(), GraphConfig(min_form_chars=2))
    assert forms == {("Ab",): "a", ("Abc",): "b"}
    assert dropped == {}


def test_doc_ids_not_titles_key_the_edges():
    arts = [
        Article("id-1", "Alpha Centauri", "Alpha Centauri is near Proxima Centauri."),
        Article("id-2", "Proxima Centauri", "Proxima Centauri orbits Alpha Centauri."),
    ]
    g = build_graph(arts, GraphConfig())
    assert g.edges == {
        "id-1": {"id-2": "Proxima Centauri"},
        "id-2": {"id-1": "Alpha Centauri"},
    }


def test_first_occurrence_text_is_kept():
    arts = [
        Article("a", "Mercury (planet)", "Mercury (planet) and Mercury again."),
        Article("b", "Venus", "Venus is next to Mercury. It is not Mercury (planet) again."),
    ]
    g = build_graph(arts, GraphConfig())
    # "Mercury" (unambiguous here) is matched first; the later full title does not overwrite it.
    assert g.out("b") == {"a": "Mercury"}


def test_title_with_colon_mention_text():
    arts = [
        Article("odyssey", "2001: A Space Odyssey", "A 1968 film."),
        Article("kubrick", "Stanley Kubrick", "Kubrick directed 2001: A Space Odyssey in 1968."),
    ]
    g = build_graph(arts, GraphConfig())
    assert g.out("kubrick") == {"odyssey": "2001: A Space Odyssey"}


@pytest.mark.parametrize(
    ("title", "text"),
    [
        ("Martha's Vineyard", "They sailed to Martha's Vineyard."),
        ("Jean-Paul Sartre", "She read Jean-Paul Sartre in Paris."),
        ("Jaws (film)", "He watched Jaws (film) twice."),
    ],
)
def test_mention_text_is_the_source_text(title, text):
    g = build_graph([Article("t", title, "x"), Article("s", "Source", text)], GraphConfig())
    assert g.out("s") == {"t": title}


# --- common words, hubs, stats ---------------------------------------------------------------------


def test_is_common_word(graph):
    assert graph.is_common_word("City")  # "city" x2 lower-case, "City" never standalone
    assert graph.is_common_word("city")
    assert not graph.is_common_word("American")  # standalone capitalised twice, never lower-case
    assert not graph.is_common_word("Ohio")  # standalone 2 > lower-case 1
    assert not graph.is_common_word("American-born")  # judged by its first part
    assert graph.is_common_word("City-wide")


def test_is_common_word_false_for_possessives_and_abbreviations():
    arts = [Article("e", "Earth", "Life on Earth is old. The U.S. is on Earth too.")]
    g = build_graph(arts, GraphConfig())
    assert g.standalone_counts["Earth"] == 2 and g.lower_counts["earth"] == 0
    assert not g.is_common_word("Earth's")
    assert not g.is_common_word("U.S.")


def test_in_degree_and_is_hub(graph):
    indeg = graph.in_degree()
    assert indeg == Counter(
        {"spielberg": 1, "marthas": 1, "cincinnati": 1, "jaws": 1, "ohio": 2, "steven": 1}
    )
    assert graph.is_hub("ohio")  # 2 > max_in_degree=1
    assert not graph.is_hub("jaws")  # 1 is not above the limit
    assert not graph.is_hub("city")  # no in-links
    assert graph.is_hub("jaws", Counter({"jaws": 5}))  # a supplied count is used as is
    relaxed = build_graph(corpus(), GraphConfig(max_in_degree=2))
    assert not relaxed.is_hub("ohio")


def test_stats_numbers(graph):
    assert graph.stats() == {
        "articles": 12,
        "surface_forms": 10,
        "dropped_forms": {"numeric": 1, "generic_word": 1, "ambiguous": 1, "too_short": 1},
        "edges": 7,
        "articles_with_out_edges": 5,  # jaws, spielberg, cincinnati, thermometer, marthas
        "mean_out_degree": 1.4,
        "hubs_over_max_in_degree": 1,
        "top_hubs": [("ohio", 2)],
        # jaws->spielberg->{cincinnati, jaws} 2, jaws->marthas->steven 1,
        # spielberg->cincinnati->ohio 1, spielberg->jaws->{spielberg, marthas} 2; through ohio: none
        "two_hop_chains_through_non_hubs": 6,
    }


def test_stats_of_an_empty_graph():
    g = build_graph([], GraphConfig())
    stats = g.stats()
    assert stats["articles"] == 0 and stats["edges"] == 0
    assert stats["mean_out_degree"] == 0.0
    assert stats["top_hubs"] == []


def test_save_stats_writes_json(graph, tmp_path):
    path = tmp_path / "graph_stats.json"
    stats = graph.save_stats(path)
    loaded = json.loads(path.read_text())
    assert loaded["edges"] == stats["edges"] == 7
    assert loaded["top_hubs"] == [["ohio", 2]]
