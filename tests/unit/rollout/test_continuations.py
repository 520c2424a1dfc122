"""AgentLoop.run_from: continuations from a rollout's turn prefix, as the loop would have gone on.

A continuation of the first ``k`` turns of a rollout must be exactly the rollout the loop makes
when the policy writes those ``k`` turns and then the continuation's turns: same tokens, masks,
segments, turns, statistics and texts. The byte-level fakes of test_engine make that checkable.
"""

from __future__ import annotations

import dataclasses

import pytest

from framework.rollout.config import AgentConfig
from framework.rollout.engine import AgentLoop, Prefix

from .fakes import FakeBackend, FakeRetriever, FakeTokenizer, check_invariants, search_call

TOK = FakeTokenizer()
T1 = "<think>Who directed Jaws?</think>" + search_call("Jaws director")
T2 = "<think>Where was he born?</think>" + search_call("Spielberg birthplace")
T3 = "<think>Cincinnati.</think><answer>Cincinnati</answer>"
ALT = "<think>Maybe Ohio.</think><answer>Ohio</answer>"


def loop(scripts, **kw) -> AgentLoop:
    cfg = AgentConfig(system_prompt="Tools.", **kw)
    return AgentLoop(FakeBackend(TOK, scripts), FakeRetriever(), cfg)


def source():
    [t] = loop([[T1, T2, T3]]).run(["Where was the director of Jaws born?"], 1)
    assert len(t.turns) == 3
    return t


def same_rollout(a, b) -> None:
    fields = ("token_ids", "loss_mask", "prompt_len", "segments", "turns", "status", "answer")
    for f in (*fields, "think_text", "response_text", "stats", "end_reason"):
        assert getattr(a, f) == getattr(b, f), f


@pytest.mark.parametrize("keep", [0, 1, 2])
def test_a_continuation_is_the_rollout_the_loop_makes_with_those_turns(keep):
    src = source()
    [cont] = loop([[ALT]]).run_from([Prefix(src, keep, group=0)])
    [direct] = loop([[*[T1, T2][:keep], ALT]]).run(["Where was the director of Jaws born?"], 1)
    check_invariants(cont, AgentConfig().max_total_tokens)
    same_rollout(cont, direct)
    assert (
        cont.question == src.question
        and cont.token_ids[: src.turns[0].start] == src.token_ids[: src.turns[0].start]
    )


def test_the_backend_is_asked_only_for_the_new_turns():
    src = source()
    backend_loop = loop([[ALT]])
    backend_loop.run_from([Prefix(src, 2)])
    calls = backend_loop.backend.calls  # type: ignore[attr-defined]
    assert len(calls) == 1
    assert calls[0]["sequences"] == [src.token_ids[: src.turns[1].observation[1]]]


def test_groups_order_and_several_continuations_of_one_prefix():
    src = source()
    prefixes = [Prefix(src, 1, group=1), Prefix(src, 1, group=1), Prefix(src, 2, group=0)]
    out = loop([[T2, T3], [ALT], [ALT]]).run_from(prefixes)
    assert [t.group for t in out] == [1, 1, 0]
    assert [t.answer for t in out] == ["Cincinnati", "Ohio", "Ohio"]
    assert [t.stats["turns"] for t in out] == [3, 2, 3]


def test_forced_text_is_masked_parsed_and_ends_the_exit():
    src = source()
    forced = "<answer>"
    [t] = loop([["Cincinnati</answer>"]]).run_from([Prefix(src, 1, forced=forced, max_new_turns=1)])
    cut = src.turns[0].observation[1]
    assert t.token_ids[:cut] == src.token_ids[:cut]
    assert TOK.decode(t.token_ids[cut : cut + len(forced)]) == forced
    assert t.loss_mask[cut : cut + len(forced)] == [0] * len(forced)
    assert t.loss_mask[cut + len(forced) :] == [1] * len("Cincinnati</answer>")
    assert t.answer == "Cincinnati" and t.status == "ok" and t.stats["turns"] == 2
    assert t.stats["generated_tokens"] == sum(t.loss_mask)
    assert t.response_text.endswith("<answer>Cincinnati</answer>")


def test_max_new_turns_stops_a_continuation_that_keeps_searching():
    src = source()
    [t] = loop([[T2, T3]]).run_from([Prefix(src, 1, max_new_turns=1)])
    assert t.stats["turns"] == 2 and t.end_reason == "max_turns" and t.answer is None


def test_log_probs_of_the_kept_turns_are_kept():
    src = dataclasses.replace(source())
    src.rollout_logprobs = [0.0] * src.prompt_len + [
        -0.5 if m else 0.0 for m in src.loss_mask[src.prompt_len :]
    ]
    [t] = loop([[ALT]]).run_from([Prefix(src, 1)])
    cut = src.turns[0].observation[1]
    # the fake backend records none for its new turn, so the continuation has none either
    assert t.rollout_logprobs is None
    assert src.rollout_logprobs[:cut].count(-0.5) == sum(src.loss_mask[:cut])


def test_bad_prefixes_are_refused():
    src = source()
    with pytest.raises(ValueError, match="keeps 4 turns of a rollout with 3"):
        loop([[ALT]]).run_from([Prefix(src, 4)])
    with pytest.raises(ValueError, match="turn 3 has no tool response"):
        loop([[ALT]]).run_from([Prefix(src, 3)])


def test_forced_text_without_room_left_ends_the_exit_over_budget():
    src = source()
    cut = src.turns[0].observation[1]
    [t] = loop([["Cincinnati</answer>"]], max_total_tokens=cut + 4).run_from(
        [Prefix(src, 1, forced="<answer>", max_new_turns=1)]
    )
    assert t.status == "over_budget" and t.end_reason == "max_total_tokens"
    assert t.token_ids == src.token_ids[:cut] and t.answer is None
