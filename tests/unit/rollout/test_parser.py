"""parse_turn / parse_call: hand cases, fuzzing (never raises, well-typed result), huge inputs."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.rollout.parser import (
    MAX_CALL_CHARS,
    MAX_QUERIES_PER_CALL,
    STOP_STRINGS,
    TOOLS,
    ToolCall,
    Turn,
    parse_call,
    parse_turn,
)

from .fakes import FUZZ_PIECES

FUZZ = settings(max_examples=300, deadline=None)


def call(name: object, **arguments: object) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


# -- hand cases ------------------------------------------------------------------------------------
def test_stop_strings_are_the_closing_tags_that_end_a_turn():
    assert set(STOP_STRINGS) == {"</tool_call>", "</answer>"}


def test_search_with_a_list_of_queries():
    turn = parse_turn("<think>look it up</think>" + call("search", queries=[" a b ", "c"]))
    assert turn.calls == [ToolCall("search", queries=("a b", "c"))]
    assert turn.errors == [] and turn.answer is None and turn.malformed is None
    assert turn.think == "look it up"


def test_search_with_a_single_query_string():
    turn = parse_turn(call("search", query="who directed Jaws"))
    assert turn.calls == [ToolCall("search", queries=("who directed Jaws",))]
    turn = parse_turn(call("search", queries="one string"))
    assert turn.calls == [ToolCall("search", queries=("one string",))]


def test_visit_by_title_and_by_doc_id():
    turn = parse_turn(call("visit", title=" Jaws (film) ", goal="director"))
    assert turn.calls == [ToolCall("visit", title="Jaws (film)", goal="director")]
    turn = parse_turn(call("visit", doc_id="d42"))
    assert turn.calls == [ToolCall("visit", doc_id="d42")]
    # doc_id wins over title; a non-string goal is dropped
    turn = parse_turn(call("visit", doc_id="d1", title="T", goal=3))
    assert turn.calls == [ToolCall("visit", doc_id="d1")]


def test_several_calls_in_one_turn_keep_their_order():
    text = call("search", queries=["x"]) + "\n" + call("visit", title="X") + call("nope")
    turn = parse_turn(text)
    assert [c.name for c in turn.calls] == ["search", "visit"]
    assert len(turn.errors) == 1 and "unknown tool" in turn.errors[0]


def test_answer():
    turn = parse_turn("<think>easy</think>\n<answer> Paris </answer>")
    assert turn.answer == "Paris"
    assert turn.calls == [] and turn.errors == [] and turn.malformed is None
    assert turn.think == "easy"


def test_answer_plus_calls_answer_wins():
    text = call("search", queries=["x"]) + call("bogus") + "<answer>42</answer>"
    turn = parse_turn(text)
    assert turn.answer == "42"
    assert turn.calls == [] and turn.errors == [] and turn.malformed is None


def test_think_blocks_are_joined_including_an_unclosed_final_one():
    turn = parse_turn("<think> one </think>\n<think></think><think>two</think><think> three")
    assert turn.think == "one\ntwo\nthree"
    assert turn.malformed == "no <tool_call> and no <answer>"


def test_an_unclosed_block_runs_to_the_end_of_the_turn():
    # like the engine's segments: a call after an unclosed <think> is part of the thinking
    text = "<think>maybe " + call("search", queries=["x"])
    turn = parse_turn(text)
    assert turn.calls == [] and turn.errors == []
    assert turn.think == text[len("<think>") :].strip()
    assert turn.malformed == "no <tool_call> and no <answer>"
    # an unclosed <tool_call> swallows a later answer
    turn = parse_turn('<tool_call>{"name": <answer>x</answer>')
    assert turn.answer is None and turn.malformed == "unclosed <tool_call> block"


def test_invalid_json_is_an_error_message_not_an_exception():
    turn = parse_turn('<tool_call>{"name": "search", "arguments": {"queries": ["x"]}</tool_call>')
    assert turn.calls == [] and turn.malformed is None
    assert len(turn.errors) == 1 and "not valid JSON" in turn.errors[0]
    assert "not valid JSON" in parse_call("")
    assert "JSON object" in parse_call("[1, 2]")


@pytest.mark.parametrize("name", ["browse", None, 7, ["search"], {"a": 1}])
def test_unknown_tool(name):
    err = parse_call(json.dumps({"name": name, "arguments": {"queries": ["x"]}}))
    assert isinstance(err, str) and "unknown tool" in err
    for tool in TOOLS:
        assert tool in err


@pytest.mark.parametrize(
    "arguments, fragment",
    [
        ({}, "search needs 'queries'"),
        ({"queries": []}, "search needs 'queries'"),
        ({"queries": None}, "search needs 'queries'"),
        ({"queries": {"q": "x"}}, "search needs 'queries'"),
        ({"queries": ["ok", "  "]}, "non-empty strings"),
        ({"queries": ["ok", 3]}, "non-empty strings"),
    ],
)
def test_search_with_missing_or_bad_arguments(arguments, fragment):
    err = parse_call(json.dumps({"name": "search", "arguments": arguments}))
    assert isinstance(err, str) and fragment in err


def test_missing_or_non_object_arguments():
    assert "search needs 'queries'" in parse_call('{"name": "search"}')
    assert "must be a JSON object" in parse_call('{"name": "search", "arguments": ["x"]}')
    assert "visit needs 'title'" in parse_call('{"name": "visit", "arguments": {}}')
    assert "visit needs 'title'" in parse_call('{"name": "visit", "arguments": {"title": " "}}')


def test_too_many_queries():
    ok = parse_call(json.dumps({"name": "search", "arguments": {"queries": ["q"] * 8}}))
    assert isinstance(ok, ToolCall) and len(ok.queries) == MAX_QUERIES_PER_CALL
    err = parse_call(
        json.dumps({"name": "search", "arguments": {"queries": ["q"] * (MAX_QUERIES_PER_CALL + 1)}})
    )
    assert isinstance(err, str) and f"at most {MAX_QUERIES_PER_CALL}" in err


def test_oversized_call():
    body = json.dumps({"name": "search", "arguments": {"queries": ["x" * MAX_CALL_CHARS]}})
    err = parse_call(body)
    assert isinstance(err, str) and f"at most {MAX_CALL_CHARS}" in err
    turn = parse_turn(f"<tool_call>{body}</tool_call>")
    assert turn.calls == [] and len(turn.errors) == 1 and turn.malformed is None


def test_no_tags_is_malformed():
    turn = parse_turn("I think the answer is Paris.")
    assert turn == Turn(malformed="no <tool_call> and no <answer>")
    assert parse_turn("").malformed == "no <tool_call> and no <answer>"


def test_unclosed_tool_call_or_answer_is_malformed_unclosed():
    turn = parse_turn('<think>ok</think><tool_call>{"name": "search", "arguments": {')
    assert turn.malformed is not None and "unclosed" in turn.malformed
    assert "<tool_call>" in turn.malformed
    assert turn.think == "ok" and turn.calls == [] and turn.errors == []
    turn = parse_turn("<answer>Par")
    assert turn.answer is None and turn.malformed == "unclosed <answer> block"


def test_non_string_input_is_parsed_as_its_str():
    assert parse_turn(None).malformed == "no <tool_call> and no <answer>"
    assert parse_turn(b"<answer>x</answer>").answer == "x"  # str(bytes) keeps the tags

    class Evil:
        def __str__(self) -> str:
            raise RuntimeError("boom")

    turn = parse_turn(Evil())
    assert isinstance(turn, Turn) and turn.malformed is not None


def test_deeply_nested_json_in_a_tool_call_is_an_error_message():
    deep = "[" * 1999 + "]" * 1999  # deeper than the interpreter's recursion limit
    assert "nested too deeply" in parse_call(deep) or "not valid JSON" in parse_call(deep)
    for body in [deep, '{"a":' * 650 + "1" + "}" * 650, "[" * 3999, '{"name": ' + "[" * 3980]:
        assert len(body) <= MAX_CALL_CHARS
        err = parse_call(body)  # no RecursionError
        assert isinstance(err, str) and err
        turn = parse_turn(f"<tool_call>{body}</tool_call>")
        assert len(turn.errors) == 1 and turn.calls == []


# -- huge inputs: a guard against super-linear parsing (not a benchmark) ---------------------------
MB = 1_000_000


@pytest.mark.parametrize(
    "text",
    [
        "<think>" * (MB // 7),
        "<tool_call>" * (MB // 11),
        "<answer>" * (MB // 8),
        "[" * MB,
        "<tool_call>" + "[" * MB + "</tool_call>",
        "<tool_call>" + "[" * MB,
        ("<think>" + "x" * 50) * (MB // 57),
        "<think>" + "</think" * (MB // 8),
        ("<" * 20 + "think>") * (MB // 26),
    ],
    ids=[
        "nested-think",
        "nested-tool_call",
        "nested-answer",
        "brackets",
        "huge-call",
        "huge-unclosed-call",
        "think-text",
        "broken-closes",
        "angle-soup",
    ],
)
def test_huge_inputs_return_in_bounded_time(text):
    t0 = time.perf_counter()
    turn = parse_turn(text)
    elapsed = time.perf_counter() - t0
    assert isinstance(turn, Turn)
    assert elapsed < 2.0, f"parse_turn took {elapsed:.2f} s on {len(text)} characters"


# -- fuzzing -------------------------------------------------------------------------------------
PIECES = [*FUZZ_PIECES, '"query"', '"doc_id"', '"x"', "\\ud800"]

adversarial = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)), max_size=60).map(
    "".join
)

# well-formed calls with random argument values, so the ToolCall paths are exercised too
json_scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=12))
json_values = st.recursive(
    json_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=10,
)
call_bodies = st.builds(
    lambda name, args: json.dumps({"name": name, "arguments": args}),
    st.one_of(st.sampled_from(["search", "visit"]), json_values),
    st.one_of(
        st.fixed_dictionaries(
            {},
            optional={
                "queries": st.one_of(json_values, st.lists(st.text(max_size=10), max_size=10)),
                "query": json_values,
                "title": json_values,
                "doc_id": json_values,
                "goal": json_values,
                "url": json_values,
            },
        ),
        json_values,
    ),
)
structured = st.lists(
    st.one_of(
        adversarial,
        call_bodies.map(lambda b: f"<tool_call>{b}</tool_call>"),
        st.text(max_size=10).map(lambda s: f"<think>{s}</think>"),
        st.text(max_size=10).map(lambda s: f"<answer>{s}</answer>"),
    ),
    max_size=6,
).map("".join)


def check_turn(turn: object) -> None:
    assert isinstance(turn, Turn)
    assert isinstance(turn.think, str)
    assert isinstance(turn.calls, list) and isinstance(turn.errors, list)
    assert turn.answer is None or isinstance(turn.answer, str)
    assert turn.malformed is None or isinstance(turn.malformed, str)
    for e in turn.errors:
        assert isinstance(e, str) and e
    for c in turn.calls:
        check_call(c)
    # exactly one outcome: an answer, calls/errors, or a format problem
    if turn.answer is not None:
        assert turn.calls == [] and turn.errors == [] and turn.malformed is None
    elif turn.calls or turn.errors:
        assert turn.malformed is None
    else:
        assert turn.malformed


def check_call(c: object) -> None:
    assert isinstance(c, ToolCall)
    assert c.name in TOOLS
    assert c.goal is None or isinstance(c.goal, str)
    if c.name == "search":
        assert isinstance(c.queries, tuple) and 1 <= len(c.queries) <= MAX_QUERIES_PER_CALL
        assert all(isinstance(q, str) and q and q == q.strip() for q in c.queries)
        assert c.doc_id is None and c.title is None
    else:
        assert c.queries == ()
        assert (c.doc_id is None) != (c.title is None)
        value = c.doc_id if c.doc_id is not None else c.title
        assert isinstance(value, str) and value and value == value.strip()


@FUZZ
@given(st.text())
def test_fuzz_any_text(text):
    check_turn(parse_turn(text))


@FUZZ
@given(adversarial)
def test_fuzz_adversarial_pieces(text):
    check_turn(parse_turn(text))


@FUZZ
@given(structured)
@pytest.mark.slow
def test_fuzz_structured_turns(text):
    check_turn(parse_turn(text))


@FUZZ
@given(st.one_of(call_bodies, st.text(), adversarial))
@pytest.mark.slow
def test_fuzz_parse_call(body):
    out = parse_call(body)
    if isinstance(out, str):
        assert out
    else:
        check_call(out)


@FUZZ
@given(st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=MAX_QUERIES_PER_CALL))
def test_fuzz_search_round_trip(queries):
    out = parse_call(json.dumps({"name": "search", "arguments": {"queries": queries}}))
    if all(q.strip() for q in queries):
        assert out == ToolCall("search", queries=tuple(q.strip() for q in queries))
    else:
        assert isinstance(out, str)
