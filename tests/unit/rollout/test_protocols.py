"""The agent protocols: the registry kind, ``agent.protocol``, and ``search_r1`` byte for byte.

Search-R1's strings below are copied by hand from its code (PeterGriffinJin/Search-R1, Apache-2.0):
``make_prefix`` of ``scripts/data_process/qa_search_train_merge.py`` and ``execute_predictions``,
``postprocess_predictions``, ``_passages2string`` of ``search_r1/llm_agent/generation.py``; they
are not imported from the protocol, so a change there fails here. The fake tokenizer is byte level
(one ASCII character = one token), so every token range is a character count.
"""

from __future__ import annotations

import json
import random
import re

import httpx
import pytest

from framework.registry import AGENT_PROTOCOLS, ALL
from framework.registry.listing import describe, render
from framework.retrieval.http import HttpRetriever, HttpRetrieverConfig
from framework.rollout.config import AgentConfig
from framework.rollout.engine import AgentLoop
from framework.rollout.protocol import Observation, build_protocol
from framework.rollout.search_r1 import SearchR1Protocol, first_action, passages_text
from framework.rollout.seekrl_protocol import SeekrlProtocol
from framework.rollout.tools import ToolResult
from framework.types import Hit, ToolCall

from .fakes import EOS, FakeBackend, FakeRetriever, FakeTokenizer, Turn, check_invariants

TOK = FakeTokenizer()

# -- Search-R1's strings, from its code ------------------------------------------------------------
# make_prefix(dp, template_type='base'): f"""Answer the given question. \
# ... For example, <answer> Beijing </answer>. Question: {question}\n"""
SR1_PREFIX = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every "
    "time you get new information. After reasoning, if you find you lack some knowledge, you can "
    "call a search engine by <search> query </search> and it will return the top searched results "
    "between <information> and </information>. You can search as many times as your want. If you "
    "find no further external knowledge needed, you can directly provide the answer inside <answer> "
    "and </answer>, without detailed illustrations. For example, <answer> Beijing </answer>. "
    "Question: {question}\n"
)
# execute_predictions: the observation of an action that is neither search nor answer
SR1_INVALID = (
    "\nMy previous action is invalid. If I want to search, I should put the query between <search> "
    "and </search>. If I want to give the final answer, I should put the answer between <answer> "
    "and </answer>. Let me try again.\n"
)
# postprocess_predictions
SR1_PATTERN = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)


def sr1_information(results: str) -> str:
    """execute_predictions: f'\\n\\n<information>{search_results.pop(0).strip()}</information>\\n\\n'"""
    return f"\n\n<information>{results.strip()}</information>\n\n"


def enc(text: str) -> list[int]:
    return TOK.encode(text)


class KRetriever(FakeRetriever):
    """The fake retriever, also recording the ``k`` of every search."""

    def __init__(self, bad: set[str] | None = None) -> None:
        super().__init__(bad=bad or set())
        self.ks: list[int] = []

    def search(self, queries, k):
        self.ks.append(k)
        return super().search(queries, k)


# -- the registry kind ---------------------------------------------------------------------------
def test_protocol_kind_is_registered_and_listed():
    assert ALL["protocol"] is AGENT_PROTOCOLS
    listing = describe(["protocol"])
    names = [e["name"] for e in listing["components"]["protocol"]]
    assert {"seekrl", "search_r1"} <= set(names)
    text = render(listing)
    assert "\nprotocol (" in text and "framework.rollout.search_r1:SearchR1Protocol" in text
    assert "Search-R1, arXiv 2503.09516" in text  # the paper, so a result is read as Search-R1's


def test_agent_protocol_defaults_to_seekrl_and_unknown_names_are_refused_with_a_fix():
    assert AgentConfig().protocol == "seekrl"
    assert isinstance(build_protocol(AgentConfig()), SeekrlProtocol)
    assert isinstance(build_protocol(AgentConfig(protocol="search_r1")), SearchR1Protocol)
    (problem,) = AgentConfig(protocol="search_r2").problems()
    assert str(problem.under("agent")) == (
        "[agent.protocol] got 'search_r2'; expected one of ['search_r1', 'seekrl', 'tool_calling']. "
        "Fix: use agent.protocol=search_r1, or install the plugin that provides 'search_r2'."
    )


def test_seekrl_protocol_takes_the_agent_system_prompt():
    protocol = build_protocol(AgentConfig(system_prompt="Tools: search."))
    assert protocol.prompt_ids(TOK, "Q?") == enc(
        "<sys>Tools: search.</sys><user>Q?</user><assistant>"
    )


# -- seekrl: observation rendering (today's bytes) -----------------------------------------------
def test_seekrl_observation_bytes():
    obs = Observation("turn", (ToolResult("A"), ToolResult("B")), ("bad call",))
    text, ids = SeekrlProtocol(cfg=None).observation(obs, TOK)  # type: ignore[arg-type]
    assert text == "\n<tool_response>\nA\n\nB\n\nError: bad call\n</tool_response>\n"
    assert ids == enc(text)


# -- search_r1: parsing --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "<search> who directed Jaws </search>",
        "<think>x</think><answer> Paris </answer>",
        "<answer>a<search>q</search>",  # the answer is unclosed: the search is the action
        "<search>a<search>b</search>",  # the first opening, up to the first close
        "<answer>x</answer><search>y</search>",
        "<search>\nmulti\nline\n</search>",
        "<search></search>",
        "no tags at all",
        "<search>open only <answer>also open",
        "</search><search>q</search>",
        "<searc>q</searc><answer>z</answer>",
        "",
    ],
)
def test_first_action_is_search_r1s_regex_span(text):
    m = SR1_PATTERN.search(text)
    assert first_action(text) == ((m.group(1), m.group(2)) if m else None)


def test_first_action_matches_the_regex_on_random_tag_soup():
    rng = random.Random(0)
    pieces = ["<search>", "</search>", "<answer>", "</answer>", "<think>", "q", " ", "\n", "<"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        m = SR1_PATTERN.search(text)
        assert first_action(text) == ((m.group(1), m.group(2)) if m else None), text


def test_search_r1_parse_answer_search_and_invalid():
    p = SearchR1Protocol(cfg=None)  # type: ignore[arg-type]
    turn = p.parse("<think> a </think><think>b</think>\n<search>  Jaws director \n</search>")
    assert turn.calls == [ToolCall("search", queries=("Jaws director",))]
    assert turn.think == "a\nb" and turn.answer is None and turn.malformed is None
    turn = p.parse("<think>so</think><answer> Cincinnati </answer>")
    assert turn.answer == "Cincinnati" and turn.calls == [] and turn.think == "so"
    turn = p.parse("<think>unclosed thinking")
    assert (
        turn.malformed == "no <search> and no <answer> span" and turn.think == "unclosed thinking"
    )
    assert (
        p.parse("<tool_call>{}</tool_call>").malformed is not None
    )  # seekrl's calls are not actions


# -- search_r1: rendering ------------------------------------------------------------------------
def test_passages_text_is_search_r1s_passages2string():
    hits = [
        Hit("1", "1", "Jaws (film)", "Jaws is a 1975 film.", 2.0),
        Hit("2", "2", "Multi", "line one\nline two", 1.0),
    ]
    # contents = '"Jaws (film)"\nJaws is a 1975 film.': title = first line (quotes kept), text = rest
    assert passages_text(hits) == (
        'Doc 1(Title: "Jaws (film)") Jaws is a 1975 film.\n'
        'Doc 2(Title: "Multi") line one\nline two\n'
    )
    assert passages_text([]) == ""


def test_search_r1_observation_bytes():
    p = SearchR1Protocol(cfg=None)  # type: ignore[arg-type]
    results = 'Doc 1(Title: "A") x\n'
    text, ids = p.observation(Observation("t", (ToolResult(results),)), TOK)
    assert (
        text == sr1_information(results) == '\n\n<information>Doc 1(Title: "A") x</information>\n\n'
    )
    assert ids == enc(text)
    text, ids = p.observation(Observation("t", invalid="no span"), TOK)
    assert text == SR1_INVALID and ids == enc(SR1_INVALID)


# -- search_r1 through the real agent loop -------------------------------------------------------
QUESTION = "Where was the director of Jaws born?"
TURN1 = "<think>I need the director.</think>\n<search> Jaws director </search>"
TURN2 = "I am not sure what to do."
TURN3 = "<think>Spielberg, born in Cincinnati.</think>\n<answer> Cincinnati </answer>"
# the fake retriever ranks by shared words: 'jaws' (p1), then 'director' (p2); k = 3 finds two
RESULTS1 = (
    'Doc 1(Title: "Jaws (film)") Jaws is a 1975 thriller film directed by Steven Spielberg.\n'
    'Doc 2(Title: "Steven Spielberg") Steven Spielberg is an American film director born in '
    "Cincinnati.\n"
)


def run_search_r1(scripts, bad=None, **cfg):
    agent = AgentConfig(protocol="search_r1", **cfg)
    assert agent.problems() == []
    backend, retriever = FakeBackend(TOK, scripts), KRetriever(bad)
    trajs = AgentLoop(backend, retriever, agent).run([QUESTION] * len(scripts), 1)
    for t in trajs:
        check_invariants(t, agent.max_total_tokens)
    return trajs, backend, retriever


def test_search_r1_rollout_prompt_stops_queries_observations_and_loss_mask():
    script = [
        TURN1 + " text after the stop",  # cut after </search>
        Turn(TURN2, eos=True),  # no action: the invalid-action message, and the rollout goes on
        TURN3 + "</search> more",  # cut after </answer>, the first stop string
    ]
    [t], backend, retriever = run_search_r1([script])

    # the prompt: Search-R1's instruction and the question, one user message, chat-templated
    prompt = enc("<user>" + SR1_PREFIX.format(question=QUESTION) + "</user><assistant>")
    turn1, turn2, turn3 = enc(TURN1), [*enc(TURN2), EOS], enc(TURN3)
    obs1, obs2 = enc(sr1_information(RESULTS1)), enc(SR1_INVALID)
    assert t.token_ids == prompt + turn1 + obs1 + turn2 + obs2 + turn3
    assert t.prompt_len == len(prompt)
    # the loss mask covers exactly the generated tokens
    assert t.loss_mask == (
        [0] * len(prompt) + [1] * len(turn1) + [0] * len(obs1) + [1] * len(turn2)
        + [0] * len(obs2) + [1] * len(turn3)
    )  # fmt: skip
    assert t.stats["generated_tokens"] == len(turn1) + len(turn2) + len(turn3)

    # generation stops after </search> or </answer>; the policy saw exactly what is trained on
    assert all(c["stop"] == ("</search>", "</answer>") for c in backend.calls)
    assert backend.seen[0] == [prompt, prompt + turn1 + obs1, prompt + turn1 + obs1 + turn2 + obs2]
    # the query is the stripped span; top-k is agent.search_k
    assert retriever.search_calls == [["Jaws director"]] and retriever.ks == [3]
    assert retriever.document_calls == []  # no visit tool

    assert t.status == "ok" and t.end_reason == "answer" and t.answer == "Cincinnati"
    assert t.think_text == "I need the director.\nSpielberg, born in Cincinnati."  # E-GRPO reads it
    assert t.response_text == (
        TURN1 + sr1_information(RESULTS1) + TURN2 + "<eos>" + SR1_INVALID + TURN3
    )
    assert {k: t.stats[k] for k in ("turns", "tool_calls", "invalid_calls", "queries")} == {
        "turns": 3,
        "tool_calls": 2,
        "invalid_calls": 1,
        "queries": 1,
    }
    assert [(x.calls, x.invalid_calls) for x in t.turns] == [
        ((ToolCall("search", queries=("Jaws director",)),), 0),
        ((), 1),
        ((), 0),
    ]
    assert t.turns[0].evidence == RESULTS1
    # the <search> block is the turn's tool_call segment
    p, n1 = len(prompt), len(turn1)
    start = p + TURN1.index("<search>")
    kinds = {s.kind: (s.start, s.end) for s in t.segments if s.start < p + n1}
    assert kinds["tool_call"] == (start, p + n1)
    assert kinds["think"] == (p, p + len("<think>I need the director.</think>"))


def test_observations_keep_their_first_max_observation_tokens():
    # Search-R1's _process_next_obs: next_obs_ids[:, :max_obs_length]; the byte tokenizer makes the
    # kept tokens the observation's first 40 characters
    script = [TURN1, TURN3]
    [whole], _, _ = run_search_r1([script])
    [cut], _, _ = run_search_r1([script], max_observation_tokens=40)
    obs = sr1_information(RESULTS1)
    start, end = cut.turns[0].observation
    assert end - start == 40 and TOK.decode(cut.token_ids[start:end]) == obs[:40]
    assert cut.response_text == TURN1 + obs[:40] + TURN3
    assert cut.stats["cut_observations"] == 1 and "cut_observations" not in whole.stats
    assert cut.loss_mask[start:end] == [0] * 40 and cut.answer == whole.answer == "Cincinnati"
    # an observation within the bound is left whole, tokens and all
    [same], _, _ = run_search_r1([script], max_observation_tokens=len(enc(obs)))
    assert same.token_ids == whole.token_ids and "cut_observations" not in same.stats
    assert AgentConfig(max_observation_tokens=-1).problems()[0].path == "max_observation_tokens"


def test_search_r1_invalid_turns_do_not_end_the_rollout_before_max_turns():
    [t], _, retriever = run_search_r1([["nothing"] * 5], max_turns=4, max_invalid_calls=0)
    assert t.status == "over_budget" and t.end_reason == "max_turns"
    assert t.stats["turns"] == 4 and t.stats["invalid_calls"] == 4
    assert TOK.decode(t.token_ids[t.prompt_len :]) == ("nothing" + SR1_INVALID) * 4
    assert retriever.search_calls == []
    # nor does a later search count them against agent.max_invalid_calls
    script = ["nothing"] * 3 + ["<search>jaws</search>", "<answer>x</answer>"]
    [t], _, retriever = run_search_r1([script], max_invalid_calls=0)
    assert t.status == "ok" and t.answer == "x" and t.stats["invalid_calls"] == 3
    assert retriever.search_calls == [["jaws"]]


def test_search_r1_refused_query_reads_as_a_failed_search():
    [t], _, retriever = run_search_r1([["<search>boom</search>", "<answer>x</answer>"]], {"boom"})
    start, end = t.turns[0].observation
    # the refusal's first line inside <information> (Search-R1 has no failed search)
    assert TOK.decode(t.token_ids[start:end]) == sr1_information(
        "search failed: [fake] refuses 'boom'"
    )
    assert t.turns[0].evidence == "" and retriever.search_calls == [["boom"], ["boom"]]
    assert t.status == "ok" and t.answer == "x"


def test_search_r1_asks_an_http_retriever_only_at_retrieve():
    requests = []

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        requests.append((request.url.path, body))
        doc = {"id": "7", "contents": '"Jaws (film)"\nJaws is a 1975 film.'}
        return httpx.Response(200, json={"result": [[{"document": doc, "score": 1.5}]]})

    cfg = HttpRetrieverConfig(name="http", url="http://127.0.0.1:8000")
    retriever = HttpRetriever(cfg=cfg, transport=httpx.MockTransport(handle))
    agent = AgentConfig(protocol="search_r1", search_k=3)
    backend = FakeBackend(TOK, [["<search>jaws</search>", "<answer>Spielberg</answer>"]])
    [t] = AgentLoop(backend, retriever, agent).run([QUESTION], 1)
    assert requests == [("/retrieve", {"queries": ["jaws"], "topk": 3, "return_scores": True})]
    start, end = t.turns[0].observation
    # Search-R1's _passages2string of that contents: title = its first line, text = the rest
    assert TOK.decode(t.token_ids[start:end]) == sr1_information(
        'Doc 1(Title: "Jaws (film)") Jaws is a 1975 film.\n'
    )


# -- the train app: agent.protocol on the command line --------------------------------------------
def test_train_config_selects_a_protocol_and_refuses_unknown_ones_and_the_seekrl_expert():
    from framework.cli.app import load_config
    from framework.config import ConfigError

    cfg = load_config("train", ["agent.protocol=search_r1", "warm_start.sft=false"])
    assert cfg.agent.protocol == "search_r1"
    with pytest.raises(ConfigError) as info:
        load_config("train", ["agent.protocol=search_r2", "warm_start.sft=false"])
    assert [str(p) for p in info.value.problems] == [
        "[agent.protocol] got 'search_r2'; expected one of ['search_r1', 'seekrl', 'tool_calling']. "
        "Fix: use agent.protocol=search_r1, or install the plugin that provides 'search_r2'."
    ]
    with pytest.raises(ConfigError) as info:  # the cold-start expert writes seekrl text only
        load_config("train", ["agent.protocol=search_r1", "warm_start.sft=true"])
    (problem,) = info.value.problems
    assert problem.path == "agent.protocol" and "warm_start.sft" in str(problem)
    assert "Fix: set agent.protocol=seekrl" in str(problem)
