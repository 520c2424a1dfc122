"""``tool_calling``: the model's own tool-call format, through its chat template.

For instruct models whose chat template renders tools (Qwen2.5, Qwen3 and other Hermes-style
templates). The prompt is ``apply_chat_template([system, user], tools=TOOL_SCHEMAS,
add_generation_prompt=True)``: the tools of :data:`~framework.rollout.tools.TOOLS` (``search``,
``visit``) as JSON schemas, the system message (:data:`SYSTEM_PROMPT`, or ``agent.system_prompt``
when it is set to something other than ``seekrl``'s default, which spells out ``seekrl``'s own
call syntax), then the question.

Supported call format (what the template defines; checked at the first prompt): the Hermes/Qwen
style, JSON in tags, ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, any number per
turn (``arguments`` given as a JSON string, as some models write it, is read too). A template
that does not render ``tools=`` at all, or renders them without ``<tool_call>`` (Llama 3.1's bare
JSON, Mistral's ``[TOOL_CALLS]``), is refused with a ``Fix:``; so is a tokenizer without a chat
template (``[rollout.policy.chat_template]``).

A turn ends at the model's end of turn (its end-of-sequence token, and the template's end-of-turn
text, e.g. ``<|im_end|>``, as a stop string). A turn with tool calls is answered with one ``tool``
message per valid call, then one ``Error: ...`` message per invalid call; a turn without any is
the final answer: its last ``<answer>`` span if it has one, else its text without ``<think>``
blocks and without the end of turn. An unclosed ``<tool_call>`` (a turn cut by its budget) ends
the rollout with a format error.

Token in, token out: the trained sequence is the prompt's ids, each turn's sampled ids as they
were sampled, and each observation's ids, appended; nothing is re-rendered. The observation is
the difference of two renderings of the template: the conversation up to and including the tool
messages with a generation prompt, minus the conversation up to the end of the assistant's
content, both rendered with :data:`PLACEHOLDER` as the assistant's content. So it holds what the
template puts after an assistant turn and around the tool messages: the end of the assistant turn
(``<|im_end|>\\n``; left out when the model sampled it itself), the tool turn's header, each
result wrapped as the template wraps it (``<tool_response>...</tool_response>``), the end of the
tool turn and the header of the next assistant turn.

Why a placeholder and not the sampled text: a template may rewrite earlier turns (Qwen3's drops
the ``<think>`` blocks of an assistant message once a later one follows), and then the rendering
with the tool message does not begin with the rendering without it: no difference exists. With a
placeholder content (no ``<think>``, nothing to rewrite) the difference is well defined, and the
sampled text stands in the trained sequence verbatim, exactly as the policy saw it while
sampling. The rest of the conversation is a stand-in too (this protocol's own prompt with a
placeholder question): templates render the tail after an assistant turn without looking back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from framework.config import option
from framework.registry import AGENT_PROTOCOLS
from framework.registry.protocols import Tokenizer
from framework.rollout.config import SYSTEM_PROMPT as SEEKRL_SYSTEM_PROMPT
from framework.rollout.parser import Turn, parse_call
from framework.rollout.policy import PolicyError, chat_prompt_ids, render_chat
from framework.rollout.protocol import Observation, ProtocolConfig, encode
from framework.rollout.tools import MAX_QUERIES_PER_CALL, TOOLS, Tool

SYSTEM_PROMPT = (
    "You are a research assistant who answers questions by searching a Wikipedia corpus with the "
    "tools you are given. Think step by step inside <think> </think>. Search as often as you "
    "need. When you know the answer, write it, as short as possible, inside <answer> </answer>."
)
#: the tools of :data:`~framework.rollout.tools.TOOLS`, as the chat template receives them
TOOL_SCHEMAS: tuple[dict[str, Any], ...] = (
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the Wikipedia corpus; returns the top passages of each query.",
            "parameters": {
                "type": "object",
                "properties": {
                    "queries": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": f"1 to {MAX_QUERIES_PER_CALL} search queries",
                    }
                },
                "required": ["queries"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "visit",
            "description": "Read the article with this title.",
            "parameters": {
                "type": "object",
                "properties": {
                    "title": {"type": "string", "description": "the article's title"},
                    "goal": {"type": "string", "description": "what you look for in it"},
                },
                "required": ["title"],
            },
        },
    },
)
CALL = ("<tool_call>", "</tool_call>")
THINK = ("<think>", "</think>")
ANSWER = ("<answer>", "</answer>")
#: the assistant content the two renderings of an observation are made with
PLACEHOLDER = "\u2063seekrl-assistant-turn\u2063"
_QUESTION = "\u2063seekrl-question\u2063"
_CALLS = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_THINKS = re.compile(r"<think>(.*?)(?:</think>|$)", re.DOTALL)
_ANSWERS = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_PROTOCOL = "agent.protocol"
_FIX = (
    "use a model whose chat template renders tools as <tool_call> JSON (Qwen2.5, Qwen3, Hermes), "
    "set rollout.policy.chat_template to such a template, or choose agent.protocol=seekrl"
)


@dataclass
class ToolCallingProtocolConfig(ProtocolConfig):
    system_prompt: str = option(
        SEEKRL_SYSTEM_PROMPT,
        "the system message (from agent.system_prompt; seekrl's default is replaced by "
        "tool_calling's SYSTEM_PROMPT, as it spells out seekrl's own call syntax)",
    )


@dataclass(frozen=True)
class TemplateLayout:
    """What a chat template does around an assistant turn, found once per template.

    Attributes:
        end_of_turn: the template's end of an assistant message, stripped (``<|im_end|>``); the
            turn's stop string, and what an observation leaves out when the turn sampled it.
    """

    end_of_turn: str


@AGENT_PROTOCOLS.register("tool_calling", config=ToolCallingProtocolConfig)
class ToolCallingProtocol:
    """The model's own tool calls through its chat template (module docstring)."""

    retry_invalid = False
    segment_tags: tuple[tuple[str, str, str], ...] = (
        ("think", *THINK),
        ("tool_call", *CALL),
        ("answer", *ANSWER),
    )

    def __init__(self, *, cfg: ToolCallingProtocolConfig) -> None:
        self.cfg = cfg
        self._layouts: dict[str, TemplateLayout] = {}
        self._end = ""

    @property
    def system_prompt(self) -> str:
        given = self.cfg.system_prompt
        return SYSTEM_PROMPT if given == SEEKRL_SYSTEM_PROMPT else given

    @property
    def stop(self) -> tuple[str, ...]:
        """The template's end of turn, once a prompt has shown it (the end-of-sequence token
        ends a turn in any case)."""
        return (self._end,) if self._end else ()

    @property
    def tools(self) -> Mapping[str, Tool]:
        return TOOLS

    def prompt_ids(self, tokenizer: Tokenizer, question: str) -> list[int]:
        """The system message and the question, with the tools, through the chat template."""
        return self.messages_ids(tokenizer, self._messages(question))

    def messages_ids(
        self, tokenizer: Tokenizer, messages: Sequence[Mapping[str, str]]
    ) -> list[int]:
        """``messages`` with the tools through the chat template (``agent.prompt=dataset``).

        Raises:
            PolicyError: no chat template, or one this protocol cannot drive (module docstring).
        """
        self.layout(tokenizer)
        return chat_prompt_ids(tokenizer, messages, tools=TOOL_SCHEMAS)

    def parse(self, text: str) -> Turn:
        """The turn's ``<tool_call>`` blocks, or its answer (module docstring); never raises."""
        try:
            return self._parse(text if isinstance(text, str) else str(text))
        except Exception as exc:  # the loop must never die on model output
            return Turn(malformed=f"unparseable output ({type(exc).__name__})")

    def observation(self, obs: Observation, tokenizer: Tokenizer) -> tuple[str, list[int]]:
        """The template's text after the turn for its tool messages (module docstring)."""
        end = self.layout(tokenizer).end_of_turn
        named = len(obs.calls) == len(obs.results)  # templates that show a result's tool read it
        tool_msgs = [
            {"role": "tool", "content": r.text, **({"name": obs.calls[i].name} if named else {})}
            for i, r in enumerate(obs.results)
        ]
        tool_msgs += [{"role": "tool", "content": f"Error: {e}"} for e in obs.errors]
        if obs.invalid is not None or not tool_msgs:
            tool_msgs.append({"role": "tool", "content": f"Error: {obs.invalid or 'no tool call'}"})
        tail = self._after_placeholder(tokenizer, tool_msgs)
        if end and obs.turn_text.endswith(end) and tail.startswith(end):
            tail = tail[len(end) :]  # the model ended its turn itself
        return tail, encode(tokenizer, tail)

    def layout(self, tokenizer: Tokenizer) -> TemplateLayout:
        """The tokenizer's template's :class:`TemplateLayout`, checked once per template.

        Raises:
            PolicyError: no chat template; a template that ignores ``tools=``, renders them
                without ``<tool_call>``, or does not render an assistant's content verbatim.
        """
        source = str(getattr(tokenizer, "chat_template", None) or "")
        if source in self._layouts:
            return self._layouts[source]
        plain = [{"role": "user", "content": _QUESTION}]
        with_tools = str(render_chat(tokenizer, plain, tools=TOOL_SCHEMAS, tokenize=False))
        without = str(render_chat(tokenizer, plain, tokenize=False))
        if with_tools == without:
            raise PolicyError(
                f"[{_PROTOCOL}] got tool_calling with a chat template that does not render "
                f"tools=[...]; expected a template with tool support. Fix: {_FIX}."
            )
        if CALL[0] not in with_tools and CALL[0] not in source:
            raise PolicyError(
                f"[{_PROTOCOL}] got tool_calling with a chat template whose tool calls are not "
                f"{CALL[0]} JSON; expected the Hermes/Qwen format (the one supported). "
                f"Fix: {_FIX}."
            )
        closed = self._render_with_placeholder(tokenizer, [], generation_prompt=False)
        layout = TemplateLayout(end_of_turn=closed.split(PLACEHOLDER, 1)[1].strip())
        self._layouts[source] = layout
        self._end = layout.end_of_turn
        return layout

    # -- internals --------------------------------------------------------------------------------
    def _messages(self, question: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": question},
        ]

    def _render_with_placeholder(
        self, tokenizer: Tokenizer, after: list[dict[str, str]], *, generation_prompt: bool
    ) -> str:
        """The stand-in conversation, an assistant turn holding :data:`PLACEHOLDER`, then
        ``after``, rendered as text (the placeholder checked to appear once, verbatim)."""
        messages = [*self._messages(_QUESTION), {"role": "assistant", "content": PLACEHOLDER}]
        text = str(
            render_chat(
                tokenizer,
                [*messages, *after],
                tools=TOOL_SCHEMAS,
                generation_prompt=generation_prompt,
                tokenize=False,
            )
        )
        if text.count(PLACEHOLDER) != 1:
            raise PolicyError(
                f"[{_PROTOCOL}] got tool_calling with a chat template that does not render an "
                "assistant message's content verbatim; expected the content as given (the "
                f"observation is the template's text after it). Fix: {_FIX}."
            )
        return text

    def _after_placeholder(self, tokenizer: Tokenizer, tool_msgs: list[dict[str, str]]) -> str:
        """The rendering with ``tool_msgs`` and a generation prompt, after the placeholder: the
        first rendering minus the second (module docstring)."""
        full = self._render_with_placeholder(tokenizer, tool_msgs, generation_prompt=True)
        return full.split(PLACEHOLDER, 1)[1]

    def _parse(self, text: str) -> Turn:
        think = "\n".join(t for t in (m.strip() for m in _THINKS.findall(text)) if t)
        turn = Turn(think=think)
        closed = list(_CALLS.finditer(text))
        for m in closed:
            call = parse_call(_arguments_as_object(m.group(1).strip()))
            if isinstance(call, str):
                turn.errors.append(call)
            else:
                turn.calls.append(call)
        rest = text[closed[-1].end() :] if closed else text
        if CALL[0] in rest:
            if not turn.calls and not turn.errors:
                turn.malformed = f"unclosed {CALL[0]} block"
            else:
                turn.errors.append(f"unclosed {CALL[0]} block")
            return turn
        if turn.calls or turn.errors:
            return turn
        answers = _ANSWERS.findall(text)
        if answers:
            turn.answer = answers[-1].strip()
            return turn
        body = _THINKS.sub("", text)
        if self._end:
            body = body.replace(self._end, "")
        if not body.strip():
            turn.malformed = "no tool call and no answer"
            return turn
        turn.answer = body.strip()
        return turn


def _arguments_as_object(body: str) -> str:
    """``body`` with an ``arguments`` given as a JSON string turned into the object it holds."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return body  # parse_call says what is wrong with it
    if isinstance(data, dict) and isinstance(data.get("arguments"), str):
        try:
            data["arguments"] = json.loads(data["arguments"])
        except (ValueError, RecursionError):
            return body
        return json.dumps(data)
    return body
