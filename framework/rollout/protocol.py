"""The agent's protocol: everything about its text format, as one registered component.

A protocol (registry ``AGENT_PROTOCOLS``, chosen with ``agent.protocol=<name>``) owns

- the prompt: the system/user messages and where the question goes (``prompt_ids``);
- the stop strings that end a model turn (``stop``);
- how a turn is read: an answer, tool calls, or no action (``parse`` returns a
  :class:`~framework.rollout.parser.Turn`), and whether a turn that is no action ends the rollout
  or is answered and retried (``retry_invalid``);
- which tools exist (``tools``: name -> :class:`~framework.rollout.tools.Tool`);
- how the environment's answer becomes text and tokens (``observation`` of an
  :class:`Observation`);
- the tagged blocks a turn's tokens are segmented by (``segment_tags``).

The agent loop (:class:`~framework.rollout.engine.AgentLoop`) asks its protocol for each of these
and owns the rest: budgets, batching, the token layout. It is token-in/token-out for every
protocol: the trained tokens are the sampled ones plus the ids ``observation`` returns (loss mask
0); history is never re-rendered. A chat-template protocol fits the same contract: its
``observation`` may return the difference of two renderings (the conversation with the tool
messages minus the conversation without them), given the turn's text in ``Observation.turn_text``.

Built-ins: ``seekrl`` (:mod:`framework.rollout.seekrl_protocol`), ``search_r1``
(:mod:`framework.rollout.search_r1`) and ``tool_calling`` (:mod:`framework.rollout.tool_calling`:
the model's own tool calls through its chat template).

With ``agent.prompt=dataset`` the loop renders the dataset's chat prompt instead of asking
``prompt_ids``: through the protocol's ``messages_ids`` where it has one
(:class:`~framework.registry.protocols.RendersMessages`: ``tool_calling`` adds its tools), else
through the chat template as it is. A plugin registers its own with
``@AGENT_PROTOCOLS.register("mine", config=MyConfig)`` on a class taking ``cfg``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from framework.registry import AGENT_PROTOCOLS, load_components
from framework.registry.protocols import AgentProtocol, Tokenizer
from framework.rollout.config import AgentConfig
from framework.rollout.tools import ToolResult
from framework.types import ComponentConfig, ToolCall


@dataclass
class ProtocolConfig(ComponentConfig):
    """Base of every protocol's config.

    A protocol is configured through the agent config: :func:`build_protocol` fills each field
    whose name is also a field of :class:`~framework.rollout.config.AgentConfig` with the agent's
    value (``system_prompt`` for ``seekrl``); the other fields keep their defaults.
    """


AGENT_PROTOCOLS.declare_config_base(ProtocolConfig)


@dataclass(frozen=True)
class Observation:
    """What the environment answers to one model turn, before the protocol renders it.

    Attributes:
        turn_text: the model turn just generated, as decoded (with any forced text before it).
        results: one result per valid tool call of the turn, in order.
        errors: one message per invalid tool call, in order.
        invalid: why the turn was no action (the turn's ``malformed``), when the protocol answers
            such a turn (``retry_invalid``); None otherwise.
        calls: the valid tool calls of the turn, in the order of ``results``.
    """

    turn_text: str = ""
    results: tuple[ToolResult, ...] = ()
    errors: tuple[str, ...] = ()
    invalid: str | None = None
    calls: tuple[ToolCall, ...] = ()


def build_protocol(agent: AgentConfig) -> AgentProtocol:
    """The protocol ``agent.protocol`` names, configured from ``agent``.

    Raises:
        UnknownComponentError: no protocol has that name (with the names that exist).
    """
    if agent.protocol not in AGENT_PROTOCOLS:
        load_components()  # the built-ins and the plugins, unless a caller has loaded them
    entry = AGENT_PROTOCOLS.get(agent.protocol)
    shared = {f.name for f in dataclasses.fields(AgentConfig)} - {"protocol", "prompt"}
    fed = {
        f.name: getattr(agent, f.name)
        for f in dataclasses.fields(entry.config_cls)
        if f.init and f.name in shared
    }
    return AGENT_PROTOCOLS.bind(entry.config_cls(name=agent.protocol, **fed))()


def encode(tokenizer: Tokenizer, text: str) -> list[int]:
    """``text``'s ids on its own, without special tokens (how an observation is tokenised)."""
    return [int(i) for i in tokenizer.encode(text, add_special_tokens=False)]
