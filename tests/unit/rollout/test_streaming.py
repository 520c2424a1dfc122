"""The agent loop without a turn barrier: a backend that streams turns (``StreamsTurns``) gets each
rollout's next turn as soon as that rollout's tool results are in, and the trajectories are the
ones the barrier gives, token for token."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from framework.registry.protocols import StreamsTurns
from framework.rollout.config import AgentConfig
from framework.rollout.engine import AgentLoop
from framework.rollout.hf_backend import cut_generation
from framework.types import Generation

from .fakes import EOS, FakeBackend, FakeRetriever, FakeTokenizer, Turn, check_invariants

TOK = FakeTokenizer()
SEARCH = '<tool_call>{"name": "search", "arguments": {"query": "jaws"}}</tool_call>'
ANSWER = "<answer>Spielberg</answer>"
#: rollout 0 searches twice, then answers; rollout 1 answers at once; rollout 2 searches once
SCRIPTS = [
    [SEARCH, SEARCH, ANSWER],
    [ANSWER],
    [SEARCH, Turn("no tags here", eos=True)],
]
#: how many collect() calls each rollout's turns take (rollout 1's only turn is slow)
TICKS = [[1, 1, 1], [5], [2, 2]]


class StreamingFake:
    """Plays ``scripts[i]`` for the i-th rollout submitted first; a turn of rollout ``i`` takes
    ``ticks[i][turn]`` calls of :meth:`collect` to finish. ``log`` records every submit and
    every finished turn, in order."""

    streams = True

    def __init__(self, scripts: Sequence[Sequence[str | Turn]], ticks: list[list[int]]) -> None:
        self.tokenizer = TOK
        self.scripts = [[t if isinstance(t, Turn) else Turn(t) for t in s] for s in scripts]
        self.ticks = ticks
        self.rollout: dict[int, int] = {}  # key -> script index, in first-submit order
        self.turn = [0] * len(scripts)
        self.queue: dict[int, tuple[int, Generation]] = {}  # key -> (ticks left, generation)
        self.log: list[tuple[str, int, int]] = []  # (submit | done, rollout, turn)
        self.seeds: list[int | None] = []

    def submit(self, key, sequence, max_new_tokens, stop, seed=None) -> None:
        assert key not in self.queue, "a rollout with a turn in flight was submitted again"
        i = self.rollout.setdefault(key, len(self.rollout))
        k = self.turn[i]
        turn = self.scripts[i][k]
        new = TOK.encode(turn.text) + ([EOS] if turn.eos else [])
        self.queue[key] = (
            self.ticks[i][k],
            cut_generation(new, stop, {EOS}, max_new_tokens, TOK.decode),
        )
        self.turn[i] += 1
        self.seeds.append(seed)
        self.log.append(("submit", i, k))

    def collect(self) -> list[tuple[int, Generation]]:
        if not self.queue:
            return []
        step = min(left for left, _ in self.queue.values())
        done = []
        for key, (left, gen) in list(self.queue.items()):
            if left - step <= 0:
                done.append((key, gen))
                del self.queue[key]
                i = self.rollout[key]
                self.log.append(("done", i, self.turn[i] - 1))
            else:
                self.queue[key] = (left - step, gen)
        return done

    def generate(self, *args, **kwargs):
        raise AssertionError("a streaming backend's turns are submitted, not generated in batches")

    def update_weights(self, model: object) -> None:
        pass


def run(backend, **cfg):
    agent = AgentConfig(max_turns=4, max_new_tokens_per_turn=200, **cfg)
    trajs = AgentLoop(backend, FakeRetriever(), agent).run(["Who directed Jaws?"] * 3, 1)
    for t in trajs:
        check_invariants(t, agent.max_total_tokens)
    return trajs


def test_the_fake_streams_turns():
    assert isinstance(StreamingFake(SCRIPTS, TICKS), StreamsTurns)


def test_streamed_rollouts_are_the_barriers_token_for_token():
    barrier = run(FakeBackend(TOK, SCRIPTS))
    streamed = run(StreamingFake(SCRIPTS, TICKS))
    for b, s in zip(barrier, streamed, strict=True):
        assert s.token_ids == b.token_ids and s.loss_mask == b.loss_mask
        assert (s.status, s.answer, s.end_reason) == (b.status, b.answer, b.end_reason)
        assert s.stats == b.stats and s.response_text == b.response_text
    assert [t.status for t in streamed] == ["ok", "ok", "format_error"]


def test_a_rollouts_next_turn_goes_out_before_the_slowest_turn_is_back():
    backend = StreamingFake(SCRIPTS, TICKS)
    run(backend)
    log = backend.log
    # the first turns of all three go out together, in rollout order
    assert log[:3] == [("submit", 0, 0), ("submit", 1, 0), ("submit", 2, 0)]
    slow_back = log.index(("done", 1, 0))
    # rollout 0 searched, got its results and went on twice, and rollout 2 once, while rollout 1's
    # single slow turn was still generating: with a barrier none of them would
    for event in (("submit", 0, 1), ("submit", 0, 2), ("submit", 2, 1)):
        assert log.index(event) < slow_back, event
    assert log.index(("done", 0, 2)) < slow_back


def test_each_turn_carries_its_rollouts_seed():
    backend = StreamingFake(SCRIPTS, TICKS)
    agent = AgentConfig(max_turns=4, max_new_tokens_per_turn=200)
    AgentLoop(backend, FakeRetriever(), agent).run(["q"] * 3, 1, seeds=[10, 11, 12])
    by_rollout = {}
    for (_, i, _), seed in zip((e for e in backend.log if e[0] == "submit"), backend.seeds):
        by_rollout.setdefault(i, set()).add(seed)
    assert by_rollout == {0: {10}, 1: {11}, 2: {12}}


@pytest.mark.parametrize("limit", [1, 2])
def test_rollouts_in_flight_stay_within_the_limit(limit):
    backend = StreamingFake(SCRIPTS, TICKS)
    agent = AgentConfig(max_turns=4, max_new_tokens_per_turn=200)
    loop = AgentLoop(backend, FakeRetriever(), agent)
    trajs = loop.run(["Who directed Jaws?"] * 3, 1, max_in_flight=limit)
    barrier = AgentLoop(FakeBackend(TOK, SCRIPTS), FakeRetriever(), agent).run(
        ["Who directed Jaws?"] * 3, 1
    )
    assert [t.token_ids for t in trajs] == [t.token_ids for t in barrier]
    in_flight, most = 0, 0
    for kind, _, _ in backend.log:
        in_flight += 1 if kind == "submit" else -1
        most = max(most, in_flight)
    assert most == limit
