"""The ``tool_calling`` protocol: the model's own tool calls through its chat template, token in
and token out, on two chat templates written here (no downloads) with SmolLM2's tokenizer (its
``<|im_start|>``/``<|im_end|>`` are special tokens, ``<|im_end|>`` is id 2, the fakes' EOS).

- ``QWEN25_LIKE``: tools in the system message, tool results as ``user`` turns wrapping each in
  ``<tool_response>``, as Qwen2.5's template does; it renders earlier turns as given.
- ``QWEN3_LIKE``: the same, but an assistant message that is not the last one loses its
  ``<think>`` blocks, as Qwen3's template drops earlier reasoning: re-rendering the conversation
  would change what the policy saw, so no naive difference of renderings exists.
"""

from __future__ import annotations

import pytest

from framework.registry import AGENT_PROTOCOLS, load_components
from framework.rollout.config import AgentConfig
from framework.rollout.engine import AgentLoop
from framework.rollout.policy import (
    PolicyConfig,
    PolicyError,
    chat_prompt_ids,
    load_tokenizer,
    render_chat,
)
from framework.rollout.protocol import build_protocol
from framework.rollout.tool_calling import SYSTEM_PROMPT, TOOL_SCHEMAS, ToolCallingProtocol
from framework.rollout.tools import TOOLS, answer_search
from framework.types import STATUS_FORMAT_ERROR, STATUS_OK, ToolCall

from .fakes import EOS, FakeBackend, FakeRetriever, FakeTokenizer, Turn

_HEAD = r"""
{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}
{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}
{{- '\n\n# Tools\n\nYou may call functions. Their signatures are within <tools></tools>:\n<tools>' }}
{%- for tool in tools %}{{- '\n' }}{{- tool | tojson }}{%- endfor %}
{{- '\n</tools>\n\nFor each call, return a JSON object within <tool_call></tool_call> tags:\n' }}
{{- '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' }}
{%- elif messages[0]['role'] == 'system' %}
{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
"""
_TAIL = r"""
{%- elif message.role == 'tool' %}
{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}
{%- endif %}
{{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}
"""
QWEN25_LIKE = (
    _HEAD
    + r"""
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\n' + message.content + '<|im_end|>\n' }}
"""
    + _TAIL
)
QWEN3_LIKE = (
    _HEAD
    + r"""
{%- elif message.role == 'assistant' %}
{%- set content = message.content %}
{%- if not loop.last and '</think>' in content %}
{%- set content = content.split('</think>')[-1].lstrip('\n') %}
{%- endif %}
{{- '<|im_start|>assistant\n' + content + '<|im_end|>\n' }}
"""
    + _TAIL
)

QUESTION = "Who directed Jaws?"
CALL_TURN = (
    "<think>I should look up the film.</think>\n<tool_call>\n"
    '{"name": "search", "arguments": {"queries": ["Jaws director"]}}\n</tool_call>'
)
ANSWER_TURN = "<think>The passage names him.</think>\n<answer>Steven Spielberg</answer>"


@pytest.fixture(scope="module")
def smollm2():
    return load_tokenizer(PolicyConfig(source="tiny"))


def with_template(tok, template):
    tok.chat_template = template
    return tok


def rollout(tok, turns, **agent):
    cfg = AgentConfig(protocol="tool_calling", **agent)
    backend = FakeBackend(tok, [turns])
    [t] = AgentLoop(backend, FakeRetriever(), cfg).run([QUESTION], 1)
    return t, backend, cfg


def search_text(cfg, query):
    return answer_search([ToolCall("search", queries=(query,))], FakeRetriever(), cfg)[0].text


def ids(tok, text):
    return tok.encode(text, add_special_tokens=False)


def test_tool_calling_is_a_registered_protocol():
    load_components()
    assert "tool_calling" in AGENT_PROTOCOLS.names()
    protocol = build_protocol(AgentConfig(protocol="tool_calling"))
    assert isinstance(protocol, ToolCallingProtocol)
    assert protocol.system_prompt == SYSTEM_PROMPT  # seekrl's default prompt is not used
    assert (
        build_protocol(AgentConfig(protocol="tool_calling", system_prompt="X")).system_prompt == "X"
    )
    assert [s["function"]["name"] for s in TOOL_SCHEMAS] == list(TOOLS)


@pytest.mark.parametrize("template", [QWEN25_LIKE, QWEN3_LIKE], ids=["qwen25_like", "qwen3_like"])
def test_trained_sequence_is_the_sampled_one(smollm2, template):
    tok = with_template(smollm2, template)
    t, backend, cfg = rollout(tok, [Turn(CALL_TURN, eos=True), Turn(ANSWER_TURN, eos=True)])
    assert (t.status, t.answer) == (STATUS_OK, "Steven Spielberg")
    first, second = backend.seen[0]
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": QUESTION}]
    assert first == chat_prompt_ids(tok, messages, tools=TOOL_SCHEMAS)  # tools in the prompt
    assert "<tools>" in tok.decode(first) and '"name": "search"' in tok.decode(first)
    # each turn's tokens are exactly the sampled ones (its text, then <|im_end|>, id 2 = EOS)
    turn1, turn2 = t.turns
    assert EOS == 2 and tok.convert_ids_to_tokens(EOS) == "<|im_end|>"
    assert t.token_ids[turn1.start : turn1.end] == [*ids(tok, CALL_TURN), EOS]
    assert t.token_ids[turn2.start : turn2.end] == [*ids(tok, ANSWER_TURN), EOS]
    # what the policy saw at turn 2 is the prompt, its own tokens and the observation; the
    # trained sequence is that plus what it sampled, nothing re-rendered
    assert second == t.token_ids[: turn2.start] and t.token_ids == second + ids(
        tok, ANSWER_TURN
    ) + [EOS]
    assert first == t.token_ids[: t.prompt_len] and turn1.start == t.prompt_len
    sampled = {i for turn in t.turns for i in range(turn.start, turn.end)}
    assert [i for i, m in enumerate(t.loss_mask) if m] == sorted(sampled)
    # the observation is the template's text between the two assistant turns
    a, b = turn1.observation
    body = search_text(cfg, "Jaws director")
    assert tok.decode(t.token_ids[a:b]) == (
        f"\n<|im_start|>user\n<tool_response>\n{body}\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    conversation = [
        *messages,
        {"role": "assistant", "content": CALL_TURN},
        {"role": "tool", "content": body},
        {"role": "assistant", "content": ANSWER_TURN},
    ]

    def rendered(template, turns, generation_prompt=False):
        tok.chat_template = template
        try:
            return render_chat(
                tok, turns, tools=TOOL_SCHEMAS, generation_prompt=generation_prompt, tokenize=False
            )
        finally:
            tok.chat_template = template_in_use

    template_in_use = template
    # the trained text is the conversation as the policy saw it: every turn as it was sampled,
    # the earlier <think> included (what the history-keeping template renders)
    trained = tok.decode(t.token_ids)
    assert trained + "\n" == rendered(QWEN25_LIKE, conversation)
    if template is QWEN3_LIKE:  # re-rendering with it would drop the earlier <think> ...
        assert "I should look up the film." not in rendered(QWEN3_LIKE, conversation)
        before = rendered(QWEN3_LIKE, conversation[:3])
        after = rendered(QWEN3_LIKE, conversation[:4], generation_prompt=True)
        assert not after.startswith(before)  # ... so no difference of the real renderings exists


def test_an_end_of_turn_the_model_did_not_write_is_part_of_the_observation(smollm2):
    tok = with_template(smollm2, QWEN25_LIKE)
    t, _, _cfg = rollout(tok, [Turn(CALL_TURN), Turn(ANSWER_TURN, eos=True)])
    a, b = t.turns[0].observation
    assert t.token_ids[t.turns[0].start : t.turns[0].end] == ids(tok, CALL_TURN)
    assert tok.decode(t.token_ids[a:b]).startswith("<|im_end|>\n<|im_start|>user\n<tool_response>")
    assert t.loss_mask[a:b] == [0] * (b - a)


def test_parallel_calls_and_errors_become_tool_messages(smollm2):
    tok = with_template(smollm2, QWEN25_LIKE)
    two = (
        '<tool_call>{"name": "search", "arguments": "{\\"queries\\": [\\"Jaws\\"]}"}</tool_call>\n'
        '<tool_call>{"name": "search", "arguments": {"query": "Cincinnati"}}</tool_call>\n'
        "<tool_call>{not json}</tool_call>"
    )
    t, _, cfg = rollout(tok, [Turn(two, eos=True), Turn(ANSWER_TURN, eos=True)])
    assert [c.queries for c in t.turns[0].calls] == [("Jaws",), ("Cincinnati",)]
    assert t.turns[0].invalid_calls == 1
    a, b = t.turns[0].observation
    text = tok.decode(t.token_ids[a:b])
    assert text.count("<tool_response>") == 3 and text.count("<|im_start|>user") == 1
    assert search_text(cfg, "Jaws") in text and "Error: tool call is not valid JSON" in text


def test_parse_reads_answers_and_refuses_an_unclosed_call():
    p = build_protocol(AgentConfig(protocol="tool_calling"))
    assert p.parse("<answer> Paris </answer>").answer == "Paris"
    free = p.parse("<think>hm</think>\nIt is Paris.")
    assert (free.answer, free.think) == ("It is Paris.", "hm")
    assert p.parse('<tool_call>{"name": "search", "arguments": {"queries": ["x"]}').malformed
    assert p.parse("<think>only thinking").malformed == "no tool call and no answer"
    unknown = p.parse('<tool_call>{"name": "python", "arguments": {}}</tool_call>')
    assert unknown.errors and "unknown tool" in unknown.errors[0]


def test_an_unclosed_call_is_a_format_error(smollm2):
    tok = with_template(smollm2, QWEN25_LIKE)
    t, _, _ = rollout(tok, [Turn('<tool_call>{"name": "search"')])
    assert t.status == STATUS_FORMAT_ERROR


def test_templates_it_cannot_drive_are_refused_with_a_fix(smollm2):
    protocol = build_protocol(AgentConfig(protocol="tool_calling"))
    with pytest.raises(PolicyError, match=r"^\[agent.protocol\] .*does not render tools.*Fix: "):
        protocol.prompt_ids(FakeTokenizer(), QUESTION)  # its template ignores tools=
    bare = "{{ tools | tojson }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(PolicyError, match=r"not <tool_call> JSON.*Fix: "):
        protocol.prompt_ids(with_template(smollm2, bare), QUESTION)
    with pytest.raises(PolicyError, match=r"^\[rollout.policy.chat_template\] .*Fix: "):
        protocol.prompt_ids(with_template(smollm2, None), QUESTION)
