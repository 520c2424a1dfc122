"""The ``seekrl`` protocol's output format, and a parser for one model turn that never raises.

These tags and :func:`parse_turn` are the ``seekrl`` protocol's
(:mod:`framework.rollout.seekrl_protocol`); the agent loop asks its protocol, not this module.
:class:`Turn` is what every protocol's ``parse`` returns. A ``seekrl`` turn is free text with
tagged blocks (METHODS.md's ReAct format)::

    <think>...</think>
    <tool_call>{"name": "search", "arguments": {"queries": ["...", "..."]}}</tool_call>
    <tool_call>{"name": "visit", "arguments": {"title": "...", "goal": "..."}}</tool_call>
    <answer>...</answer>

:func:`parse_turn` returns what the turn asks for: an answer, tool calls, or a format problem. Any
input, however broken, yields a :class:`Turn`; problems are described, not raised.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from framework.rollout.tools import MAX_QUERIES_PER_CALL, TOOLS, ToolCall

__all__ = [
    "ANSWER",
    "MAX_CALL_CHARS",
    "MAX_QUERIES_PER_CALL",
    "STOP_STRINGS",
    "THINK",
    "TOOLS",
    "TOOL_CALL",
    "TOOL_RESPONSE",
    "ToolCall",
    "Turn",
    "parse_call",
    "parse_turn",
    "scan_blocks",
]

THINK = ("<think>", "</think>")
TOOL_CALL = ("<tool_call>", "</tool_call>")
TOOL_RESPONSE = ("<tool_response>", "</tool_response>")
ANSWER = ("<answer>", "</answer>")
#: generation stops after any of these (the turn is then complete)
STOP_STRINGS = (TOOL_CALL[1], ANSWER[1])
MAX_CALL_CHARS = 4000

_OPEN = re.compile(r"<(think|tool_call|answer)>")


@dataclass
class Turn:
    """What a model turn amounts to.

    Attributes:
        think: the contents of its ``<think>`` blocks, joined by newlines.
        calls: valid tool calls, in order.
        errors: one message per invalid tool call (each becomes an error observation).
        answer: the final answer text, when the turn gives one.
        malformed: why the turn is neither an answer nor a tool call (None when it is one).
    """

    think: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    answer: str | None = None
    malformed: str | None = None


def parse_turn(text: object) -> Turn:
    """Parse one model turn; never raises, whatever ``text`` is."""
    try:
        return _parse(text if isinstance(text, str) else str(text))
    except Exception as exc:  # last line of defence: the loop must never die on model output
        return Turn(malformed=f"unparseable output ({type(exc).__name__})")


def scan_blocks(text: str) -> tuple[list[tuple[str, str]], tuple[str, str] | None]:
    """Closed ``(kind, body)`` blocks in order, and the unclosed last block if any; linear time.

    Each opening tag is matched to the next closing tag of its kind; text between blocks is
    skipped. A block that is never closed ends the scan.
    """
    blocks: list[tuple[str, str]] = []
    pos = 0
    while True:
        m = _OPEN.search(text, pos)
        if m is None:
            return blocks, None
        kind = m.group(1)
        close = text.find(f"</{kind}>", m.end())
        if close < 0:
            return blocks, (kind, text[m.end() :])
        blocks.append((kind, text[m.end() : close]))
        pos = close + len(kind) + 3


def _parse(text: str) -> Turn:
    turn = Turn()
    thinks: list[str] = []
    blocks, tail = scan_blocks(text)
    for kind, body in blocks:
        if kind == "think":
            thinks.append(body.strip())
        elif kind == "answer":
            turn.answer = body.strip()
        else:
            call = parse_call(body)
            if isinstance(call, ToolCall):
                turn.calls.append(call)
            else:
                turn.errors.append(call)
    if tail and tail[0] == "think":  # an unclosed think still counts as thinking
        thinks.append(tail[1].strip())
    turn.think = "\n".join(t for t in thinks if t)
    if turn.answer is not None and (turn.calls or turn.errors):
        turn.calls, turn.errors = [], []  # an answer ends the episode: later calls are moot
    if turn.answer is None and not turn.calls and not turn.errors:
        if tail and tail[0] in ("tool_call", "answer"):
            turn.malformed = f"unclosed <{tail[0]}> block"
        else:
            turn.malformed = "no <tool_call> and no <answer>"
    return turn


def parse_call(body: str) -> ToolCall | str:
    """A tool call from a ``<tool_call>`` body, or an error message saying what is wrong.

    The envelope (size, JSON, ``name``, ``arguments``) is checked here; the arguments by the tool's
    own parser in :data:`~framework.rollout.tools.TOOLS`.
    """
    if len(body) > MAX_CALL_CHARS:
        return f"tool call of {len(body)} characters; at most {MAX_CALL_CHARS} are read"
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, RecursionError) as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        return (
            f'tool call is not valid JSON ({msg}); expected {{"name": ..., "arguments": {{...}}}}'
        )
    if not isinstance(data, dict):
        return "tool call must be a JSON object with 'name' and 'arguments'"
    name, args = data.get("name"), data.get("arguments", {})
    tool = TOOLS.get(name) if isinstance(name, str) else None
    if tool is None:
        return f"unknown tool {str(name)[:40]!r}; available tools: {', '.join(TOOLS)}"
    if not isinstance(args, dict):
        return f"'arguments' of {name} must be a JSON object"
    return tool.parse(args)
