"""Text helpers, the outcome reward and E-GRPO's entity reward on hand-written rollouts."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from framework.rewards.entity import EntityRewardConfig, entity_reward
from framework.rewards.entity_match import entity_match_rate
from framework.rewards.outcome import OutcomeRewardConfig, outcome_reward
from framework.rewards.text import (
    exact_match,
    extract_answer,
    extract_think,
    normalize_answer,
    substring_match,
    token_f1,
)
from framework.types import RewardInputs

F64 = torch.float64


def _close(actual, expected):
    assert_close(actual.double(), torch.tensor(expected, dtype=F64), rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- text helpers


def test_extract_answer_takes_last_block_stripped():
    text = "<answer>draft</answer> more <think>x</think><answer>\n  Final One \n</answer> tail"
    assert extract_answer(text) == "Final One"


def test_extract_answer_none_without_block():
    assert extract_answer("<think>no answer</think>") is None
    assert extract_answer("<answer>unclosed") is None


def test_extract_answer_multiline():
    assert extract_answer("<answer>line 1\nline 2</answer>") == "line 1\nline 2"


def test_extract_think_joins_blocks_and_includes_unclosed_final_block():
    text = (
        "<think> first </think><tool_call>{}</tool_call>"
        "<tool_response>ignored</tool_response><think>second\nline</think>"
        "<answer>a</answer><think>trailing unclosed"
    )
    assert extract_think(text) == "first\nsecond\nline\ntrailing unclosed"


def test_extract_think_empty_without_blocks():
    assert extract_think("<answer>x</answer>") == ""


def test_normalize_answer_squad_style():
    # lower case, punctuation removed, articles a/an/the removed, whitespace collapsed
    assert normalize_answer("The  Quick, Brown   Fox!") == "quick brown fox"
    assert normalize_answer("An apple a day") == "apple day"
    # articles only as whole words: "theatre" and "banana" keep their letters
    assert normalize_answer("Theatre, banana") == "theatre banana"
    assert normalize_answer("U.S.A.") == "usa"


def test_exact_match():
    assert exact_match("the Eiffel Tower.", ["Paris", "Eiffel tower"])
    assert not exact_match("Eiffel Tower, Paris", ["Eiffel Tower"])
    assert not exact_match("Paris", [])


def test_substring_match():
    assert substring_match("He was born in Cincinnati, Ohio.", ["cincinnati"])
    assert not substring_match("Ohio", ["Cincinnati"])
    # golds that normalise to nothing never match (would otherwise be a substring of anything)
    assert not substring_match("anything", ["", "The"])


def test_token_f1_hand_values():
    # pred {steven, allan, spielberg} vs gold {steven, spielberg}: common 2,
    # precision 2/3, recall 1 -> F1 = 2 * (2/3) * 1 / (2/3 + 1) = 0.8
    assert token_f1("Steven Allan Spielberg", ["Steven Spielberg"]) == pytest.approx(0.8)
    # best over golds: "Spielberg" -> common 1, P 1/3, R 1 -> 0.5; "Steven Allan Spielberg" -> 1
    assert token_f1("Steven Allan Spielberg", ["Spielberg", "steven allan spielberg"]) == 1.0
    assert token_f1("Steven Allan Spielberg", ["Spielberg"]) == pytest.approx(0.5)
    # repeated tokens count with multiplicity: "new new york" vs "new york": common 2,
    # P 2/3, R 1 -> 0.8
    assert token_f1("new new york", ["New York"]) == pytest.approx(0.8)
    assert token_f1("Boston", ["New York"]) == 0.0
    assert token_f1("", ["New York"]) == 0.0


# --------------------------------------------------------------------------- hand-written batch
# Question A (group 10): "Who directed Jaws?"  gold: Steven Spielberg
ENT_A = [["Jaws"], ["Steven Spielberg", "Spielberg"]]
A = [
    # 0: correct; both entities in the think text
    "<think>The director of Jaws is Steven Spielberg</think><answer>Steven Spielberg</answer>",
    # 1: wrong; "Jaws" and only the alias "Spielberg"
    "<think>Jaws was directed by Spielberg, I believe</think><answer>George Lucas</answer>",
    # 2: wrong; entities only in the tool call / tool response / answer
    "<think>I should search.</think>"
    '<tool_call>{"name": "search", "arguments": {"query": ["Jaws director"]}}</tool_call>'
    "<tool_response>Jaws (1975) was directed by Steven Spielberg.</tool_response>"
    "<think>Not sure what I read.</think><answer>Steven Spielberg Jr</answer>",
    # 3: wrong; lower-case mention only
    "<think>the film jaws is a thriller</think><answer>Ridley Scott</answer>",
    # 4: wrong; entities only in the answer
    "<think>no idea</think><answer>Jaws, by Spielberg</answer>",
]
# Question B (group 3): "In which city was the director of Jaws born?"  gold: Cincinnati
ENT_B = [["Jaws"], ["Steven Spielberg", "Spielberg"], ["Cincinnati", "Cincinnati, Ohio"]]
B = [
    # 0: wrong, 2 of 3 entities
    "<think>Jaws is by Steven Spielberg.</think><answer>Los Angeles</answer>",
    # 1: wrong, 1 of 3
    "<think>Jaws.</think><answer>Phoenix</answer>",
    # 2: right answer and all 3 entities, but over budget
    "<think>Jaws, Steven Spielberg, Cincinnati</think><answer>Cincinnati</answer>",
    # 3: right answer, but a format error
    "<think>Jaws</think><answer>Cincinnati</answer>",
]


def batch(status_b=("ok", "ok", "over_budget", "format_error"), with_entities=True):
    completions = A + B
    columns = {
        "golden_answers": [["Steven Spielberg"]] * len(A) + [["Cincinnati"]] * len(B),
    }
    if with_entities:
        columns["entities"] = [ENT_A] * len(A) + [ENT_B] * len(B)
    return RewardInputs(
        group_index=torch.tensor([10] * len(A) + [3] * len(B)),
        completions=completions,
        columns=columns,
        status=["ok"] * len(A) + list(status_b),
    )


def e_cfg(**kw):
    return EntityRewardConfig(name="e_grpo", **kw)


def test_outcome_reward_em():
    # A: only 0 is an exact match ("Steven Spielberg Jr" is not). B: 2 and 3 are right, but
    # over_budget / format_error give 0.
    r = outcome_reward(batch(), cfg=OutcomeRewardConfig(name="outcome", metric="em"))
    _close(r, [1, 0, 0, 0, 0, 0, 0, 0, 0])


def test_outcome_reward_substring_and_f1():
    r = outcome_reward(batch(), cfg=OutcomeRewardConfig(name="outcome", metric="substring"))
    # A2's "Steven Spielberg Jr" contains the gold
    _close(r, [1, 0, 1, 0, 0, 0, 0, 0, 0])
    r = outcome_reward(batch(), cfg=OutcomeRewardConfig(name="outcome", metric="f1"))
    # A2: {steven, spielberg, jr} vs {steven, spielberg}: P 2/3, R 1 -> F1 0.8
    # A4: {jaws, by, spielberg} vs {steven, spielberg}: common 1, P 1/3, R 1/2
    #     -> 2 * (1/6) / (5/6) = 0.4
    _close(r, [1, 0, 0.8, 0, 0.4, 0, 0, 0, 0])


def test_outcome_reward_statuses():
    all_ok = outcome_reward(batch(status_b=("ok",) * 4), cfg=OutcomeRewardConfig(name="outcome"))
    _close(all_ok, [1, 0, 0, 0, 0, 0, 0, 1, 1])
    with pytest.raises(ValueError, match="status"):
        outcome_reward(
            batch(status_b=("ok", "ok", "timeout", "ok")), cfg=OutcomeRewardConfig(name="outcome")
        )


def test_outcome_reward_without_status_needs_answer_block():
    inp = RewardInputs(
        group_index=torch.tensor([0, 0]),
        completions=[
            "<think>Steven Spielberg</think>Steven Spielberg",
            "<answer>Spielberg</answer>",
        ],
        columns={"golden_answers": [["Steven Spielberg"], ["Spielberg"]]},
    )
    _close(outcome_reward(inp, cfg=OutcomeRewardConfig(name="outcome")), [0, 1])


def test_outcome_reward_accepts_bare_string_gold():
    inp = RewardInputs(
        group_index=torch.tensor([0]),
        completions=["<answer>the Cincinnati</answer>"],
        columns={"golden_answers": ["Cincinnati"]},
    )
    _close(outcome_reward(inp, cfg=OutcomeRewardConfig(name="outcome")), [1])


def test_e_grpo_exact_matching():
    # A (exact, case-sensitive surface forms "Jaws", "Steven Spielberg"):
    #   rates 1, 1/2 ("Spielberg" alone is only an alias), 0 (tool response/answer), 0 ("jaws"), 0
    #   max 1 -> wrong: 0.3 * 0.5 = 0.15, 0, 0, 0; the correct one 1
    # B: rates 2/3, 1/3, 1 (over budget), 1/3 (format error); max 1 (the max runs over the whole
    #   group) -> 0.3 * 2/3 = 0.2, 0.3 * 1/3 = 0.1, invalid -> 0, 0
    r = entity_reward(batch(), cfg=e_cfg())
    _close(r, [1, 0.15, 0, 0, 0, 0.2, 0.1, 0, 0])


def test_e_grpo_alias_matching():
    # A1 now also matches "Steven Spielberg" through its alias "Spielberg": rate 1 -> 0.3
    # B unchanged (aliases of "Cincinnati" never occur without the surface form)
    r = entity_reward(batch(), cfg=e_cfg(match="aliases"))
    _close(r, [1, 0.3, 0, 0, 0, 0.2, 0.1, 0, 0])


def test_e_grpo_lowercase_matching():
    # A3's "the film jaws" now matches "Jaws": rate 1/2 -> 0.15
    r = entity_reward(batch(), cfg=e_cfg(lowercase=True))
    _close(r, [1, 0.15, 0, 0.15, 0, 0.2, 0.1, 0, 0])


def test_e_grpo_alpha_scales_wrong_answers():
    r = entity_reward(batch(), cfg=e_cfg(alpha=0.5))
    _close(r, [1, 0.25, 0, 0, 0, 1 / 3, 1 / 6, 0, 0])


def test_e_grpo_alpha_zero_equals_outcome_em():
    for status in (("ok",) * 4, ("ok", "ok", "over_budget", "format_error")):
        inp = batch(status_b=status)
        expected = outcome_reward(inp, cfg=OutcomeRewardConfig(name="outcome", metric="em"))
        _close(entity_reward(inp, cfg=e_cfg(alpha=0.0)), expected.tolist())
    # independent check of the values: correct-and-valid rollouts only
    _close(
        entity_reward(batch(status_b=("ok",) * 4), cfg=e_cfg(alpha=0.0)),
        [1, 0, 0, 0, 0, 0, 0, 1, 1],
    )


def test_e_grpo_missing_entities_column_raises():
    with pytest.raises(ValueError) as err:
        entity_reward(batch(with_entities=False), cfg=e_cfg())
    assert "[reward.e_grpo]" in str(err.value)
    assert "entities" in str(err.value)


def test_e_grpo_entities_column_wrong_length_raises():
    inp = batch()
    inp.columns["entities"] = inp.columns["entities"][:-1]
    with pytest.raises(ValueError, match="entities"):
        entity_reward(inp, cfg=e_cfg())


def test_e_grpo_unknown_status_raises():
    with pytest.raises(ValueError, match="status"):
        entity_reward(batch(status_b=("ok", "crashed", "ok", "ok")), cfg=e_cfg())


def test_e_grpo_uses_given_think_texts():
    inp = batch(status_b=("ok",) * 4)
    # override: rollout A1's reasoning names nothing, A3's names both entities
    thinks = [extract_think(c) for c in inp.completions]
    thinks[1], thinks[3] = "nothing", "Jaws and Steven Spielberg"
    inp.think_texts = thinks
    r = entity_reward(inp, cfg=e_cfg())
    _close(r[:5], [1, 0, 0, 0.3, 0])


def test_entity_match_rate_options():
    cfg = e_cfg()
    assert entity_match_rate("Jaws", [], cfg) == 0.0
    # bare strings are entities without aliases
    assert entity_match_rate("Jaws and Duel", ["Jaws", "Duel", "Hook"], cfg) == pytest.approx(2 / 3)
    # punctuation stripping: "St. Louis" matches "St Louis" only with strip_punctuation
    assert entity_match_rate("born in St Louis", [["St. Louis"]], cfg) == 0.0
    assert (
        entity_match_rate("born in St Louis", [["St. Louis"]], e_cfg(strip_punctuation=True)) == 1.0
    )
    # aliases are ignored in exact mode
    assert entity_match_rate("Spielberg", [["Steven Spielberg", "Spielberg"]], cfg) == 0.0
    assert (
        entity_match_rate("Spielberg", [["Steven Spielberg", "Spielberg"]], e_cfg(match="aliases"))
        == 1.0
    )


def _pavlova(**kw):
    # a 1-hop question that names its anchor; E_q = {Anna Pavlova, Swan}
    inp = RewardInputs(
        group_index=torch.tensor([0, 0, 0]),
        completions=[
            "<think>x</think><answer>Swan</answer>",  # right
            "<think>Anna Pavlova was a ballerina</think><answer>Fairy</answer>",  # copies the anchor
            "<think>Anna Pavlova created The Dying Swan</think><answer>Dying</answer>",  # near miss
        ],
        columns={
            "question": ["Which bird does the article about Anna Pavlova name?"] * 3,
            "golden_answers": [["Swan"]] * 3,
            "entities": [[["Anna Pavlova"], ["Swan"]]] * 3,
        },
    )
    return entity_reward(inp, cfg=e_cfg(**kw))


def test_e_grpo_leaves_out_the_entities_the_question_names():
    # default: E_q = {Swan}; rates 0, 0, 1 -> max 1 -> wrong: 0 (copying the question earns
    # nothing) and 0.3 * 1 = 0.3 (the answer entity in the reasoning)
    _close(_pavlova(), [1, 0, 0.3])
    # the literal rule: E_q = {Anna Pavlova, Swan}; rates 0, 1/2, 1 -> 0.3 * 0.5 = 0.15, 0.3
    _close(_pavlova(skip_question_entities=False), [1, 0.15, 0.3])


def test_e_grpo_question_naming_every_entity_gives_grpo_rewards():
    inp = RewardInputs(
        group_index=torch.tensor([0, 0]),
        completions=["<think>Jaws</think><answer>no</answer>", "<answer>Jaws</answer>"],
        columns={
            "question": ["Who made Jaws?"] * 2,
            "golden_answers": [["Jaws"]] * 2,
            "entities": [[["Jaws"]]] * 2,
        },
    )
    _close(entity_reward(inp, cfg=e_cfg()), [0, 1])
