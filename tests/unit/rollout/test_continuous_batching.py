"""Continuous batching in the agent loop: a fixed number of rollouts in flight, a finished one
replaced at once by the next, and each rollout's result independent of its batch and slot."""

from __future__ import annotations

import re

import pytest

from framework.rollout.config import AgentConfig
from framework.rollout.engine import AgentLoop
from framework.types import Generation

from .fakes import FakeRetriever, FakeTokenizer, search_call

TOK = FakeTokenizer()


class CountingBackend:
    """Reads the question number ``n`` from the sequence: rollout of question ``n`` searches ``n``
    times, then answers ``n``. Records the size of every call."""

    tokenizer = TOK

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def generate(self, sequences, max_new_tokens, stop):
        self.sizes.append(len(sequences))
        out = []
        for seq in sequences:
            text = TOK.decode(seq)
            n = int(re.search(r"question (\d+)", text).group(1))
            done = text.count("<tool_response>")
            turn = search_call(f"q{n} {done}") if done < n else f"<answer>{n}</answer>"
            ids = TOK.encode(turn)
            out.append(Generation(ids, "stop", None))
        return out

    def update_weights(self, model) -> None:
        pass


def run_loop(max_in_flight, on_group_done=None):
    backend = CountingBackend()
    loop = AgentLoop(backend, FakeRetriever(), AgentConfig(system_prompt="s", max_turns=8))
    questions = [f"question {n}" for n in (3, 0, 1, 2)]
    trajs = loop.run(questions, 2, max_in_flight=max_in_flight, on_group_done=on_group_done)
    return trajs, backend


def test_finished_rollouts_are_replaced_and_results_match_the_all_at_once_run():
    together, wide = run_loop(None)
    ended: list[tuple[int, int]] = []
    streamed, narrow = run_loop(3, on_group_done=lambda g, ts: ended.append((g, len(ts))))
    assert [t.token_ids for t in streamed] == [t.token_ids for t in together]
    assert [t.answer for t in streamed] == ["3", "3", "0", "0", "1", "1", "2", "2"]
    assert all(t.status == "ok" for t in streamed)
    assert wide.sizes[0] == 8 and max(narrow.sizes) == 3
    # every call but the last ones is full: a finished rollout's slot is taken at once
    assert narrow.sizes[: len(narrow.sizes) - 3] == [3] * (len(narrow.sizes) - 3)
    assert sum(narrow.sizes) == sum(wide.sizes)  # the same turns, in more, smaller calls
    # a question is reported as soon as both its rollouts ended: question 0 (no search) first
    assert ended[0] == (1, 2) and sorted(g for g, _ in ended) == [0, 1, 2, 3]


def test_seeds_must_match_the_rollouts():
    loop = AgentLoop(CountingBackend(), FakeRetriever(), AgentConfig(system_prompt="s"))
    with pytest.raises(ValueError, match="3 seeds for 2 rollouts"):
        loop.run(["question 0"], 2, seeds=[1, 2, 3])


@pytest.mark.slow
def test_seeded_rollouts_of_a_real_policy_do_not_depend_on_their_batch(tiny_policy):
    """The tiny random policy samples at temperature 1 in fp32: with one seed per rollout, each
    rollout's tokens are the same all at once, two at a time, one at a time, and in reverse order."""
    from framework.rollout.hf_backend import (
        SamplingConfig,
        TransformersBackend,
        TransformersBackendConfig,
    )

    model, tok = tiny_policy
    cfg = TransformersBackendConfig(
        sampling=SamplingConfig(temperature=1.0), compute_dtype="float32", micro_batch=4
    )
    backend = TransformersBackend(cfg=cfg, model=model, tokenizer=tok)
    agent = AgentConfig(max_turns=2, max_new_tokens_per_turn=10, max_total_tokens=1024)
    loop = AgentLoop(backend, FakeRetriever(), agent)
    questions = ["Who directed Jaws?", "Where is Cincinnati?", "What is Everest?"]
    seeds = [11, 12, 21, 22, 31, 32]

    def tokens(trajs):
        return [t.token_ids[t.prompt_len :] for t in trajs]

    base = tokens(loop.run(questions, 2, seeds=seeds))
    assert len({tuple(t) for t in base}) == 6  # six different draws
    for width in (2, 1):
        assert tokens(loop.run(questions, 2, seeds=seeds, max_in_flight=width)) == base
    reverse = tokens(loop.run(questions[::-1], 2, seeds=[31, 32, 21, 22, 11, 12]))
    assert reverse == base[4:] + base[2:4] + base[:2]
    assert tokens(loop.run(questions, 2, seeds=[s + 100 for s in seeds])) != base


def test_identical_sequences_are_prefilled_once_and_counted(tiny_policy):
    """Two samples of one prompt and one other prompt: the prefill runs the two distinct prompts
    only, and each row still gets its own draw."""
    from framework.rollout.decoding import decode_with_logprobs

    model, tok = tiny_policy
    a = tok.encode("Who directed Jaws?", add_special_tokens=False)
    b = tok.encode("Where is the Ohio River?", add_special_tokens=False)
    counters: dict[str, int] = {}
    out, _ = decode_with_logprobs(
        model,
        [a, a, b],
        [6, 6, 6],
        stop=[],
        eos_ids=set(),
        pad_id=tok.pad_token_id,
        token_text=lambda ids: "",
        temperature=1.0,
        seeds=[1, 2, 3],
        counters=counters,
    )
    assert counters["prefill_tokens"] == len(a) + len(b)
    assert counters["decode_tokens"] == 3 * 5  # five steps after the first draw, three rows
    assert [len(o) for o in out] == [6, 6, 6] and out[0] != out[1]
    alone, _ = decode_with_logprobs(
        model,
        [a],
        [6],
        stop=[],
        eos_ids=set(),
        pad_id=tok.pad_token_id,
        token_text=lambda ids: "",
        temperature=1.0,
        seeds=[2],
    )
    assert alone[0] == out[1]  # the copied row decodes as if it had been prefilled alone
