"""The agent loop: batched multi-turn search-agent rollouts, token in and token out.

What the text looks like (prompt, stop strings, how a turn is read, tools, observations, tagged
blocks) is the loop's protocol's (:mod:`framework.rollout.protocol`, ``agent.protocol``). Every
active rollout of every group advances together: one backend call per turn generates the next
model turn for all of them; their tool calls are answered with one batched retriever call. A
backend that streams turns (:class:`~framework.registry.protocols.StreamsTurns`, vLLM's) has no
such barrier: a rollout's next turn is submitted as soon as its tool results are in. Each
observation is tokenised once, on its own, and appended (loss mask 0). Earlier text is never
re-tokenised, so ``token_ids`` is exactly what the policy was conditioned on.
"""

from __future__ import annotations

import bisect
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from framework.registry.protocols import (
    AgentProtocol,
    RendersMessages,
    Retriever,
    RolloutBackend,
    StreamsTurns,
)
from framework.rollout.config import AgentConfig
from framework.rollout.parser import ToolCall
from framework.rollout.policy import chat_prompt_ids
from framework.rollout.protocol import Observation, build_protocol
from framework.rollout.seekrl_protocol import SeekrlProtocol
from framework.rollout.tools import CountingRetriever, Tool, ToolResult, tool_stats
from framework.types import (
    STATUS_FORMAT_ERROR,
    STATUS_OK,
    STATUS_OVER_BUDGET,
    Generation,
    Segment,
    Status,
    Trajectory,
    TurnSpan,
)


@dataclass
class _Rollout:
    """Mutable state of one rollout while the loop runs."""

    traj: Trajectory
    done: bool = False
    think: list[str] = field(default_factory=list)
    pending: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: the backend's log-prob of every token after the prompt (0.0 on tool responses); None once a
    #: generation came without (becomes ``Trajectory.rollout_logprobs`` when the rollout ends)
    logprobs: list[float] | None = field(default_factory=list)
    #: this rollout's sampling seed (``run(seeds=...)``), or None
    seed: int | None = None
    #: the most model turns this rollout may reach (None: ``AgentConfig.max_turns``)
    max_turns: int | None = None
    #: text given before the next turn's generated tokens (loss mask 0) and parsed with them
    forced: str = ""
    #: where ``forced``'s tokens start in ``traj.token_ids`` once placed (-1: not yet)
    forced_at: int = -1
    #: the last model turn's text (forced text included), for the protocol's observation
    turn_text: str = ""
    #: why the last turn was no action, when the protocol answers it (``retry_invalid``)
    invalid: str | None = None
    #: turns that were no action and were answered (in ``invalid_calls``, not its limit)
    retried: int = 0


@dataclass(frozen=True)
class Prefix:
    """Where a continuation starts: the first ``turns`` model turns of ``source`` (each with the
    tool response that followed it), then ``forced`` text, then new turns by the policy.

    Attributes:
        source: the rollout whose beginning is kept (its prompt and ``turns`` turns).
        turns: model turns kept, ``0 .. len(source.turns)``; each kept turn but a final one must
            have had its tool response (a continuation starts where the policy would act next).
        group: the continuation's group id (``Trajectory.group``).
        forced: text appended after the prefix, as if the policy had written it, but with loss
            mask 0 (an early exit appends ``<answer>``); parsed as the start of the next turn.
        max_new_turns: model turns the continuation may add (None: up to ``AgentConfig.max_turns``
            in all).
    """

    source: Trajectory
    turns: int
    group: int = 0
    forced: str = ""
    max_new_turns: int | None = None


class AgentLoop:
    """Runs search-agent rollouts with a backend (the policy) and a retriever (the tools).

    Args:
        backend: batched generation (its tokenizer also encodes prompts and observations).
        retriever: answers the protocol's tools (``search`` and ``visit`` for ``seekrl``).
        cfg: protocol, budgets and tool settings.
        protocol: the agent's format (None: the one ``cfg.protocol`` names).
    """

    def __init__(
        self,
        backend: RolloutBackend,
        retriever: Retriever,
        cfg: AgentConfig,
        *,
        protocol: AgentProtocol | None = None,
    ) -> None:
        self.backend = backend
        self.retriever = retriever
        self.cfg = cfg
        self.protocol = protocol if protocol is not None else build_protocol(cfg)
        self.tok = backend.tokenizer
        #: seconds spent in the last run: generate (backend), retrieval (tools), total
        self.timings: dict[str, float] = {}
        #: search queries of the last run (distinct per turn), and how many got no passage or failed
        self.retrieval_counts: dict[str, int] = {}
        self._tools_retriever = CountingRetriever(retriever)

    def prompt_ids(
        self, question: str, messages: Sequence[Mapping[str, str]] | None = None
    ) -> list[int]:
        """The prompt of ``question``: the protocol's (``seekrl``: the system message with the
        tools, then the question, chat-templated), or with ``agent.prompt=dataset`` the dataset's
        chat ``messages`` as given (one user message holding ``question`` when there are none),
        through the protocol's ``messages_ids`` where it has one, else the chat template."""
        if self.cfg.prompt != "dataset":
            return self.protocol.prompt_ids(self.tok, question)
        chat = list(messages) if messages else [{"role": "user", "content": question}]
        if isinstance(self.protocol, RendersMessages):
            return self.protocol.messages_ids(self.tok, chat)
        return chat_prompt_ids(self.tok, chat)

    def run(
        self,
        questions: Sequence[str],
        group_size: int | Sequence[int],
        *,
        question_ids: Sequence[int] | None = None,
        progress: Callable[[int, int], None] | None = None,
        max_in_flight: int | None = None,
        seeds: Sequence[int] | None = None,
        on_group_done: Callable[[int, list[Trajectory]], None] | None = None,
        prompts: Sequence[Sequence[Mapping[str, str]] | None] | None = None,
    ) -> list[Trajectory]:
        """``group_size`` rollouts of every question (one size for all, or one per question);
        returns them grouped, question by question.

        Args:
            progress: called after every turn with (rollouts finished, rollouts in all).
            max_in_flight: continuous batching: at most this many rollouts advance together, and
                when one ends the next waiting rollout takes its place at the next turn, so no
                batch waits for its slowest member (None: all at once).
            seeds: one sampling seed per rollout, in the returned order, handed to the backend's
                ``generate(..., seeds=)``: each rollout's random numbers then depend on its seed
                and its own tokens, not on its slot or its batch (None: the backend's own per-call
                seeding); its logits still carry the batch's rounding in their last bits
                (:meth:`~framework.rollout.hf_backend.TransformersBackend.generate`).
            on_group_done: called with (question index, its rollouts) as soon as every rollout of
                a question has ended (e.g. to save it before the rest are done).
            prompts: each question's chat prompt from the dataset (``QAItem.messages()``), read
                with ``agent.prompt=dataset`` only (None: the question as one user message).
        """
        qids = list(question_ids) if question_ids is not None else list(range(len(questions)))
        sizes = [group_size] * len(questions) if isinstance(group_size, int) else list(group_size)
        chats = list(prompts) if prompts is not None else [None] * len(questions)
        groups: list[list[_Rollout]] = []
        for g, (q, qid, size, chat) in enumerate(zip(questions, qids, sizes, chats, strict=True)):
            prompt = self.prompt_ids(q, chat)
            groups.append([_Rollout(self._fresh(qid, g, prompt)) for _ in range(size)])
        return self._drive(groups, progress, max_in_flight, seeds, on_group_done)

    def run_from(
        self,
        prefixes: Sequence[Prefix],
        *,
        progress: Callable[[int, int], None] | None = None,
        max_in_flight: int | None = None,
    ) -> list[Trajectory]:
        """One continuation of each prefix, in order: a rollout that starts with the prefix's
        kept turns (not generated again) and goes on with the current policy, as
        :meth:`run` would have after those turns (same budgets, tools and stopping rules).

        Each continuation's ``loss_mask``, ``segments``, ``turns``, ``stats`` and log-probs cover
        the kept turns as they were in the source, so it trains like any rollout; its ``group``
        is the prefix's. Cost: the new turns only.

        Raises:
            ValueError: a prefix keeps more turns than its source has, or keeps a non-final turn
                without its tool response.
        """
        groups: dict[int, list[_Rollout]] = {}
        order: list[_Rollout] = []
        for p in prefixes:
            r = self._prefixed(p)
            groups.setdefault(p.group, []).append(r)
            order.append(r)
        span = max(groups, default=-1) + 1
        listed = [groups.get(g, []) for g in range(span)]
        self._drive(listed, progress, max_in_flight, None, None, order=order)
        return [r.traj for r in order]

    def generate(
        self, sequences: Sequence[Sequence[int]], max_new_tokens: Sequence[int], stop: Sequence[str]
    ) -> list[Generation]:
        """One backend call outside any rollout (a hint the policy writes for an augmenter)."""
        return self.backend.generate(sequences, max_new_tokens, stop)

    def _fresh(self, qid: int, group: int, prompt: list[int]) -> Trajectory:
        traj = Trajectory(qid, group, list(prompt), [0] * len(prompt), len(prompt))
        traj.stats = dict.fromkeys(
            (
                "turns",
                "tool_calls",
                *tool_stats(self.protocol.tools),
                "invalid_calls",
                "truncated_turns",
                "generated_tokens",
            ),
            0,
        )
        return traj

    def _prefixed(self, p: Prefix) -> _Rollout:
        """A rollout state holding the first ``p.turns`` turns of ``p.source``."""
        src, k = p.source, p.turns
        if not 0 <= k <= len(src.turns):
            raise ValueError(f"Prefix keeps {k} turns of a rollout with {len(src.turns)}")
        if k and src.turns[k - 1].observation is None:
            raise ValueError(
                f"Prefix keeps {k} turns, but turn {k} has no tool response: a continuation "
                "starts after a tool response (or at the prompt, turns=0)"
            )
        cut = src.turns[k - 1].observation[1] if k else src.prompt_len  # type: ignore[index]
        traj = self._fresh(src.question, p.group, src.token_ids[: src.prompt_len])
        traj.token_ids = list(src.token_ids[:cut])
        traj.loss_mask = list(src.loss_mask[:cut])
        traj.segments = [x for x in src.segments if x.end <= cut]
        traj.turns = list(src.turns[:k])
        traj.response_text = self.tok.decode(
            src.token_ids[src.prompt_len : cut], skip_special_tokens=False
        )
        r = _Rollout(traj, forced=p.forced)
        for turn in traj.turns:
            parsed = self.protocol.parse(
                self.tok.decode(src.token_ids[turn.start : turn.end], skip_special_tokens=False)
            )
            if parsed.think:
                r.think.append(parsed.think)
            if parsed.malformed is not None and turn.observation is not None:
                r.retried += 1  # a turn that was no action, answered by the protocol
            traj.stats["tool_calls"] += len(turn.calls) + turn.invalid_calls
            traj.stats["invalid_calls"] += turn.invalid_calls
            for c in turn.calls:
                _count_call(traj, c, self.protocol.tools)
        traj.stats["turns"] = k
        traj.stats["generated_tokens"] = sum(traj.loss_mask)
        if src.rollout_logprobs is not None:
            r.logprobs = list(src.rollout_logprobs[src.prompt_len : cut])
        else:
            r.logprobs = None
        if p.max_new_turns is not None:
            r.max_turns = k + max(int(p.max_new_turns), 1)
        return r

    def _drive(
        self,
        groups: list[list[_Rollout]],
        progress: Callable[[int, int], None] | None,
        max_in_flight: int | None,
        seeds: Sequence[int] | None,
        on_group_done: Callable[[int, list[Trajectory]], None] | None,
        *,
        order: list[_Rollout] | None = None,
    ) -> list[Trajectory]:
        """Advance every rollout of ``groups`` turn by turn until each has ended."""
        clock = time.perf_counter()
        self.timings = {"generate": 0.0, "retrieval": 0.0}
        self._tools_retriever = CountingRetriever(self.retriever)
        self.retrieval_counts = self._tools_retriever.counts
        rollouts = order if order is not None else [r for group in groups for r in group]
        if seeds is not None:
            if len(seeds) != len(rollouts):
                raise ValueError(f"run(): {len(seeds)} seeds for {len(rollouts)} rollouts")
            for r, seed in zip(rollouts, seeds, strict=True):
                r.seed = int(seed)
        limit = len(rollouts) if max_in_flight is None else max(int(max_in_flight), 1)
        waiting = list(reversed(rollouts))  # popped from the end: question order
        self._open_in_group = [len(group) for group in groups]
        finished = 0
        active: list[_Rollout] = []
        streaming = isinstance(self.backend, StreamsTurns) and self.backend.streams
        in_flight: dict[int, tuple[_Rollout, int]] = {}  # streaming: submitted, not yet back
        while active or waiting:
            while waiting and len(active) < limit:
                active.append(waiting.pop())
            if streaming:
                self._stream_turns(active, in_flight)
            else:
                self._generate(active)
                self._run_tools([r for r in active if not r.done])
                self._end_at_max_turns(active)
            ended = [r for r in active if r.done]
            active = [r for r in active if not r.done]
            finished += len(ended)
            self._close_groups(ended, groups, on_group_done)
            if progress is not None:
                progress(finished, len(rollouts))
        self.timings["total"] = time.perf_counter() - clock
        return [r.traj for r in rollouts]

    def _end_at_max_turns(self, rollouts: list[_Rollout]) -> None:
        for r in rollouts:
            most = self.cfg.max_turns if r.max_turns is None else r.max_turns
            if not r.done and r.traj.stats["turns"] >= most:
                self._finish(r, STATUS_OVER_BUDGET, "max_turns")

    def _close_groups(
        self,
        ended: list[_Rollout],
        groups: list[list[_Rollout]],
        on_group_done: Callable[[int, list[Trajectory]], None] | None,
    ) -> None:
        for r in ended:
            g = r.traj.group
            self._open_in_group[g] -= 1
            if self._open_in_group[g] == 0 and on_group_done is not None:
                on_group_done(g, [x.traj for x in groups[g]])

    def _stream_turns(
        self, active: list[_Rollout], in_flight: dict[int, tuple[_Rollout, int]]
    ) -> None:
        """No turn barrier (a :class:`StreamsTurns` backend): submit the next turn of every
        active rollout that has none in flight, take back whichever turns finish first, answer
        their tool calls (one batched call for them) and return; the caller submits those
        rollouts' next turns at once, while the others are still generating."""
        idle = [r for r in active if id(r) not in in_flight and not r.done]
        backend = self.backend
        assert isinstance(backend, StreamsTurns)
        for r, limit in self._ready(idle):
            backend.submit(id(r), r.traj.token_ids, limit, self.protocol.stop, seed=r.seed)
            in_flight[id(r)] = (r, limit)
        if not in_flight:
            return
        start = time.perf_counter()
        outs = backend.collect()
        self.timings["generate"] += time.perf_counter() - start
        turned = []
        for key, gen in outs:
            r, limit = in_flight.pop(key)
            self._absorb(r, gen.token_ids, gen.finish, limit, gen.logprobs)
            turned.append(r)
        self._run_tools([r for r in turned if not r.done])
        self._end_at_max_turns(turned)

    # -- one turn ---------------------------------------------------------------------------------
    def _ready(self, active: list[_Rollout]) -> list[tuple[_Rollout, int]]:
        """The rollouts of ``active`` that take a next turn, each with its token budget for it
        (a forced text placed first); those out of room end over budget."""
        for r in active:
            if r.forced and not r.done and r.forced_at < 0:
                self._place_forced(r)
        active = [r for r in active if not r.done]  # a forced text may have used up the budget
        budget = [self.cfg.max_total_tokens - len(r.traj.token_ids) for r in active]
        for r, left in zip(active, budget, strict=True):
            if left <= 0:
                self._finish(r, STATUS_OVER_BUDGET, "max_total_tokens")
        return [
            (r, min(left, self.cfg.max_new_tokens_per_turn))
            for r, left in zip(active, budget, strict=True)
            if left > 0
        ]

    def _generate(self, active: list[_Rollout]) -> None:
        live = self._ready(active)
        if not live:
            return
        start = time.perf_counter()
        seqs, limits = [r.traj.token_ids for r, _ in live], [n for _, n in live]
        seeds = [int(r.seed) for r, _ in live if r.seed is not None]
        stop = self.protocol.stop
        if len(seeds) == len(live):
            outs = self.backend.generate(seqs, limits, stop, seeds=seeds)
        else:
            outs = self.backend.generate(seqs, limits, stop)
        self.timings["generate"] += time.perf_counter() - start
        for (r, limit), gen in zip(live, outs, strict=True):
            self._absorb(r, gen.token_ids, gen.finish, limit, gen.logprobs)

    def _absorb(
        self,
        r: _Rollout,
        new: list[int],
        finish: str,
        limit: int,
        logprobs: list[float] | None = None,
    ) -> None:
        t = r.traj
        start = len(t.token_ids)
        text = self.tok.decode(new, skip_special_tokens=False)
        t.token_ids.extend(new)
        t.loss_mask.extend([1] * len(new))
        if r.logprobs is not None and logprobs is not None and len(logprobs) == len(new):
            r.logprobs.extend(float(x) for x in logprobs)
        else:
            r.logprobs = None
        t.segments.extend(_segments(self.tok, new, text, start, self.protocol.segment_tags))
        t.turns.append(TurnSpan(start, len(t.token_ids)))
        t.response_text += text
        t.stats["turns"] += 1
        t.stats["generated_tokens"] += len(new)
        r.turn_text = r.forced + text if r.forced_at >= 0 else text
        turn = self.protocol.parse(r.turn_text)
        r.forced = ""
        if turn.think:
            r.think.append(turn.think)
        if finish == "length":
            t.stats["truncated_turns"] += 1
        if turn.answer is not None:
            t.answer = turn.answer
            self._finish(r, STATUS_OK, "answer")
            return
        if turn.malformed is not None:
            out_of_room = finish == "length" and len(t.token_ids) >= self.cfg.max_total_tokens
            if not out_of_room and self.protocol.retry_invalid:
                self._retry(r, turn.malformed)
                return
            reason = "max_total_tokens" if out_of_room else turn.malformed
            self._finish(r, STATUS_OVER_BUDGET if out_of_room else STATUS_FORMAT_ERROR, reason)
            return
        calls = len(turn.calls) + len(turn.errors)
        if t.stats["tool_calls"] + calls > self.cfg.max_tool_calls:
            self._finish(r, STATUS_OVER_BUDGET, "max_tool_calls")
            return
        t.stats["tool_calls"] += calls
        t.stats["invalid_calls"] += len(turn.errors)
        if t.stats["invalid_calls"] - r.retried > self.cfg.max_invalid_calls:
            self._finish(r, STATUS_FORMAT_ERROR, "too many invalid tool calls")
            return
        r.pending, r.errors = turn.calls, turn.errors
        t.turns[-1] = replace(t.turns[-1], calls=tuple(turn.calls), invalid_calls=len(turn.errors))

    def _retry(self, r: _Rollout, why: str) -> None:
        """A turn that is no action, which the protocol answers (its next observation says so)
        instead of ending the rollout: one invalid call, outside ``max_invalid_calls``."""
        t = r.traj
        if t.stats["tool_calls"] + 1 > self.cfg.max_tool_calls:
            self._finish(r, STATUS_OVER_BUDGET, "max_tool_calls")
            return
        t.stats["tool_calls"] += 1
        t.stats["invalid_calls"] += 1
        r.retried += 1
        r.invalid = why
        t.turns[-1] = replace(t.turns[-1], invalid_calls=1)

    def _place_forced(self, r: _Rollout) -> None:
        """Append ``r.forced``'s tokens (loss mask 0, log-prob 0.0) before the next turn."""
        t = r.traj
        ids = [int(i) for i in self.tok.encode(r.forced, add_special_tokens=False)]
        if len(t.token_ids) + len(ids) >= self.cfg.max_total_tokens:
            self._finish(r, STATUS_OVER_BUDGET, "max_total_tokens")  # no room to answer
            return
        r.forced_at = len(t.token_ids)
        t.token_ids.extend(ids)
        t.loss_mask.extend([0] * len(ids))
        if r.logprobs is not None:
            r.logprobs.extend([0.0] * len(ids))
        t.segments.append(Segment("other", r.forced_at, r.forced_at + len(ids)))
        t.response_text += r.forced

    def _run_tools(self, waiting: list[_Rollout]) -> None:
        """Answer every pending call of every rollout: all searches in one retriever call."""
        start = time.perf_counter()
        try:
            self._answer_calls(waiting)
        finally:
            self.timings["retrieval"] += time.perf_counter() - start

    def _answer_calls(self, waiting: list[_Rollout]) -> None:
        """Each tool of the protocol answers all its pending calls at once; each rollout then gets
        the protocol's observation of its results, in the order of its calls."""
        calls = [c for r in waiting for c in r.pending]
        results = [ToolResult("")] * len(calls)
        for name, tool in self.protocol.tools.items():
            mine = [i for i, c in enumerate(calls) if c.name == name]
            if mine:
                answers = tool.answer([calls[i] for i in mine], self._tools_retriever, self.cfg)
                for i, answer in zip(mine, answers, strict=True):
                    results[i] = ToolResult.of(answer)
        start = 0
        for r in waiting:
            for c in r.pending:
                _count_call(r.traj, c, self.protocol.tools)
            answered = results[start : start + len(r.pending)]
            obs = Observation(
                r.turn_text, tuple(answered), tuple(r.errors), r.invalid, tuple(r.pending)
            )
            evidence = "\n\n".join(x.evidence for x in answered if x.evidence)
            start += len(r.pending)
            r.pending, r.errors, r.invalid = [], [], None
            text, ids = self.protocol.observation(obs, self.tok)
            text, ids = self._cut_observation(r.traj, text, ids)
            self._append_observation(r, text, ids, evidence)

    def _cut_observation(self, t: Trajectory, text: str, ids: list[int]) -> tuple[str, list[int]]:
        """The first ``agent.max_observation_tokens`` of an observation, as Search-R1 cuts
        ``next_obs_ids`` to ``max_obs_length`` (its text decoded from the kept tokens); counted in
        ``stats["cut_observations"]``. Whatever the protocol renders is cut, template tokens too."""
        most = self.cfg.max_observation_tokens
        if most <= 0 or len(ids) <= most:
            return text, ids
        t.stats["cut_observations"] = t.stats.get("cut_observations", 0) + 1
        kept = ids[:most]
        return self.tok.decode(kept, skip_special_tokens=False), kept

    def _append_observation(self, r: _Rollout, text: str, ids: list[int], evidence: str) -> None:
        t = r.traj
        if len(t.token_ids) + len(ids) > self.cfg.max_total_tokens:
            self._finish(r, STATUS_OVER_BUDGET, "max_total_tokens")
            return
        start = len(t.token_ids)
        t.token_ids.extend(ids)
        t.loss_mask.extend([0] * len(ids))
        if r.logprobs is not None:
            r.logprobs.extend([0.0] * len(ids))
        t.segments.append(Segment("tool_response", start, start + len(ids)))
        t.turns[-1] = replace(
            t.turns[-1],
            observation=(start, start + len(ids)),
            observation_digest=TurnSpan.digest(text),
            evidence=evidence,
        )
        t.response_text += text

    def _finish(self, r: _Rollout, status: Status, reason: str) -> None:
        r.done = True
        r.traj.status = status
        r.traj.end_reason = reason
        r.traj.think_text = "\n".join(r.think)
        r.traj.stats["response_tokens"] = len(r.traj.token_ids) - r.traj.prompt_len
        if r.logprobs is not None:
            r.traj.rollout_logprobs = [0.0] * r.traj.prompt_len + r.logprobs


def _count_call(traj: Trajectory, call: ToolCall, tools: Mapping[str, Tool]) -> None:
    """Add ``call`` to its tool's counter in ``traj.stats`` (``queries``, ``visits``, ...)."""
    tool = tools[call.name]
    traj.stats[tool.stat] = traj.stats.get(tool.stat, 0) + tool.count(call)


Tags = tuple[tuple[str, str, str], ...]


@lru_cache(maxsize=16)
def _tagged(tags: Tags) -> tuple[re.Pattern[str], dict[str, str]]:
    """The pattern of every tagged block (an unclosed one runs to the end) and open tag -> kind."""
    pattern = re.compile(
        "|".join(f"{re.escape(a)}.*?(?:{re.escape(b)}|\\Z)" for _, a, b in tags), re.DOTALL
    )
    return pattern, {a: kind for kind, a, _ in tags}


def _segments(
    tok: object, ids: list[int], text: str, start: int, tags: Tags | None = None
) -> list[Segment]:
    """Spans of one model turn by kind: each token takes the kind of the block its text starts in."""
    if not ids:
        return []
    kinds = token_kinds(text, _char_ends(tok, ids), tags)
    out: list[Segment] = []
    for i, kind in enumerate(kinds):
        if out and out[-1].kind == kind and out[-1].end == start + i:
            out[-1] = Segment(kind, out[-1].start, start + i + 1)
        else:
            out.append(Segment(kind, start + i, start + i + 1))
    return out


def token_kinds(text: str, ends: Sequence[int], tags: Tags | None = None) -> list[str]:
    """The block kind (think, tool_call, answer, other) each token's text starts in.

    Args:
        text: the decoded turn.
        ends: ``[T]`` character offset in ``text`` where each token ends.
        tags: ``(kind, open, close)`` per block (a protocol's ``segment_tags``; None: ``seekrl``'s).

    Returns:
        ``[T]`` kinds; ``O(len(text) + T log blocks)`` (blocks are found by binary search).
    """
    pattern, kind_of = _tagged(SeekrlProtocol.segment_tags if tags is None else tags)
    spans = [
        (m.start(), m.end(), kind_of[next(k for k in kind_of if m.group(0).startswith(k))])
        for m in pattern.finditer(text)
    ]
    starts = [s for s, _, _ in spans]  # sorted and non-overlapping (finditer)
    kinds = []
    prev_end = 0
    for end in ends:
        begin = min(prev_end, max(end - 1, 0))
        i = bisect.bisect_right(starts, begin) - 1
        kinds.append(spans[i][2] if i >= 0 and begin < spans[i][1] else "other")
        prev_end = end
    return kinds


def _char_ends(tok: object, ids: list[int]) -> list[int]:
    """Character offset where each token's text ends in the decoded turn (incremental decode).

    Quadratic in ``len(ids)``: tokenizers merge bytes and clean up spaces across tokens, so only
    decoding each whole prefix gives exact offsets; a turn has at most ``max_new_tokens_per_turn``.
    """
    ends = []
    for i in range(1, len(ids) + 1):
        ends.append(len(tok.decode(ids[:i], skip_special_tokens=False)))  # type: ignore[attr-defined]
    return ends
