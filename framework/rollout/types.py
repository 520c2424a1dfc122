"""Trajectories, segments, generation results and the interfaces the agent loop talks to."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from framework.types import STATUS_OK, Status, TurnSpan

SEGMENT_KINDS = ("think", "tool_call", "tool_response", "answer", "other")


@dataclass(frozen=True)
class Segment:
    """Tokens ``[start, end)`` of a trajectory's ``token_ids`` that form one span of ``kind``."""

    kind: str
    start: int
    end: int


@dataclass(frozen=True)
class Generation:
    """New tokens for one sequence and why generation stopped: ``stop``, ``eos`` or ``length``.

    ``logprobs``, when the backend records them, holds one entry per new token: the log-probability
    of that token under the distribution it was drawn from, i.e. the log-softmax of the *processed*
    logits (after temperature, top-k and top-p; the unprocessed log-softmax at temperature 0).
    They are the behaviour policy's log-probs that rollout correction compares with the trainer's
    (:mod:`framework.algorithms.losses.rollout_correction`). ``None`` where a backend does not record them
    (``rollout.decoder=generate``). They take no part in equality: two generations are equal when
    their tokens and finish are.
    """

    token_ids: list[int]
    finish: str
    logprobs: list[float] | None = field(default=None, compare=False)


@runtime_checkable
class Tokenizer(Protocol):
    """What the loop needs of a tokenizer (a Hugging Face tokenizer has all of it)."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


@runtime_checkable
class RolloutBackend(Protocol):
    """Batched continuation of token sequences.

    ``generate`` receives full token sequences (prompt and everything so far) and returns only the
    new tokens of each, stopping after any of the stop strings, at end of sequence, or at that
    sequence's ``max_new_tokens``. ``update_weights`` makes later generations use the given policy.

    A backend may also take ``seeds=`` (one int per sequence): the agent loop passes them only when
    its caller seeds rollouts one by one (an evaluation), and a backend that accepts them samples
    each sequence as a function of its seed and its own tokens, whatever shares its batch.
    """

    tokenizer: Tokenizer

    def generate(
        self, sequences: Sequence[Sequence[int]], max_new_tokens: Sequence[int], stop: Sequence[str]
    ) -> list[Generation]: ...

    def update_weights(self, model: Any) -> None: ...


@dataclass
class Trajectory:
    """One rollout: what the model saw and produced, token by token.

    Attributes:
        question: dataset row index of the question.
        group: group id (all rollouts of one question in one step share it).
        token_ids: prompt then response; exactly the sequence the policy was conditioned on.
        loss_mask: 1 on tokens the model generated, 0 on the prompt and on tool responses.
        prompt_len: number of prompt tokens at the start of ``token_ids``.
        segments: spans of ``token_ids`` after the prompt, by kind (think, tool_call, ...).
        turns: the model turns, in ``token_ids`` positions: each turn's span, the tool calls it made
            (with their queries) and the span of the observation that followed.
        status: ``ok`` (answered), ``format_error`` or ``over_budget``.
        answer: the final answer, when there is one.
        think_text: the contents of every ``<think>`` block, joined (E-GRPO matches entities here).
        response_text: the decoded response (model output and tool responses).
        stats: turns, tool_calls, queries, visits, invalid_calls, truncated_turns, response_tokens,
            generated_tokens.
        end_reason: why the rollout ended (``answer``, ``max_turns``, a format error, ...).
        rollout_logprobs: aligned with ``token_ids``: the rollout backend's log-probability of each
            generated token (:attr:`Generation.logprobs`), 0.0 on the prompt and on tool responses;
            ``None`` when some generation of the rollout came without log-probs.
    """

    question: int
    group: int
    token_ids: list[int]
    loss_mask: list[int]
    prompt_len: int
    segments: list[Segment] = field(default_factory=list)
    turns: list[TurnSpan] = field(default_factory=list)
    status: Status = STATUS_OK
    answer: str | None = None
    think_text: str = ""
    response_text: str = ""
    stats: dict[str, int] = field(default_factory=dict)
    end_reason: str = ""
    rollout_logprobs: list[float] | None = None

    @property
    def completion(self) -> str:
        """The response text (what rewards read)."""
        return self.response_text
