"""Every parser and extractor on model output runs in time linear in its input.

Each one is timed on a 1x and an 8x input of the same adversarial shape (unclosed, repeated and
nested tags, brackets inside a tool call); linear code takes about 8x as long, quadratic code about
64x. The bound is 8 * 4 = 32x the 1x time, each time the minimum of a few repeats. A shape that
exceeds it is measured again (at most three times), so a burst of load on a shared machine does not
fail the test, while quadratic code exceeds the bound every time.
"""

from __future__ import annotations

import gc
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.rewards.entity import EntityRewardConfig
from framework.rewards.entity_match import entity_match_rate
from framework.rewards.text import (
    extract_answer,
    extract_think,
    normalize_answer,
    substring_match,
    token_f1,
)
from framework.rollout.engine import token_kinds
from framework.rollout.parser import parse_call, parse_turn, scan_blocks

#: characters of a 1x input; the 8x input has about 8 times as many (~24k)
BASE_CHARS = 3000
SCALE = 8
SLACK = 4  # the bound is SCALE * SLACK times the 1x time
REPEATS = 3
ROUNDS = 3
#: a timed sample runs the parser this long at 1x (loops are added until it does), so the
#: timer's resolution and call overhead do not dominate
MIN_SAMPLE_S = 3e-4

_CALL = '<tool_call>{"name": "search", "arguments": {"queries": ["q"]}}</tool_call>'
#: name -> a unit repeated to fill the input, or a function of the input size in characters
SHAPES: dict[str, str | Callable[[int], str]] = {
    "unclosed-answer": "<answer>",
    "unclosed-answer-text": "<answer> x y",
    "unclosed-think": "<think>",
    "unclosed-tool_call": "<tool_call>",
    "repeated-open-tags": "<think><tool_call><answer>",
    "repeated-closed-blocks": "<think>a</think><answer>b</answer>",
    "closing-tags-only": "</answer></think></tool_call>",
    "broken-tags": "<answer</answer <think </tool_call><",
    "nested-answer": lambda n: "<answer>" * (n // 17) + "x" + "</answer>" * (n // 17),
    "nested-think": lambda n: "<think>" * (n // 15) + "x" + "</think>" * (n // 15),
    "nested-tool_call": lambda n: "<tool_call>" * (n // 23) + "{}" + "</tool_call>" * (n // 23),
    "braces-in-tool-call": lambda n: "<tool_call>" + "{" * n + "</tool_call>",
    "brackets-in-calls": "<tool_call>" + "[" * 300 + "]" * 300 + "</tool_call>",
    "valid-calls": _CALL,
    "letters": "a" * 39 + " ",
    "braces": "{",
    "brackets": lambda n: "[" * (n // 2) + "]" * (n // 2),
    "string-value": lambda n: '{"name": "search", "arguments": {"queries": ["' + "q" * n + '"]}}',
}
_TAG_SHAPES = [s for s in SHAPES if s not in ("braces", "brackets", "string-value")]
_TEXT_SHAPES = ["letters", "repeated-closed-blocks", "unclosed-answer-text", "braces"]
_CALL_SHAPES = ["braces", "brackets", "string-value"]  # bodies: parse_call reads what is inside

_ENTITY_CFG = EntityRewardConfig(name="e_grpo", lowercase=True, strip_punctuation=True)
_ENTITIES = [["<answer>" * 3 + "x"], ["a" * 40 + "b", "Steven Spielberg"], ["{" * 20]]


def _one(text: str) -> tuple[str]:
    return (text,)


def _tokens_of_4_chars(text: str) -> tuple[str, list[int]]:
    return text, [*range(4, len(text), 4), len(text)]


#: name -> (prepare the input outside the timer, the parser, the shapes it is timed on)
PARSERS: dict[str, tuple[Callable[[str], tuple[Any, ...]], Callable[..., Any], list[str]]] = {
    "extract_answer": (_one, extract_answer, _TAG_SHAPES),
    "extract_think": (_one, extract_think, _TAG_SHAPES),
    "parse_turn": (_one, parse_turn, _TAG_SHAPES),
    "scan_blocks": (_one, scan_blocks, _TAG_SHAPES),
    "token_kinds": (_tokens_of_4_chars, token_kinds, _TAG_SHAPES),
    "parse_call": (_one, parse_call, _CALL_SHAPES),
    "normalize_answer": (_one, normalize_answer, _TEXT_SHAPES),
    "substring_match": (
        lambda s: (s, ["a" * 40 + "b", "the answer"]),
        substring_match,
        _TEXT_SHAPES,
    ),
    "token_f1": (lambda s: (s, ["the answer x", "a b c"]), token_f1, _TEXT_SHAPES),
    "entity_match_rate": (lambda s: (s, _ENTITIES, _ENTITY_CFG), entity_match_rate, _TEXT_SHAPES),
}
CASES = [(parser, shape) for parser, (_, _, shapes) in PARSERS.items() for shape in shapes]


def make_input(shape: str, chars: int) -> str:
    """About ``chars`` characters of ``shape``."""
    unit = SHAPES[shape]
    if callable(unit):
        return unit(chars)
    return unit * max(1, chars // len(unit))


def _best_time(fn: Callable[..., Any], args: tuple[Any, ...], loops: int) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(loops):
            fn(*args)
        best = min(best, time.perf_counter() - start)
    return best


def scaling_ratio(fn: Callable[..., Any], small: tuple[Any, ...], large: tuple[Any, ...]) -> float:
    """Time on ``large`` over time on ``small`` (minimum of :data:`REPEATS` samples each)."""
    loops = 1
    while _best_time(fn, small, loops) < MIN_SAMPLE_S and loops < 1 << 12:
        loops *= 2
    gc.disable()  # no collection inside one sample (gc.collect() itself costs ~0.1 s here)
    try:
        return _best_time(fn, large, loops) / _best_time(fn, small, loops)
    finally:
        gc.enable()


@pytest.mark.parametrize(("parser", "shape"), CASES)
def test_parser_time_is_linear(parser: str, shape: str) -> None:
    prepare, fn, _ = PARSERS[parser]
    small = prepare(make_input(shape, BASE_CHARS))
    large = prepare(make_input(shape, BASE_CHARS * SCALE))
    ratios = []
    for _ in range(ROUNDS):
        ratios.append(scaling_ratio(fn, small, large))
        if ratios[-1] <= SCALE * SLACK:
            return
    pytest.fail(
        f"{parser} on {shape!r}: {SCALE}x the input took {min(ratios):.0f}x the time "
        f"(bound {SCALE * SLACK}x; rounds {[round(r) for r in ratios]}): not linear"
    )


def test_inputs_have_the_intended_size() -> None:
    for shape in SHAPES:
        small, large = make_input(shape, BASE_CHARS), make_input(shape, BASE_CHARS * SCALE)
        assert BASE_CHARS // 2 <= len(small) <= BASE_CHARS * 2, shape
        assert 6 <= len(large) / len(small) <= 10, shape


# -- the linear extract_answer keeps the regex's semantics ----------------------------------------
_ANSWER_REGEX = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def _regex_extract_answer(completion: str) -> str | None:
    """The former, quadratic implementation."""
    found = _ANSWER_REGEX.findall(completion)
    return found[-1].strip() if found else None


_PIECES = ["<answer>", "</answer>", "<answer", "answer>", "</", "<", ">", " x ", "\n", "<think>"]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=4)), max_size=20).map("".join))
@pytest.mark.slow
def test_extract_answer_matches_the_regex(text: str) -> None:
    assert extract_answer(text) == _regex_extract_answer(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>a<answer>b</answer>", "a<answer>b"),  # an opening tag inside a block is text
        ("<answer>a</answer><answer>b", "a"),  # an unclosed last block does not count
        ("<answer>a</answer></answer>", "a"),
        ("<answer></answer>", ""),
        ("<answer>x</answer><answer> y </answer>", "y"),
    ],
)
def test_extract_answer_edge_cases(text: str, expected: str) -> None:
    assert extract_answer(text) == expected == _regex_extract_answer(text)
