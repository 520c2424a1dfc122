"""Prompts and chat templates: ``agent.prompt=dataset``, ``policy.chat_template`` (a template, a
file or ``raw``) and the refusal of a model without a template, at validation (the train job's
dry run) and at the first prompt."""

from __future__ import annotations

import pytest

from framework.cli.app import load_config
from framework.config import ConfigError
from framework.rollout.config import AgentConfig
from framework.rollout.engine import AgentLoop
from framework.rollout.policy import (
    RAW_TEMPLATE,
    PolicyConfig,
    PolicyError,
    chat_prompt_ids,
    load_tokenizer,
)
from framework.rollout.search_r1 import prompt_text
from framework.rollout.tool_calling import TOOL_SCHEMAS

from .fakes import FakeBackend, FakeRetriever, FakeTokenizer

TOK = FakeTokenizer()
SEARCH_R1_PROMPT = [{"role": "user", "content": prompt_text("who wrote hamlet?")}]
ANSWER = "<answer>Shakespeare</answer>"


def first_prompt(agent: AgentConfig, prompts=None, tok=TOK) -> list[int]:
    backend = FakeBackend(tok, [[ANSWER]])
    AgentLoop(backend, FakeRetriever(), agent).run(["who wrote hamlet?"], 1, prompts=prompts)
    return backend.seen[0][0]


def test_dataset_prompt_is_used_as_given():
    for protocol in ("seekrl", "search_r1"):
        agent = AgentConfig(protocol=protocol, prompt="dataset")
        assert first_prompt(agent, [SEARCH_R1_PROMPT]) == TOK.apply_chat_template(SEARCH_R1_PROMPT)
        # a question without a chat prompt in its row: the question as one user message
        plain = [{"role": "user", "content": "who wrote hamlet?"}]
        assert first_prompt(agent, [None]) == TOK.apply_chat_template(plain)
        assert first_prompt(agent) == TOK.apply_chat_template(plain)
    # the default ignores the dataset's prompt: the protocol's messages around the question
    seekrl = AgentConfig()
    system = {"role": "system", "content": seekrl.system_prompt}
    expected = TOK.apply_chat_template([system, {"role": "user", "content": "who wrote hamlet?"}])
    assert first_prompt(seekrl, [SEARCH_R1_PROMPT]) == expected


def test_dataset_prompt_through_tool_calling_keeps_the_tools():
    from .test_tool_calling import QWEN25_LIKE

    tok = load_tokenizer(PolicyConfig(source="tiny", chat_template=QWEN25_LIKE))
    got = first_prompt(
        AgentConfig(protocol="tool_calling", prompt="dataset"), [SEARCH_R1_PROMPT], tok
    )
    assert got == chat_prompt_ids(tok, SEARCH_R1_PROMPT, tools=TOOL_SCHEMAS)
    assert "<tools>" in tok.decode(got) and "Question: who wrote hamlet?" in tok.decode(got)


def test_agent_prompt_is_checked():
    [problem] = AgentConfig(prompt="row").problems()
    assert problem.path == "prompt" and "dataset" in str(problem)


def test_chat_template_override_raw_text_and_file(tmp_path):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q?"}]
    raw = load_tokenizer(PolicyConfig(source="tiny", chat_template="raw"))
    assert raw.chat_template == RAW_TEMPLATE
    text = raw.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == "Be brief.\n\nQ?"  # contents joined, no roles, no generation prompt
    assert chat_prompt_ids(raw, messages) == raw.encode("Be brief.\n\nQ?", add_special_tokens=False)
    jinja = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    given = load_tokenizer(PolicyConfig(source="tiny", chat_template=jinja))
    assert given.apply_chat_template(messages, tokenize=False) == "[system] Be brief.\n[user] Q?\n"
    path = tmp_path / "template.jinja"
    path.write_text(jinja)
    from_file = load_tokenizer(PolicyConfig(source="tiny", chat_template=str(path)))
    assert from_file.chat_template == jinja
    bad = PolicyConfig(source="tiny", chat_template=str(tmp_path / "missing.jinja")).problems()
    assert [p.path for p in bad] == ["chat_template"] and "Fix:" in str(bad[0])


@pytest.fixture
def no_template(tmp_path):
    """A tokenizer folder (SmolLM2's tokenizer) whose files hold no chat template."""
    tok = load_tokenizer(PolicyConfig(source="tiny"))
    tok.chat_template = None
    tok.save_pretrained(tmp_path / "tok")
    assert not (tmp_path / "tok" / "chat_template.jinja").exists()
    return tmp_path / "tok"


def test_a_model_without_a_template_is_refused_by_the_dry_run(no_template):
    args = ["dry_run=true", "rollout.policy.source=tiny", f"rollout.policy.tokenizer={no_template}"]
    with pytest.raises(ConfigError) as info:
        load_config("train", args)
    [line] = [x.strip() for x in str(info.value).splitlines() if "chat_template" in x]
    assert line.startswith("[rollout.policy.chat_template] got None; expected a chat template")
    assert "Fix: set rollout.policy.chat_template=raw" in line
    load_config("train", [*args, "rollout.policy.chat_template=raw"])  # the fix works


def test_a_model_without_a_template_is_refused_before_the_first_rollout(no_template):
    cfg = PolicyConfig(source="tiny", tokenizer=str(no_template))
    tok = load_tokenizer(cfg)
    assert tok.chat_template is None
    backend = FakeBackend(tok, [[ANSWER]])
    with pytest.raises(PolicyError, match=r"^\[rollout.policy.chat_template\] got a tokenizer "):
        AgentLoop(backend, FakeRetriever(), AgentConfig()).run(["q"], 1)
    with pytest.raises(PolicyError, match=r"Fix: set rollout.policy.chat_template=raw"):
        chat_prompt_ids(tok, [{"role": "user", "content": "q"}])
