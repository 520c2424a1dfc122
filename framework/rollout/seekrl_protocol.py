"""``seekrl``: the framework's own agent format (METHODS.md's ReAct format), the default.

The system prompt (``agent.system_prompt``) describes the tools; the question is the user message.
A turn is ``<think>`` blocks and either ``<tool_call>`` JSON calls (``search``, ``visit``: the
tools of :data:`~framework.rollout.tools.TOOLS`) or an ``<answer>``
(:func:`~framework.rollout.parser.parse_turn`); generation stops after ``</tool_call>`` or
``</answer>``. The answers to a turn's calls, then one ``Error: ...`` per invalid call, separated
by blank lines, come back inside ``<tool_response>``. A turn with neither calls nor an answer ends
the rollout with a format error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from framework.config import option
from framework.registry import AGENT_PROTOCOLS
from framework.registry.protocols import Tokenizer
from framework.rollout.config import SYSTEM_PROMPT
from framework.rollout.parser import (
    ANSWER,
    STOP_STRINGS,
    THINK,
    TOOL_CALL,
    TOOL_RESPONSE,
    Turn,
    parse_turn,
)
from framework.rollout.policy import chat_prompt_ids
from framework.rollout.protocol import Observation, ProtocolConfig, encode
from framework.rollout.tools import TOOLS, Tool


@dataclass
class SeekrlProtocolConfig(ProtocolConfig):
    system_prompt: str = option(SYSTEM_PROMPT, "the system message (from agent.system_prompt)")


@AGENT_PROTOCOLS.register("seekrl", config=SeekrlProtocolConfig)
class SeekrlProtocol:
    """The ``seekrl`` format (module docstring)."""

    stop: tuple[str, ...] = STOP_STRINGS
    retry_invalid = False
    segment_tags: tuple[tuple[str, str, str], ...] = (
        ("think", *THINK),
        ("tool_call", *TOOL_CALL),
        ("answer", *ANSWER),
    )

    def __init__(self, *, cfg: SeekrlProtocolConfig) -> None:
        self.cfg = cfg

    @property
    def tools(self) -> Mapping[str, Tool]:
        """:data:`~framework.rollout.tools.TOOLS` itself, so a tool added to it is offered."""
        return TOOLS

    def prompt_ids(self, tokenizer: Tokenizer, question: str) -> list[int]:
        """The chat-templated prompt: the system message with the tools, then the question."""
        messages = [
            {"role": "system", "content": self.cfg.system_prompt},
            {"role": "user", "content": question},
        ]
        return chat_prompt_ids(tokenizer, messages)

    def parse(self, text: str) -> Turn:
        return parse_turn(text)

    def observation(self, obs: Observation, tokenizer: Tokenizer) -> tuple[str, list[int]]:
        """``\\n<tool_response>\\n{answers and errors}\\n</tool_response>\\n``, tokenised alone."""
        body = "\n\n".join([x.text for x in obs.results] + [f"Error: {e}" for e in obs.errors])
        text = f"\n{TOOL_RESPONSE[0]}\n{body}\n{TOOL_RESPONSE[1]}\n"
        return text, encode(tokenizer, text)
