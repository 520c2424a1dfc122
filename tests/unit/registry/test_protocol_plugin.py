"""A plugin adds an agent protocol without touching ``framework/``: it is loaded from an entry
point, validated as ``agent.protocol``, listed, and drives the real agent loop."""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap

import pytest

from framework.registry import AGENT_PROTOCOLS, plugins
from framework.registry.listing import describe
from framework.rollout.config import AgentConfig
from framework.rollout.engine import AgentLoop
from tests.unit.rollout.fakes import FakeBackend, FakeRetriever, FakeTokenizer

PLUGIN = """
from dataclasses import dataclass

from framework.registry import AGENT_PROTOCOLS
from framework.rollout.parser import Turn
from framework.rollout.policy import chat_prompt_ids
from framework.rollout.protocol import ProtocolConfig


@dataclass
class PlainConfig(ProtocolConfig):
    search_k: int = 1  # named like an agent field: agent.search_k fills it


@AGENT_PROTOCOLS.register("{name}", config=PlainConfig)
class Plain:
    stop = ("\\n",)
    retry_invalid = False
    segment_tags = (("answer", "ANSWER:", "\\n"),)
    tools = {{}}

    def __init__(self, *, cfg):
        self.cfg = cfg

    def prompt_ids(self, tokenizer, question):
        text = f"k={{self.cfg.search_k}} Q: {{question}}"
        return chat_prompt_ids(tokenizer, [{{"role": "user", "content": text}}])

    def parse(self, text):
        if text.startswith("ANSWER:"):
            return Turn(answer=text[len("ANSWER:"):].strip())
        return Turn(malformed="no ANSWER:")

    def observation(self, obs, tokenizer):
        return "", []


def register():
    return None
"""


@pytest.fixture
def protocol_plugin(tmp_path, monkeypatch, plugin_state):
    suffix = tmp_path.name.replace("-", "_").lower()
    name, module = f"plain_{suffix}", f"plain_protocol_{suffix}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(PLUGIN.format(name=name)))
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = [importlib.metadata.EntryPoint("plain", f"{module}:register", plugins.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: eps)
    monkeypatch.delenv(plugins.DISABLE_ENV, raising=False)
    yield name
    AGENT_PROTOCOLS.remove(name)
    sys.modules.pop(module, None)


def test_a_plugin_registers_a_protocol_that_the_agent_loop_uses(protocol_plugin):
    name = protocol_plugin
    assert name not in AGENT_PROTOCOLS
    assert [p.name for p in plugins.load_plugins()] == ["plain"]
    listed = {e["name"]: e for e in describe(["protocol"])["components"]["protocol"]}
    assert listed[name]["fields"] == [
        {"name": "search_k", "type": "int", "default": "1", "help": ""}
    ]
    agent = AgentConfig(protocol=name, search_k=5)
    assert agent.problems() == []

    tok = FakeTokenizer()
    backend = FakeBackend(tok, [["ANSWER: Paris\nignored"]])
    [t] = AgentLoop(backend, FakeRetriever(), agent).run(["Capital of France?"], 1)
    prompt = tok.encode("<user>k=5 Q: Capital of France?</user><assistant>")
    assert t.token_ids == prompt + tok.encode("ANSWER: Paris\n")
    assert backend.calls[0]["stop"] == ("\n",)
    assert t.status == "ok" and t.answer == "Paris"
    assert [s.kind for s in t.segments] == ["answer"]
