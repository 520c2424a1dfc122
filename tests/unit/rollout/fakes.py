"""Fakes for the agent-loop tests: a byte-level tokenizer, a scripted backend, a tiny retriever.

Nothing here loads a model. The tokenizer maps each UTF-8 byte ``b`` to id ``b + 3`` (ids 0-2 are
special; 2 is end of sequence), so one ASCII character is one token and token offsets are easy to
reason about. The backend plays scripted turns per rollout and cuts them exactly as a real backend
would (:func:`~framework.rollout.hf_backend.cut_generation`), so text after a stop string is
dropped. The retriever ranks a handful of hand-written passages by word overlap and counts calls.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from framework.retrieval.types import DocumentNotFound, QueryError
from framework.rollout.hf_backend import cut_generation
from framework.types import Document, Generation, Hit, Segment, Trajectory

EOS = 2
OFFSET = 3


class FakeTokenizer:
    """Byte-level tokenizer: ``encode`` is UTF-8 bytes shifted by 3, ``decode`` the inverse."""

    eos_token_id = EOS
    pad_token_id = EOS

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [b + OFFSET for b in text.encode("utf-8")]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        out: list[str] = []
        buf = bytearray()
        for i in ids:
            i = int(i)
            if i >= OFFSET:
                buf.append(i - OFFSET)
                continue
            if i == EOS and not skip_special_tokens:
                out.append(buf.decode("utf-8", errors="replace"))
                buf.clear()
                out.append("<eos>")
        out.append(buf.decode("utf-8", errors="replace"))
        return "".join(out)

    @staticmethod
    def template(messages: Sequence[dict]) -> str:
        text = ""
        for m in messages:
            tag = {"system": "sys", "user": "user", "assistant": "assistant"}[m["role"]]
            text += f"<{tag}>{m['content']}</{tag}>"
        return text

    def apply_chat_template(
        self, messages, add_generation_prompt: bool = True, tokenize: bool = True, **_: object
    ):
        text = self.template(messages) + ("<assistant>" if add_generation_prompt else "")
        return self.encode(text) if tokenize else text


@dataclass
class Turn:
    """One scripted model turn: ``text``, then optionally end of sequence."""

    text: str
    eos: bool = False


class FakeBackend:
    """Plays ``scripts[i]`` (a list of turns) for rollout ``i`` (rollouts in AgentLoop order).

    A sequence is matched to its rollout by what the backend already knows of it: the rollout's
    last sequence plus the tokens the backend gave it must be a prefix of the new sequence, and
    rollouts are matched in order (AgentLoop passes active rollouts in a stable order). Turns past
    the end of a script are ``filler`` (default: text without tags, then end of sequence).
    """

    def __init__(
        self,
        tokenizer: FakeTokenizer,
        scripts: Sequence[Sequence[str | Turn]],
        filler: str | Turn | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.scripts = [[t if isinstance(t, Turn) else Turn(t) for t in s] for s in scripts]
        if filler is None:
            filler = Turn("(script exhausted)", eos=True)
        self.filler = filler if isinstance(filler, Turn) else Turn(filler)
        self.calls: list[dict] = []  # every call: sequences, max_new_tokens, stop
        self.seen: list[list[list[int]]] = [[] for _ in scripts]  # sequences per rollout
        self.known: list[list[int] | None] = [None] * len(scripts)  # last sequence + its output
        self.turn = [0] * len(scripts)
        self.weights: object = None

    def _match(self, seq: list[int], start: int) -> int:
        for i in range(start, len(self.scripts)):
            known = self.known[i]
            if known is None or seq[: len(known)] == known:
                return i
        raise AssertionError("a sequence the backend cannot attribute to any rollout")

    def generate(
        self, sequences: Sequence[Sequence[int]], max_new_tokens: Sequence[int], stop: Sequence[str]
    ) -> list[Generation]:
        assert len(sequences) == len(max_new_tokens)
        seqs = [list(s) for s in sequences]
        self.calls.append(
            {"sequences": seqs, "max_new_tokens": list(max_new_tokens), "stop": tuple(stop)}
        )
        if not self.calls[:-1]:  # first call: every rollout, in order
            assert len(seqs) == len(self.scripts), "first call must carry every rollout"
        out = []
        pos = 0
        for seq, limit in zip(seqs, max_new_tokens, strict=True):
            i = self._match(seq, pos)
            pos = i + 1
            script = self.scripts[i]
            turn = script[self.turn[i]] if self.turn[i] < len(script) else self.filler
            self.turn[i] += 1
            new = self.tokenizer.encode(turn.text) + ([EOS] if turn.eos else [])
            gen = cut_generation(new, stop, {EOS}, limit, self.tokenizer.decode)
            self.seen[i].append(seq)
            self.known[i] = seq + gen.token_ids
            out.append(gen)
        return out

    def update_weights(self, model: object) -> None:
        self.weights = model


PASSAGES: list[tuple[str, str, str]] = [
    ("p1", "Jaws (film)", "Jaws is a 1975 thriller film directed by Steven Spielberg."),
    ("p2", "Steven Spielberg", "Steven Spielberg is an American film director born in Cincinnati."),
    ("p3", "Cincinnati", "Cincinnati is a city in Ohio on the northern side of the Ohio River."),
    ("p4", "Mount Everest", "Mount Everest is the highest mountain above sea level."),
    ("p5", "Ada Lovelace", "Ada Lovelace was an English mathematician who wrote about engines."),
]


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


@dataclass
class FakeRetriever:
    """Word-overlap search over :data:`PASSAGES`; raises ``QueryError`` for queries in ``bad``."""

    passages: list[tuple[str, str, str]] = field(default_factory=lambda: list(PASSAGES))
    bad: set[str] = field(default_factory=set)
    search_calls: list[list[str]] = field(default_factory=list)
    document_calls: list[tuple[str | None, str | None]] = field(default_factory=list)

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        queries = list(queries)
        self.search_calls.append(queries)
        for q in queries:
            if q in self.bad:
                raise QueryError(f"[fake] refuses {q!r}\nsecond line")
        out = []
        for q in queries:
            scored = []
            for n, (pid, title, text) in enumerate(self.passages):
                overlap = len(_words(q) & _words(title + " " + text))
                if overlap:
                    scored.append((-overlap, n, Hit(pid, pid, title, text, overlap)))
            out.append([h for *_, h in sorted(scored, key=lambda s: s[:2])[:k]])
        return out

    def document(self, *, doc_id: str | None = None, title: str | None = None) -> Document:
        self.document_calls.append((doc_id, title))
        for pid, t, text in self.passages:
            if doc_id == pid or (title is not None and title.lower() == t.lower()):
                return Document(pid, t, text)
        raise DocumentNotFound(f"no document {doc_id or title!r}")

    def close(self) -> None:
        pass


def search_call(*queries: str) -> str:
    return (
        "<tool_call>"
        + json.dumps({"name": "search", "arguments": {"queries": list(queries)}})
        + "</tool_call>"
    )


def visit_call(title: str | None = None, doc_id: str | None = None) -> str:
    args = {"title": title} if title is not None else {"doc_id": doc_id}
    return "<tool_call>" + json.dumps({"name": "visit", "arguments": args}) + "</tool_call>"


def check_invariants(t: Trajectory, max_total_tokens: int, prompt: list[int] | None = None) -> None:
    """What every trajectory must satisfy, whatever the model did."""
    from framework.types import SEGMENT_KINDS, STATUSES

    n = len(t.token_ids)
    assert t.status in STATUSES
    assert t.end_reason
    assert len(t.loss_mask) == n
    assert set(t.loss_mask) <= {0, 1}
    # never beyond the budget; a prompt that alone exceeds it gets no response at all
    assert n <= max_total_tokens or n == t.prompt_len
    assert 0 < t.prompt_len <= n
    if prompt is not None:
        assert t.token_ids[: t.prompt_len] == prompt
    assert t.loss_mask[: t.prompt_len] == [0] * t.prompt_len
    # segments tile the response: contiguous, non-empty, from prompt_len to the end
    pos = t.prompt_len
    for s in t.segments:
        assert isinstance(s, Segment)
        assert s.kind in SEGMENT_KINDS
        assert s.start == pos and s.end > s.start
        pos = s.end
    assert pos == n
    for s in t.segments:
        mask = t.loss_mask[s.start : s.end]
        if s.kind == "tool_response":
            assert mask == [0] * len(mask)
        else:
            assert mask == [1] * len(mask)
    gen = sum(t.loss_mask)
    assert t.stats["generated_tokens"] == gen
    assert t.stats["response_tokens"] == n - t.prompt_len
    if t.status == "ok":
        assert t.answer is not None


#: Fragments for fuzzing model output: the format's tags and JSON pieces, plus awkward characters.
FUZZ_PIECES = [
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<answer>",
    "</answer>",
    "{",
    "}",
    "[",
    "]",
    '"name"',
    '"search"',
    '"visit"',
    ":",
    ",",
    '"queries"',
    '"arguments"',
    '"title"',
    "\\",
    "\x00",
    "😀",
    "\n",
    " ",
]
