"""The synthesizer's leak check and E-GRPO's entity matching are one matcher.

A question may not contain an entity it hides (a bridge or the answer) under any matching setting the
reward offers, since restating such a question would earn γ. Expected flags are worked out by hand.
"""

from __future__ import annotations

import itertools

import pytest

from framework.data.entity_graph import Article, GraphConfig, build_graph
from framework.data.synthesis import QuestionSynthesizer
from framework.rewards.entity import MATCH_CHOICES, EntityRewardConfig
from framework.rewards.entity_match import (
    SELECTABLE,
    EntityMatching,
    entities_found,
    entities_found_by_any,
    entity_match_rate,
)


def reward_configs() -> list[EntityRewardConfig]:
    """Every matching setting a user can give ``reward=e_grpo``."""
    return [
        EntityRewardConfig(name="e_grpo", match=m, lowercase=low, strip_punctuation=strip)
        for m, low, strip in itertools.product(MATCH_CHOICES, (False, True), (False, True))
    ]


def test_selectable_is_every_reward_setting():
    assert {cfg.matching() for cfg in reward_configs()} == set(SELECTABLE)


# (question, the hidden entity's forms: surface form first, leaks?) -- by hand:
LEAK_CASES = [
    # inside another word: the measured bug ("Austria" in "Austrian Empire")
    (
        "Name the country in Central Europe that the article about Austrian Empire refers to.",
        ("Austria",),
        True,
    ),
    ("Which city in Ohio is mentioned?", ("Ohio",), True),  # exact
    ("Which city in OHIO is mentioned?", ("Ohio",), True),  # lowercase only
    ("Name the artist in that article.", ("Art",), True),  # lowercase, inside "artist"/"article"
    ("Which band did R E M tour with?", ("R.E.M.",), True),  # punctuation as spaces only
    ("It mentions New York City.", ("Big Apple", "New York City"), True),  # an alias only
    ("It mentions Jaws (film).", ("Jaws", "Jaws (film)"), True),
    # exact finds it, lowercase does not (final sigma): the loosest setting alone would miss it
    ("Το άρθρο για ΟΔΥΣΣΕΑΣ", ("ΟΔΥΣ",), True),
    ("Which river flows through Vienna?", ("Danube",), False),
    ("Which river flows through Vienna?", ("",), False),  # an empty form matches nothing
    ("Which island is south of Cape Cod?", ("Martha's Vineyard", "Vineyard"), False),
]


@pytest.mark.parametrize(("question", "forms", "leaks"), LEAK_CASES)
def test_leak_check_agrees_with_the_reward(question, forms, leaks):
    assert entities_found_by_any(question, [forms]) == [leaks]
    rewarded = [entity_match_rate(question, [forms], cfg) > 0 for cfg in reward_configs()]
    assert any(rewarded) is leaks


def test_final_sigma_is_found_by_exact_matching_only():
    text, forms = "Το άρθρο για ΟΔΥΣΣΕΑΣ", ["ΟΔΥΣ"]
    assert entities_found(text, forms, EntityMatching()) == [True]
    assert entities_found(text, forms, EntityMatching(True, True, True)) == [False]


def test_entities_found_by_any_keeps_order_and_handles_no_entities():
    q = "The article on Austrian Empire mentions a city."
    assert entities_found_by_any(q, [("Danube",), ("Austria",), "city"]) == [False, True, True]
    assert entities_found_by_any(q, []) == []
    only_exact = [EntityMatching()]
    assert entities_found_by_any("in OHIO", ["Ohio"], only_exact) == [False]


def empire_graph():
    """Austrian Empire -> {Austria, Vienna}; neither target links on, so the empire is the only
    anchor and there are exactly two 1-hop walks."""
    arts = [
        Article(
            "empire",
            "Austrian Empire",
            "The Austrian Empire was ruled from Vienna, in Austria.",
            "empire in Europe",
        ),
        Article("austria", "Austria", "Austria is a country.", "country in Central Europe"),
        Article("vienna", "Vienna", "Vienna is a city.", "capital city on the Danube"),
    ]
    return build_graph(arts, GraphConfig())


def test_answer_inside_another_word_of_the_question_is_rejected():
    g = empire_graph()
    assert g.out("empire").keys() == {"austria", "vienna"}
    synth = QuestionSynthesizer(g, seed=0, fuzz_prob=0.0)
    assert synth.anchors == ["empire"]
    # every template names the anchor "Austrian Empire", which contains the answer "Austria"
    for index in range(6):
        assert synth.item(["empire", "austria"], [synth.clues["austria"]], "train", index) is None
    assert synth.stats.rejections["name_leak"] == 6
    kept = synth.item(["empire", "vienna"], [synth.clues["vienna"]], "train", 0)
    assert kept is not None and "Austrian Empire" in kept.question
    out = synth.generate({"train": {1: 2}}, [1, 0, 0], max_attempts=100, progress=False)
    assert [it.chain for it in out["train"]] == [("empire", "vienna")]
    assert synth.stats.search == {("train", 1): "exhausted"}  # only one of the two is usable


def test_every_kept_question_passes_every_reward_setting():
    g = empire_graph()
    synth = QuestionSynthesizer(g, seed=1, fuzz_prob=0.0)
    out = synth.generate({"train": {1: 2}}, [1, 0, 0], max_attempts=100, progress=False)
    for it in out["train"]:
        # the anchor is named on purpose and found; no hidden entity is
        for cfg in reward_configs():
            assert entity_match_rate(it.question, it.entities[:1], cfg) == 1.0
            assert entity_match_rate(it.question, it.entities[1:], cfg) == 0.0
