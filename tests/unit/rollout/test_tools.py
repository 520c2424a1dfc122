"""The tool table: the system prompt describes exactly its tools; a new tool is one new entry."""

from __future__ import annotations

import json
import re

import pytest

from framework.cli.app import load_config
from framework.rollout.config import SYSTEM_PROMPT, AgentConfig
from framework.rollout.engine import AgentLoop
from framework.rollout.parser import parse_call, parse_turn
from framework.rollout.tools import TOOLS, Tool, ToolCall

from .fakes import FakeBackend, FakeRetriever, FakeTokenizer, search_call

_NAMED = re.compile(r'"name":\s*"([^"]+)"')


def prompt_tools(prompt: str) -> set[str]:
    """The tool names a system prompt shows the model in its ``<tool_call>`` examples."""
    return set(_NAMED.findall(prompt))


def test_prompt_tools_reads_the_call_examples():
    text = '<tool_call>{"name": "search", ...}</tool_call> and {"name":"visit"}'
    assert prompt_tools(text) == {"search", "visit"}


@pytest.mark.parametrize("app", ["train", "eval", "sft", "rollouts"])
def test_default_system_prompt_describes_exactly_the_tools_of_the_table(app):
    prompt = load_config(app).agent.system_prompt
    assert prompt_tools(prompt) == set(TOOLS), (
        f"agent.system_prompt of the {app} app names {sorted(prompt_tools(prompt))}; the tool "
        f"table has {sorted(TOOLS)}. Describe every tool (and only those) in the prompt."
    )


def test_agent_config_default_prompt_is_the_described_one():
    assert AgentConfig().system_prompt == SYSTEM_PROMPT
    assert prompt_tools(SYSTEM_PROMPT) == set(TOOLS)


# -- a new tool is one table entry -----------------------------------------------------------------
def _parse_lookup(args):
    title = args.get("title")
    return ToolCall("lookup", title=title) if isinstance(title, str) and title else "lookup: title"


def _answer_lookup(calls, retriever, cfg):
    return [f"Looked up {c.title}" for c in calls]


LOOKUP = Tool(_parse_lookup, _answer_lookup, stat="lookups", count=lambda c: 1)


def lookup_call(title: str) -> str:
    body = {"name": "lookup", "arguments": {"title": title}}
    return "<tool_call>" + json.dumps(body) + "</tool_call>"


def test_a_new_tool_is_parsed_once_it_is_in_the_table(monkeypatch):
    body = json.dumps({"name": "lookup", "arguments": {"title": "Jaws"}})
    assert "unknown tool 'lookup'" in parse_call(body)
    monkeypatch.setitem(TOOLS, "lookup", LOOKUP)
    assert parse_call(body) == ToolCall("lookup", title="Jaws")
    assert parse_call(json.dumps({"name": "lookup", "arguments": {}})) == "lookup: title"
    assert "lookup" in parse_call(json.dumps({"name": "browse", "arguments": {}}))
    assert parse_turn(lookup_call("X")).calls == [ToolCall("lookup", title="X")]


def test_a_new_tool_is_answered_and_counted_by_the_agent_loop(monkeypatch):
    monkeypatch.setitem(TOOLS, "lookup", LOOKUP)
    tok = FakeTokenizer()
    # rollout 0 looks up then searches, rollout 1 the other way round: in each turn the search tool
    # answers first (table order), yet each rollout gets the observation of its own call
    scripts = [
        [lookup_call("Jaws"), search_call("Everest"), "<answer>x</answer>"],
        [search_call("Everest"), lookup_call("Ada"), "<answer>y</answer>"],
    ]
    retriever = FakeRetriever()
    cfg = AgentConfig(system_prompt="Tools: lookup, search.")
    trajs = AgentLoop(FakeBackend(tok, scripts), retriever, cfg).run(["q0", "q1"], 1)
    for t, looked_up in zip(trajs, ["Jaws", "Ada"], strict=True):
        assert t.status == "ok"
        assert t.stats["lookups"] == 1 and t.stats["queries"] == 1 and t.stats["visits"] == 0
        assert t.stats["tool_calls"] == 2 and t.stats["invalid_calls"] == 0
        assert f"<tool_response>\nLooked up {looked_up}\n</tool_response>" in t.response_text
        assert '<tool_response>\nQuery "Everest":\n[1] Mount Everest' in t.response_text
    assert retriever.search_calls == [["Everest"], ["Everest"]]  # one request per turn
