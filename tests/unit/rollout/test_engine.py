"""AgentLoop with a scripted fake policy and a fake retriever: token bookkeeping, batching, budgets.

The fake tokenizer is byte level (one ASCII character = one token), so every expected token range
below is just a character count.
"""

from __future__ import annotations

import itertools
import random
import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from framework.retrieval.types import QueryError, RetrievalError
from framework.rollout.config import AgentConfig
from framework.rollout.engine import AgentLoop, _segments
from framework.rollout.parser import STOP_STRINGS, parse_call
from framework.types import Segment, TurnSpan

from .fakes import (
    EOS,
    FUZZ_PIECES,
    PASSAGES,
    FakeBackend,
    FakeRetriever,
    FakeTokenizer,
    Turn,
    check_invariants,
    search_call,
    visit_call,
)

TOK = FakeTokenizer()
SYSTEM = "Tools: search, visit."
OBS_OPEN, OBS_CLOSE = "\n<tool_response>\n", "\n</tool_response>\n"


def enc(text: str) -> list[int]:
    return TOK.encode(text)


def prompt_of(question: str, system: str = SYSTEM) -> list[int]:
    return enc(f"<sys>{system}</sys><user>{question}</user><assistant>")


def run(scripts, questions=None, group_size=None, retriever=None, **cfg_kwargs):
    """Run the loop on ``scripts`` (one per rollout); returns (trajectories, backend, retriever)."""
    cfg = AgentConfig(system_prompt=SYSTEM, **cfg_kwargs)
    assert cfg.problems() == []
    backend = FakeBackend(TOK, scripts)
    retriever = retriever if retriever is not None else FakeRetriever()
    if questions is None:
        questions, group_size = [f"question {i}" for i in range(len(scripts))], 1
    trajs = AgentLoop(backend, retriever, cfg).run(questions, group_size)
    for t in trajs:
        check_invariants(t, cfg.max_total_tokens)
    return trajs, backend, retriever


def observations(t) -> list[str]:
    return [
        TOK.decode(t.token_ids[s.start : s.end]) for s in t.segments if s.kind == "tool_response"
    ]


# -- (a) a two-turn rollout: search then answer ---------------------------------------------------
THINK1 = "<think>I should search.</think>"
CALL1 = search_call("Jaws director", "Spielberg birthplace")
THINK2 = "<think>Spielberg was born in Cincinnati.</think>"
ANSWER2 = "<answer>Cincinnati</answer>"


def test_two_turn_rollout_token_bookkeeping():
    question = "Where was the director of Jaws born?"
    script = [THINK1 + "\n" + CALL1 + " text after the stop string", THINK2 + ANSWER2 + " more"]
    [t], backend, retriever = run([script], [question], 1)
    prompt = prompt_of(question)
    turn1, turn2 = enc(THINK1 + "\n" + CALL1), enc(THINK2 + ANSWER2)  # cut after the stop strings
    P, n1, n2 = len(prompt), len(turn1), len(turn2)

    # token_ids == prompt + turn 1 + observation + turn 2, exactly
    assert t.prompt_len == P
    assert t.token_ids[:P] == prompt
    assert t.token_ids[P : P + n1] == turn1
    assert t.token_ids[len(t.token_ids) - n2 :] == turn2
    obs_ids = t.token_ids[P + n1 : len(t.token_ids) - n2]
    obs = TOK.decode(obs_ids)
    assert obs.startswith(OBS_OPEN) and obs.endswith(OBS_CLOSE)
    assert enc(obs) == obs_ids  # tokenised on its own
    assert t.token_ids == prompt + turn1 + obs_ids + turn2

    # the model was conditioned on exactly this
    assert backend.seen[0] == [prompt, prompt + turn1 + obs_ids]
    assert backend.seen[0][-1] == t.token_ids[: len(t.token_ids) - n2]
    assert all(c["stop"] == tuple(STOP_STRINGS) for c in backend.calls)
    assert backend.calls[0]["max_new_tokens"] == [256]

    # loss mask: 1 exactly on the generated turns
    assert t.loss_mask == [0] * P + [1] * n1 + [0] * len(obs_ids) + [1] * n2

    # segments tile the response with the tags' token ranges
    a = P
    b = a + len(THINK1)
    c = b + 1  # the "\n" between the blocks
    d = c + len(CALL1)
    e = d + len(obs_ids)
    f = e + len(THINK2)
    g = f + len(ANSWER2)
    assert t.segments == [
        Segment("think", a, b),
        Segment("other", b, c),
        Segment("tool_call", c, d),
        Segment("tool_response", d, e),
        Segment("think", e, f),
        Segment("answer", f, g),
    ]
    assert g == len(t.token_ids)

    assert t.status == "ok" and t.end_reason == "answer"
    assert t.answer == "Cincinnati"
    assert t.think_text == "I should search.\nSpielberg was born in Cincinnati."
    assert t.response_text == THINK1 + "\n" + CALL1 + obs + THINK2 + ANSWER2
    assert t.completion == t.response_text
    assert t.stats == {
        "turns": 2,
        "tool_calls": 1,
        "queries": 2,
        "visits": 0,
        "invalid_calls": 0,
        "truncated_turns": 0,
        "generated_tokens": n1 + n2,
        "response_tokens": len(t.token_ids) - P,
    }
    # the observation shows each query with its ranked results
    assert 'Query "Jaws director":' in obs and 'Query "Spielberg birthplace":' in obs
    assert "[1] Jaws (film): Jaws is a 1975 thriller" in obs
    assert "Steven Spielberg" in obs
    assert retriever.search_calls == [["Jaws director", "Spielberg birthplace"]]
    assert (t.question, t.group) == (0, 0)
    # the search turn records its observation's range and a digest of exactly that text
    assert t.turns[0].observation == (P + n1, P + n1 + len(obs_ids))
    assert t.turns[0].observation_digest == TurnSpan.digest(obs)
    assert t.turns[1].observation is None and t.turns[1].observation_digest == ""


def test_search_observation_format_and_clipping():
    long_text = "alpha " * 100
    retr = FakeRetriever(passages=[("x1", "Alpha", long_text.strip()), *PASSAGES])
    [t], _, _ = run(
        [[search_call("alpha", "zzzz unknown"), "<answer>a</answer>"]],
        retriever=retr,
        max_passage_chars=20,
        search_k=2,
    )
    [obs] = observations(t)
    body = obs[len(OBS_OPEN) : -len(OBS_CLOSE)]
    clipped = long_text[:17].rstrip() + "..."
    assert body == f'Query "alpha":\n[1] Alpha: {clipped}\nQuery "zzzz unknown": no results.'


def test_visit_by_title_and_doc_id():
    script = [visit_call(title="jaws (FILM)"), visit_call(doc_id="p4"), "<answer>a</answer>"]
    [t], _, retr = run([script], max_visit_chars=30)
    obs = observations(t)
    text = dict((p[1], p[2]) for p in PASSAGES)["Jaws (film)"]
    assert obs[0] == f"{OBS_OPEN}Page Jaws (film):\n{text[:27].rstrip()}...{OBS_CLOSE}"
    assert obs[1].startswith(f"{OBS_OPEN}Page Mount Everest:\n")
    assert retr.document_calls == [(None, "jaws (FILM)"), ("p4", None)]
    assert retr.search_calls == []  # no search in these turns: the retriever is not asked
    assert t.stats["visits"] == 2 and t.stats["queries"] == 0 and t.stats["tool_calls"] == 2
    assert t.status == "ok"


def test_visit_of_unknown_title_is_an_error_observation_and_the_rollout_goes_on():
    script = [visit_call(title="Atlantis"), "<answer>unknown</answer>"]
    [t], _, _ = run([script])
    [obs] = observations(t)
    assert "Error: no page titled 'Atlantis'" in obs
    assert t.status == "ok" and t.answer == "unknown"
    assert t.stats["visits"] == 1 and t.stats["invalid_calls"] == 0


def test_end_of_sequence_before_any_tag_is_generated_and_masked():
    [t], _, _ = run([[Turn("I give up", eos=True)]])
    assert t.token_ids[-1] == EOS and t.loss_mask[-1] == 1
    assert t.status == "format_error" and t.end_reason == "no <tool_call> and no <answer>"
    assert t.response_text == "I give up<eos>"


def test_text_after_a_stop_string_and_eos_after_it_are_dropped():
    [t], _, _ = run([[Turn("<answer>x</answer> and then", eos=True)]])
    assert EOS not in t.token_ids
    assert t.response_text == "<answer>x</answer>"


# -- (b) batching ----------------------------------------------------------------------------------
def test_batching_groups_and_one_retriever_call_per_turn():
    questions = ["q zero", "q one", "q two"]
    scripts = [
        # question 0
        [search_call("Jaws director", "Cincinnati"), "<answer>a</answer>"],
        [search_call("Cincinnati", "Jaws director"), search_call("Ohio"), "<answer>b</answer>"],
        # question 1
        ["<answer>right away</answer>"],
        [visit_call(title="Cincinnati"), search_call("Ohio", "Everest"), "<answer>c</answer>"],
        # question 2
        [search_call("Everest"), "no tags at all"],
        [search_call("Jaws director"), search_call("Ohio"), "<answer>d</answer>"],
    ]
    cfg = AgentConfig(system_prompt=SYSTEM)
    backend, retr = FakeBackend(TOK, scripts), FakeRetriever()
    trajs = AgentLoop(backend, retr, cfg).run(questions, 2, question_ids=[10, 11, 12])
    for t in trajs:
        check_invariants(t, cfg.max_total_tokens)

    assert [(t.question, t.group) for t in trajs] == [
        (10, 0),
        (10, 0),
        (11, 1),
        (11, 1),
        (12, 2),
        (12, 2),
    ]
    for i, t in enumerate(trajs):
        assert t.token_ids[: t.prompt_len] == prompt_of(questions[i // 2])
    # turn 1: all six rollouts; turn 2: five (one answered); turn 3: three
    assert [len(c["sequences"]) for c in backend.calls] == [6, 5, 3]
    # one retriever call per turn, with deduplicated queries in first-seen order
    assert retr.search_calls == [
        ["Jaws director", "Cincinnati", "Everest"],
        ["Ohio", "Everest"],
    ]
    assert retr.document_calls == [(None, "Cincinnati")]
    assert [t.status for t in trajs] == ["ok", "ok", "ok", "ok", "format_error", "ok"]
    assert [t.answer for t in trajs] == ["a", "b", "right away", "c", None, "d"]
    assert [t.stats["queries"] for t in trajs] == [2, 3, 0, 2, 1, 2]
    assert [t.stats["turns"] for t in trajs] == [2, 3, 1, 3, 2, 3]
    # each rollout's observation answers its own queries only
    obs0 = observations(trajs[0])[0]
    assert 'Query "Jaws director"' in obs0 and 'Query "Cincinnati"' in obs0
    assert "Everest" not in obs0


def test_rollouts_of_one_question_are_independent():
    scripts = [[search_call("Jaws")] * 3 + ["<answer>late</answer>"], ["<answer>early</answer>"]]
    trajs, backend, _ = run(scripts, ["same question"], 2)
    assert trajs[0].token_ids[: trajs[0].prompt_len] == trajs[1].token_ids[: trajs[1].prompt_len]
    assert trajs[1].stats["turns"] == 1 and trajs[0].stats["turns"] == 4
    assert [len(c["sequences"]) for c in backend.calls] == [2, 1, 1, 1]


# -- (c) budgets and format errors -----------------------------------------------------------------
def test_max_tool_calls_exceeded_is_over_budget():
    script = [search_call("Jaws"), visit_call(title="Jaws (film)"), search_call("Ohio"), "x"]
    [t], _, retr = run([script], max_tool_calls=2)
    assert t.status == "over_budget" and t.end_reason == "max_tool_calls"
    assert t.stats["tool_calls"] == 2 and t.stats["turns"] == 3
    assert len(observations(t)) == 2  # the third call got no answer
    assert t.segments[-1].kind == "tool_call"
    assert retr.search_calls == [["Jaws"]]


def test_max_tool_calls_zero_ends_at_the_first_call():
    [t], _, retr = run([[search_call("Jaws")]], max_tool_calls=0)
    assert (t.status, t.end_reason) == ("over_budget", "max_tool_calls")
    assert retr.search_calls == []


def test_long_observation_exceeding_max_total_tokens():
    big = "word " * 400
    retr = FakeRetriever(passages=[("b1", "Big", big.strip())])
    call = search_call("word")
    P = len(prompt_of("question 0"))
    budget = P + len(call) + 100
    [t], backend, _ = run(
        [[call, "<answer>x</answer>"]],
        retriever=retr,
        max_total_tokens=budget,
        max_passage_chars=2000,
    )
    assert (t.status, t.end_reason) == ("over_budget", "max_total_tokens")
    assert len(t.token_ids) == P + len(call) <= budget
    assert observations(t) == []
    assert len(backend.calls) == 1


def test_long_generation_is_cut_at_the_total_budget():
    P = len(prompt_of("question 0"))
    [t], backend, _ = run([["<think>" + "x" * 500]], max_total_tokens=P + 100)
    assert backend.calls[0]["max_new_tokens"] == [100]
    assert len(t.token_ids) == P + 100
    assert (t.status, t.end_reason) == ("over_budget", "max_total_tokens")
    assert t.stats["truncated_turns"] == 1
    assert t.think_text == "x" * 93


def test_second_turn_gets_only_what_is_left_of_the_budget():
    call = search_call("Jaws")
    P = len(prompt_of("question 0"))
    [t0], _, _ = run([[call, "<answer>x</answer>"]])
    obs_len = len(observations(t0)[0])
    budget = P + len(call) + obs_len + 10
    [t], backend, _ = run([[call, "<think>" + "y" * 50 + "</think>"]], max_total_tokens=budget)
    assert backend.calls[1]["max_new_tokens"] == [10]
    assert len(t.token_ids) == budget
    assert (t.status, t.end_reason) == ("over_budget", "max_total_tokens")


def test_budget_used_up_exactly_by_an_observation_ends_without_another_generation():
    call = search_call("Jaws")
    P = len(prompt_of("question 0"))
    [t0], _, _ = run([[call, "<answer>x</answer>"]])
    budget = P + len(call) + len(observations(t0)[0])
    [t], backend, _ = run([[call, "<answer>x</answer>"]], max_total_tokens=budget)
    assert len(backend.calls) == 1
    assert len(t.token_ids) == budget
    assert (t.status, t.end_reason) == ("over_budget", "max_total_tokens")


def test_prompt_longer_than_the_budget_is_over_budget_without_generating():
    [t], backend, _ = run([["<answer>x</answer>"]], ["q" * 100], 1, max_total_tokens=16)
    assert backend.calls == []
    assert (t.status, t.end_reason) == ("over_budget", "max_total_tokens")
    assert t.stats["turns"] == 0 and t.segments == []


def test_max_turns():
    [t], backend, _ = run([[search_call("Jaws")] * 5], max_turns=2, max_tool_calls=10)
    assert (t.status, t.end_reason) == ("over_budget", "max_turns")
    assert t.stats["turns"] == 2 and len(backend.calls) == 2


def test_turn_without_tags_is_a_format_error():
    [t], _, _ = run([[search_call("Jaws"), "The answer is Paris."]])
    assert (t.status, t.end_reason) == ("format_error", "no <tool_call> and no <answer>")
    assert t.answer is None and t.stats["turns"] == 2


def test_invalid_calls_become_error_observations_and_count():
    script = [
        '<tool_call>{"name": "search", "arguments": {"queries": ["x"]}</tool_call>',
        '<tool_call>{"name": "browse", "arguments": {}}</tool_call>',
        "<answer>done</answer>",
    ]
    [t], _, retr = run([script], max_invalid_calls=2)
    obs = observations(t)
    bodies = [t_[len("<tool_call>") : -len("</tool_call>")] for t_ in script[:2]]
    assert obs == [f"{OBS_OPEN}Error: {parse_call(b)}{OBS_CLOSE}" for b in bodies]
    assert obs[0].startswith(OBS_OPEN + "Error: tool call is not valid JSON")
    assert obs[1].startswith(OBS_OPEN + "Error: unknown tool 'browse'")
    assert t.status == "ok"
    assert t.stats["invalid_calls"] == 2 and t.stats["tool_calls"] == 2
    assert retr.search_calls == []


def test_more_invalid_calls_than_allowed_is_a_format_error():
    bad = '<tool_call>{"name": "visit", "arguments": {}}</tool_call>'
    [t], _, _ = run([[bad, bad, bad, "<answer>x</answer>"]], max_invalid_calls=2)
    assert (t.status, t.end_reason) == ("format_error", "too many invalid tool calls")
    assert t.stats["invalid_calls"] == 3 and t.stats["turns"] == 3
    assert len(observations(t)) == 2


def test_turn_truncated_by_max_new_tokens_per_turn():
    [t], backend, _ = run(
        [['<tool_call>{"name": "search", "arguments": {"queries": ["a long']],
        max_new_tokens_per_turn=20,
    )
    assert backend.calls[0]["max_new_tokens"] == [20]
    assert t.stats["truncated_turns"] == 1 and t.stats["generated_tokens"] == 20
    assert (t.status, t.end_reason) == ("format_error", "unclosed <tool_call> block")


def test_query_error_for_one_query_still_answers_the_others():
    retr = FakeRetriever(bad={"BAD"})
    scripts = [
        [search_call("BAD", "Jaws"), "<answer>a</answer>"],
        [search_call("Everest"), "<answer>b</answer>"],
    ]
    trajs, _, _ = run(scripts, retriever=retr)
    assert retr.search_calls == [["BAD", "Jaws", "Everest"], ["BAD"], ["Jaws"], ["Everest"]]
    obs0, obs1 = observations(trajs[0])[0], observations(trajs[1])[0]
    assert "Query \"BAD\": search failed: [fake] refuses 'BAD'\n" in obs0
    assert "second line" not in obs0
    assert "[1] Jaws (film)" in obs0
    assert "[1] Mount Everest" in obs1
    assert [t.status for t in trajs] == ["ok", "ok"]


# -- (d) tool responses never carry gradient, whatever the model does -------------------------------
TITLES = [p[1] for p in PASSAGES] + ["Atlantis", "jaws (film)"]
WORDS = ["Jaws", "director", "Ohio", "Everest", "Ada", "zzz", "city", "born", "BAD"]


def random_turn(rng: random.Random) -> str | Turn:
    think = "<think>" + " ".join(rng.choices(WORDS, k=rng.randint(0, 6))) + "</think>"
    prefix = rng.choice(["", think, think + "\n", "junk "])
    kind = rng.choices(
        ["search", "visit", "badjson", "unknown", "answer", "notags", "long", "eos", "unicode"],
        weights=[6, 3, 1, 1, 2, 1, 1, 1, 1],
    )[0]
    if kind == "search":
        qs = [" ".join(rng.choices(WORDS, k=rng.randint(1, 3))) for _ in range(rng.randint(1, 3))]
        body = search_call(*qs)
    elif kind == "visit":
        body = visit_call(title=rng.choice(TITLES))
    elif kind == "badjson":
        body = '<tool_call>{"name": "search", "arguments": [</tool_call>'
    elif kind == "unknown":
        body = '<tool_call>{"name": "open", "arguments": {"q": 1}}</tool_call>'
    elif kind == "answer":
        body = "<answer>" + rng.choice(WORDS) + "</answer>"
    elif kind == "notags":
        body = "no tags here"
    elif kind == "long":
        body = "<think>" + "z" * rng.randint(50, 400)
    elif kind == "eos":
        return Turn(prefix + "stopping", eos=True)
    else:
        body = search_call("Jaws 😀 été")
    return prefix + body + rng.choice(["", " trailing", "</tool_call>"])


@pytest.mark.parametrize("seed", range(40))
def test_random_scripts_keep_every_invariant(seed):
    rng = random.Random(seed)
    n_q, group = rng.randint(1, 3), rng.randint(1, 3)
    scripts = [[random_turn(rng) for _ in range(8)] for _ in range(n_q * group)]
    cfg = AgentConfig(
        system_prompt=SYSTEM,
        max_turns=rng.randint(1, 6),
        max_tool_calls=rng.randint(0, 5),
        max_new_tokens_per_turn=rng.randint(40, 300),
        max_total_tokens=rng.randint(100, 1500),
        max_invalid_calls=rng.randint(0, 2),
        search_k=rng.randint(1, 3),
        max_passage_chars=rng.randint(10, 200),
    )
    backend, retr = FakeBackend(TOK, scripts), FakeRetriever(bad={"BAD"})
    questions = [f"question {i}" for i in range(n_q)]
    trajs = AgentLoop(backend, retr, cfg).run(questions, group)
    assert len(trajs) == n_q * group
    for i, t in enumerate(trajs):
        check_invariants(
            t, max(cfg.max_total_tokens, t.prompt_len), prompt_of(questions[i // group])
        )
        # every tool_response token has mask 0; every other response token has mask 1
        for s in t.segments:
            want = 0 if s.kind == "tool_response" else 1
            assert t.loss_mask[s.start : s.end] == [want] * (s.end - s.start)
            if s.kind == "tool_response":
                obs = TOK.decode(t.token_ids[s.start : s.end])
                assert obs.startswith(OBS_OPEN) and obs.endswith(OBS_CLOSE)
        # the model saw exactly the prefixes of the final sequence, one per turn
        seen = backend.seen[i]
        assert len(seen) == t.stats["turns"] <= cfg.max_turns
        for seq in seen:
            assert t.token_ids[: len(seq)] == seq
        # the tokens between conditioning points are: the generated turn, then an observation
        bounds = [len(s) for s in seen] + [len(t.token_ids)]
        for lo, hi in itertools.pairwise(bounds):
            mask = t.loss_mask[lo:hi]
            first_zero = mask.index(0) if 0 in mask else len(mask)
            assert first_zero >= 1 or hi == lo  # a turn generates at least one token here
            assert mask == [1] * first_zero + [0] * (len(mask) - first_zero)
        assert t.stats["tool_calls"] <= cfg.max_tool_calls
        assert t.stats["truncated_turns"] <= t.stats["turns"]
        assert t.response_text == TOK.decode(t.token_ids[t.prompt_len :])
        if t.status == "format_error" and t.end_reason == "too many invalid tool calls":
            assert t.stats["invalid_calls"] == cfg.max_invalid_calls + 1
        else:
            assert t.stats["invalid_calls"] <= cfg.max_invalid_calls
        # a rollout whose retriever calls failed still got the other queries' results
        for obs in observations(t):
            assert "search failed" not in obs or 'Query "BAD"' in obs


# -- fuzzing the loop with arbitrary model output ---------------------------------------------------
_OPEN = re.compile(r"<(think|tool_call|answer)>")


def reference_kinds(text: str) -> list[str]:
    """Kind of every character: a block runs from its opening tag to the next closing tag of its
    kind, or to the end of the turn when it is never closed (the parser's reading)."""
    kinds = ["other"] * len(text)
    pos = 0
    while m := _OPEN.search(text, pos):
        close = f"</{m.group(1)}>"
        j = text.find(close, m.end())
        end = len(text) if j < 0 else j + len(close)
        kinds[m.start() : end] = [m.group(1)] * (end - m.start())
        pos = end
    return kinds


PIECES = [
    *FUZZ_PIECES,
    '"Jaws"',
    search_call("Jaws director"),
    search_call("Ohio", "BAD"),
    visit_call(title="Cincinnati"),
    visit_call(title="Nowhere"),
]
model_text = st.lists(
    st.one_of(st.sampled_from(PIECES), st.text(max_size=10)), min_size=0, max_size=25
).map("".join)
CALLS = [
    search_call("Jaws director"),
    search_call("Ohio", "BAD"),
    search_call("Everest", "Jaws director", "zzz"),
    visit_call(title="Cincinnati"),
    visit_call(title="Nowhere"),
    '<tool_call>{"name": "search", "arguments": {"queries": [}}</tool_call>',
    "<answer>Cincinnati</answer>",
]
# mostly well-formed turns (a prefix, one block, anything after the stop string), so rollouts
# last several turns; then noisy ones and arbitrary text
well_formed = st.builds(
    lambda pre, body, post: pre + body + post,
    st.sampled_from(["", "<think>hm</think>", "<think>a\n</think>\n", "junk "]),
    st.sampled_from(CALLS),
    model_text,
)
noisy = st.builds(lambda a, b, c: a + b + c, model_text, st.sampled_from(CALLS), model_text)
model_turn = st.one_of(
    well_formed,
    well_formed,
    well_formed,
    well_formed,
    noisy,
    model_text,
    st.builds(Turn, model_text, st.booleans()),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.lists(model_turn, min_size=1, max_size=5), min_size=1, max_size=4),
    st.integers(1, 4),
    st.integers(100, 300),
    st.integers(300, 2000),
)
@pytest.mark.slow
def test_fuzz_loop_never_dies_and_masks_hold(scripts, max_turns, per_turn, total):
    cfg = AgentConfig(
        system_prompt=SYSTEM,
        max_turns=max_turns,
        max_new_tokens_per_turn=per_turn,
        max_total_tokens=total,
        max_tool_calls=3,
        max_invalid_calls=1,
    )
    backend, retr = FakeBackend(TOK, scripts), FakeRetriever(bad={"BAD"})
    trajs = AgentLoop(backend, retr, cfg).run([f"question {i}" for i in range(len(scripts))], 1)
    for i, t in enumerate(trajs):
        check_invariants(t, total, prompt_of(f"question {i}"))
        for s in t.segments:
            if s.kind == "tool_response":
                assert t.loss_mask[s.start : s.end] == [0] * (s.end - s.start)
        # each generated turn's tokens take the kind of the block they sit in
        kinds = {j: s.kind for s in t.segments for j in range(s.start, s.end)}
        for seq in backend.seen[i]:
            lo = hi = len(seq)
            while hi < len(t.token_ids) and t.loss_mask[hi] == 1:
                hi += 1
            ids = t.token_ids[lo:hi]
            text = TOK.decode(ids)
            if EOS in ids or not text.isascii() or len(text) != len(ids):
                continue
            want = reference_kinds(text)
            if text.endswith("\n") and want[-1] != "other":
                continue  # see test_unclosed_block_ending_in_a_newline_keeps_its_kind
            assert [kinds[j] for j in range(lo, hi)] == want


# -- bugs --------------------------------------------------------------------------------------------
def test_lone_surrogate_in_a_query_does_not_kill_the_loop():
    call = '<tool_call>{"name": "search", "arguments": {"queries": ["\\ud800 Jaws"]}}</tool_call>'
    [t], _, _ = run([[call, "<answer>x</answer>"]])
    assert t.status == "ok"


class _SilentFailures(FakeRetriever):
    """Raises exceptions without a message (as some HTTP clients and libraries do)."""

    def search(self, queries, k):
        if "BAD" in queries:
            raise QueryError()
        return super().search(queries, k)

    def document(self, *, doc_id=None, title=None):
        raise RetrievalError("")


@pytest.mark.parametrize(
    "call", [search_call("BAD", "Jaws"), visit_call(title="Jaws (film)")], ids=["search", "visit"]
)
def test_retriever_errors_without_a_message_become_observations(call):
    [t], _, _ = run([[call, "<answer>x</answer>"]], retriever=_SilentFailures())
    assert t.status == "ok"
    assert 'Query "BAD": search failed' in t.response_text or "Error: " in t.response_text


def test_unclosed_block_ending_in_a_newline_keeps_its_kind():
    text = "<think>still thinking\n"
    segs = _segments(TOK, enc(text), text, 0)
    assert segs == [Segment("think", 0, len(text))]


class _SlowBackend(FakeBackend):
    def generate(self, sequences, max_new_tokens, stop):
        time.sleep(0.03)
        return super().generate(sequences, max_new_tokens, stop)


class _SlowRetriever(FakeRetriever):
    def search(self, queries, k):
        time.sleep(0.02)
        return super().search(queries, k)


def _timed_run() -> dict[str, float]:
    backend = _SlowBackend(TOK, [[search_call("Jaws"), "<answer>x</answer>"]])
    loop = AgentLoop(backend, _SlowRetriever(), AgentConfig(system_prompt=SYSTEM))
    [t] = loop.run(["q"], 1)
    assert t.status == "ok"
    return loop.timings


def test_timings_of_retrieval_and_total():
    timings = _timed_run()
    assert set(timings) == {"generate", "retrieval", "total"}
    assert timings["retrieval"] >= 0.02
    assert timings["total"] >= 0.06 + timings["retrieval"]


def test_timings_of_generation():
    timings = _timed_run()
    assert timings["generate"] >= 0.06  # two backend calls of 30 ms
    assert timings["total"] >= timings["generate"] + timings["retrieval"]
