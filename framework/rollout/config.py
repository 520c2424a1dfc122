"""The agent loop's settings: its protocol, its budgets, its tools' limits and the ``seekrl``
protocol's system prompt (apart from the loop, so the parser, the tools and the protocols read them
without importing it)."""

from __future__ import annotations

from dataclasses import dataclass

from framework.config import Problem, check_choice, check_range, option
from framework.registry import AGENT_PROTOCOLS, load_components
from framework.registry.core import suggest_fix

SYSTEM_PROMPT = """You are a research assistant who answers questions by searching a Wikipedia corpus.
Think step by step inside <think> </think>. To search, write
<tool_call>{"name": "search", "arguments": {"queries": ["query one", "query two"]}}</tool_call>
and the results appear inside <tool_response> </tool_response>. To read a whole article, write
<tool_call>{"name": "visit", "arguments": {"title": "Article title", "goal": "what you look for"}}</tool_call>
Search as often as you need. When you know the answer, write it, as short as possible, inside
<answer> </answer>."""

#: ``agent.prompt``: where the prompt's messages come from
PROMPT_SOURCES = ("protocol", "dataset")


@dataclass
class AgentConfig:
    """Protocol, budgets and tool settings of the agent loop.

    ``protocol`` names the agent's text format in ``AGENT_PROTOCOLS``
    (:mod:`framework.rollout.protocol`); a protocol's config fields named like a field here
    (``system_prompt``) take this config's value, so its options are set as ``agent.<field>``.
    """

    protocol: str = option(
        "seekrl",
        "the agent's format, a registered protocol: seekrl (<tool_call> JSON), search_r1, or "
        "tool_calling (the model's own tool calls through its chat template)",
    )
    prompt: str = option(
        "protocol",
        "protocol: the protocol's messages around the question; dataset: the dataset's prompt "
        "column (a chat list, e.g. Search-R1's instruction and question) as given",
    )
    max_turns: int = option(8, "model turns per rollout")
    max_tool_calls: int = option(8, "tool calls per rollout (paper: 40)")
    max_new_tokens_per_turn: int = option(256, "tokens per model turn")
    max_total_tokens: int = option(2048, "prompt + response budget")
    max_observation_tokens: int = option(
        0,
        "tokens kept of each observation, its first ones (Search-R1's max_obs_length); 0 keeps "
        "them all",
    )
    max_invalid_calls: int = option(2, "invalid tool calls tolerated before a format error")
    search_k: int = option(3, "results per search query")
    max_passage_chars: int = option(400, "characters per search result")
    max_visit_chars: int = option(1500, "characters of a visited page")
    system_prompt: str = option(
        SYSTEM_PROMPT,
        "the seekrl protocol's system prompt, naming its tools (framework.rollout.tools.TOOLS); "
        "search_r1 uses Search-R1's own instruction instead",
    )

    def problems(self) -> list[Problem]:
        out: list[Problem] = []
        for name in ("max_turns", "max_new_tokens_per_turn", "search_k", "max_passage_chars"):
            out += check_range(getattr(self, name), name, low=1)
        out += check_range(self.max_tool_calls, "max_tool_calls", low=0)
        out += check_range(self.max_invalid_calls, "max_invalid_calls", low=0)
        out += check_range(self.max_visit_chars, "max_visit_chars", low=1)
        out += check_range(self.max_total_tokens, "max_total_tokens", low=16)
        out += check_range(self.max_observation_tokens, "max_observation_tokens", low=0)
        out += check_choice(self.prompt, "prompt", PROMPT_SOURCES)
        out += self._protocol_problems()
        return out

    def _protocol_problems(self) -> list[Problem]:
        if self.protocol not in AGENT_PROTOCOLS:
            load_components()  # a config checked before composing: register the built-ins first
        if self.protocol in AGENT_PROTOCOLS:
            return []
        names = AGENT_PROTOCOLS.names()
        _, fix = suggest_fix("agent.protocol", self.protocol, names)
        return [Problem("protocol", self.protocol, f"one of {names}", fix)]
