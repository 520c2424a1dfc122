"""Each component kind's call signature as a :class:`typing.Protocol`, checked by the type checker.

A registry is typed by two protocols of its kind (``ADVANTAGES: Registry[AdvantageFn,
BoundAdvantageFn]``): what is registered, and what :meth:`Registry.bind` returns once ``cfg`` is
bound. ``Registry.register`` returns the target unchanged as the first, so ``mypy`` checks every
function or class registered in ``framework/`` (and in a typed plugin) against the signature the
framework calls it with; a call site of ``bind`` is checked against the second. The first argument
of a function kind is positional-only here, so a component may name it as it likes; ``cfg`` is the
component's own config dataclass (``Any`` in the registered signature: each component narrows it
to its own subclass, which a parameter typed with the base would refuse).

This module is the one declaration of each kind's contract: the agent loop, the tools and the
backends type their retriever, tokenizer and backend with these protocols. Optional members of a
contract (a sampler's ``keep_group``, an adaptive sampler's ``observe``) are protocols of their own,
``runtime_checkable``, so callers ask ``isinstance(sampler, GroupFilter)``.

Types from layers above the registries (the dataset's ``QAItem``, the step's ``InputContext``, the
judges' ``JudgeInputs``) appear as ``Any``: the registries sit below them
(``tests/unit/test_import_graph.py``), and those components are checked where they are defined.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

from framework.types import (
    AdvantageInputs,
    Document,
    Generation,
    GroupRequest,
    Hit,
    LossOutput,
    PolicyLossInputs,
    RewardInputs,
    RewardOutput,
)


class RewardFn(Protocol):
    """``REWARDS``: ``[N]`` rewards, or a :class:`RewardOutput` with per-turn extras and parts."""

    def __call__(self, inputs: RewardInputs, /, *, cfg: Any) -> Tensor | RewardOutput: ...


class BoundRewardFn(Protocol):
    """``REWARDS.bind(cfg)``: the reward of a batch."""

    def __call__(self, inputs: RewardInputs, /) -> Tensor | RewardOutput: ...


class AdvantageFn(Protocol):
    """``ADVANTAGES``: ``[N]`` per rollout, or ``[N, L]`` per response token."""

    def __call__(self, inputs: AdvantageInputs, /, *, cfg: Any) -> Tensor: ...


class BoundAdvantageFn(Protocol):
    """``ADVANTAGES.bind(cfg)``: the advantages of a batch."""

    def __call__(self, inputs: AdvantageInputs, /) -> Tensor: ...


class PolicyLossFn(Protocol):
    """``POLICY_LOSSES``: the loss of a micro-batch and its figures."""

    def __call__(self, inputs: PolicyLossInputs, /, *, cfg: Any) -> LossOutput: ...


class BoundPolicyLossFn(Protocol):
    """``POLICY_LOSSES.bind(cfg)``: the loss of a micro-batch."""

    def __call__(self, inputs: PolicyLossInputs, /) -> LossOutput: ...


class KLFn(Protocol):
    """``KL_ESTIMATORS``: per-token KL ``[N, L]`` of the policy from the reference."""

    def __call__(self, logprobs: Tensor, ref_logprobs: Tensor, /, *, cfg: Any) -> Tensor: ...


class BoundKLFn(Protocol):
    """``KL_ESTIMATORS.bind(cfg)``: per-token KL of the policy from the reference."""

    def __call__(self, logprobs: Tensor, ref_logprobs: Tensor, /) -> Tensor: ...


class DatasetFn(Protocol):
    """``DATASETS``: the questions of one split (``QAItem`` each)."""

    def __call__(self, split: str, /, *, cfg: Any) -> list[Any]: ...


class BoundDatasetFn(Protocol):
    """``DATASETS.bind(cfg)``: the questions of one split."""

    def __call__(self, split: str, /) -> list[Any]: ...


class InputProviderFn(Protocol):
    """``INPUT_PROVIDERS``: one input a component ``requires``, computed from an ``InputContext``
    (a tensor whose first dimension is the step's rollouts, or any per-rollout object)."""

    def __call__(self, ctx: Any, /, *, cfg: Any) -> Any: ...


class BoundInputProviderFn(Protocol):
    """``INPUT_PROVIDERS.bind(cfg)``: one input from an ``InputContext``."""

    def __call__(self, ctx: Any, /) -> Any: ...


class Sampler(Protocol):
    """What a ``SAMPLERS`` class builds: the step's groups, and its position for resuming."""

    def next_groups(self) -> list[GroupRequest]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class GroupFilter(Protocol):
    """A sampler that chooses which groups of a step are trained (dynamic sampling): ``keep_group``
    of one group's ``[G]`` total rewards and ``[G]`` bool correctness."""

    def keep_group(self, rewards: Tensor, correct: Tensor) -> bool: ...


@runtime_checkable
class ObservingSampler(Protocol):
    """A sampler that learns from the trained groups: per trained group of ``step`` its question
    (dataset row), its rollouts' rewards and whether each was correct (adaptive samplers)."""

    def observe(
        self,
        step: int,
        questions: Sequence[int],
        rewards: Sequence[Sequence[float]],
        correct: Sequence[Sequence[bool]],
    ) -> None: ...


@runtime_checkable
class ObservedState(Protocol):
    """A sampler whose resumable state after a step includes what it observed up to that step:
    ``state_after`` of the state drawn for the step (adaptive samplers)."""

    def state_after(self, drawn: dict[str, Any]) -> dict[str, Any]: ...


class SamplerFactory(Protocol):
    """``SAMPLERS``: ``cls(questions, seed, *, cfg)``."""

    def __call__(self, questions: Sequence[Any], seed: int, /, *, cfg: Any) -> Sampler: ...


class BoundSamplerFactory(Protocol):
    """``SAMPLERS.bind(cfg)``: ``make(questions, seed)``."""

    def __call__(self, questions: Sequence[Any], seed: int, /) -> Sampler: ...


@runtime_checkable
class Retriever(Protocol):
    """What every retrieval backend offers."""

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Top-``k`` passages for each query, best first (fewer when the corpus is smaller).

        Raises:
            QueryError: empty or oversized query, ``k`` out of range, too many queries.
            RetrievalError: the backend failed.
        """
        ...

    def document(self, *, doc_id: str | None = None, title: str | None = None) -> Document:
        """The full document with ``doc_id`` or (exact, then case-insensitive) ``title``.

        Raises:
            DocumentNotFound: no such document.
        """
        ...

    def close(self) -> None:
        """Release files, sockets and threads."""
        ...


class Augmenter(Protocol):
    """What an ``AUGMENTERS`` class builds: the step's rollouts, augmented (``Drawn`` in and an
    ``Augmented`` out, from :mod:`framework.rl`), and its state for resuming."""

    def augment(self, drawn: Any, ctx: Any, /) -> Any: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class AugmenterFactory(Protocol):
    """``AUGMENTERS``: ``cls(*, cfg)``."""

    def __call__(self, *, cfg: Any) -> Augmenter: ...


class BoundAugmenterFactory(Protocol):
    """``AUGMENTERS.bind(cfg)``: ``make()``."""

    def __call__(self) -> Augmenter: ...


class RetrieverFactory(Protocol):
    """``RETRIEVERS``: ``cls(*, cfg)``."""

    def __call__(self, *, cfg: Any) -> Retriever: ...


class BoundRetrieverFactory(Protocol):
    """``RETRIEVERS.bind(cfg)``: ``make()``."""

    def __call__(self) -> Retriever: ...


@runtime_checkable
class Describes(Protocol):
    """A retriever that describes its index (``seekrl-index`` prints it): the local backends."""

    def describe(self) -> dict[str, Any]: ...


@runtime_checkable
class Tokenizer(Protocol):
    """What the agent loop needs of a tokenizer (a Hugging Face tokenizer has all of it)."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...

    @property
    def pad_token_id(self) -> int | None: ...


@runtime_checkable
class RolloutBackend(Protocol):
    """What a ``ROLLOUT_BACKENDS`` class builds: batched continuation of token sequences whose
    weights follow the policy.

    ``generate`` receives full token sequences (prompt and everything so far) and returns only the
    new tokens of each, stopping after any of the stop strings, at end of sequence, or at that
    sequence's ``max_new_tokens``. ``update_weights`` makes later generations use the given policy.

    ``seeds`` (one int per sequence) is passed only when the caller seeds rollouts one by one (an
    evaluation); a backend then samples each sequence as a function of its seed and its own
    tokens, whatever shares its batch (a scripted backend, which does not sample, ignores them).
    """

    tokenizer: Tokenizer

    def generate(
        self,
        sequences: Sequence[Sequence[int]],
        max_new_tokens: Sequence[int],
        stop: Sequence[str],
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]: ...

    def update_weights(self, model: torch.nn.Module) -> None: ...


@runtime_checkable
class StreamsTurns(Protocol):
    """A backend that takes one sequence at a time and hands back whichever have finished, so
    the agent loop submits a rollout's next turn as soon as its tool results are in, instead of
    waiting for the turn's slowest rollout (``generate``'s barrier). ``streams`` says whether to
    (a config may keep the barrier); ``submit`` queues a continuation under ``key`` with
    ``generate``'s arguments for one sequence; ``collect`` runs the backend until at least one
    queued sequence has finished (none queued: returns ``[]``) and returns those, by key."""

    streams: bool

    def submit(
        self,
        key: int,
        sequence: Sequence[int],
        max_new_tokens: int,
        stop: Sequence[str],
        seed: int | None = None,
    ) -> None: ...

    def collect(self) -> list[tuple[int, Generation]]: ...


@runtime_checkable
class CountsCalls(Protocol):
    """A backend that counts its ``generate`` calls (kept in a checkpoint, for the record)."""

    calls: int


class RolloutBackendFactory(Protocol):
    """``ROLLOUT_BACKENDS``: ``cls(*, cfg, model=None, tokenizer=None)``."""

    def __call__(
        self, *, cfg: Any, model: torch.nn.Module | None = None, tokenizer: Any = None
    ) -> RolloutBackend: ...


class BoundRolloutBackendFactory(Protocol):
    """``ROLLOUT_BACKENDS.bind(cfg)``: ``make(model=None, tokenizer=None)``."""

    def __call__(
        self, *, model: torch.nn.Module | None = None, tokenizer: Any = None
    ) -> RolloutBackend: ...


class Judge(Protocol):
    """What a ``JUDGES`` class builds: a verdict per answer."""

    def __call__(self, inputs: Any, /) -> list[bool]: ...


class JudgeFactory(Protocol):
    """``JUDGES``: ``cls(*, cfg, backend=None)``."""

    def __call__(self, *, cfg: Any, backend: Any = None) -> Judge: ...


class BoundJudgeFactory(Protocol):
    """``JUDGES.bind(cfg)``: ``make(backend=None)``."""

    def __call__(self, *, backend: Any = None) -> Judge: ...


class HealthMonitor(Protocol):
    """What a ``HEALTH_MONITORS`` class builds: a verdict per step, and its state for resuming."""

    def check(self, step: int, figures: Mapping[str, float], run: Mapping[str, str]) -> Any: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


@runtime_checkable
class Restartable(Protocol):
    """A backend that can start over as a new one would (the transformers backend empties its KV
    prefix cache and its per-call seed count), so what it computes next does not depend on what
    it computed before."""

    def restart(self) -> None: ...


class HealthMonitorFactory(Protocol):
    """``HEALTH_MONITORS``: ``cls(*, cfg)``."""

    def __call__(self, *, cfg: Any) -> HealthMonitor: ...


class BoundHealthMonitorFactory(Protocol):
    """``HEALTH_MONITORS.bind(cfg)``: ``make()``."""

    def __call__(self) -> HealthMonitor: ...


class AgentProtocol(Protocol):
    """What an ``AGENT_PROTOCOLS`` class builds: the agent's text format, which the agent loop
    asks for everything format-specific (:mod:`framework.rollout.protocol` explains each part).

    The loop stays token-in/token-out whatever the protocol: it trains on the sampled tokens (cut
    at a stop string by the backend) and on the ids :meth:`observation` returns, appended with loss
    mask 0; earlier turns are never re-rendered. ``Turn``, ``Tool`` and ``Observation`` live in
    :mod:`framework.rollout` (above the registries), hence ``Any`` here.
    """

    @property
    def stop(self) -> tuple[str, ...]:
        """Generation stops after any of these (the turn is then complete)."""
        ...

    @property
    def tools(self) -> Mapping[str, Any]:
        """The protocol's tools: name -> ``Tool`` (argument check, batched handler, statistic)."""
        ...

    @property
    def segment_tags(self) -> tuple[tuple[str, str, str], ...]:
        """``(kind, open tag, close tag)`` per tagged block: how a turn's tokens are segmented
        (kinds from ``framework.types.SEGMENT_KINDS``; untagged text is ``other``)."""
        ...

    @property
    def retry_invalid(self) -> bool:
        """A turn that is no action is answered with an observation and the rollout goes on (True),
        or it ends the rollout with a format error (False)."""
        ...

    def prompt_ids(self, tokenizer: Tokenizer, question: str) -> list[int]:
        """The prompt's token ids: the system/user messages, with the question in its place."""
        ...

    def parse(self, text: str) -> Any:
        """The ``Turn`` one model turn amounts to; never raises, whatever ``text`` is."""
        ...

    def observation(self, obs: Any, tokenizer: Tokenizer) -> tuple[str, list[int]]:
        """The text and token ids appended after a turn for its ``Observation`` (tool results,
        call errors, or why the turn was no action)."""
        ...


@runtime_checkable
class RendersMessages(Protocol):
    """A protocol that renders a prompt given as chat messages itself (``agent.prompt=dataset``):
    ``tool_calling`` passes its tools to the chat template."""

    def messages_ids(
        self, tokenizer: Tokenizer, messages: Sequence[Mapping[str, str]]
    ) -> list[int]:
        """The prompt's token ids for ``messages``, ready for the model's first turn."""
        ...


class AgentProtocolFactory(Protocol):
    """``AGENT_PROTOCOLS``: ``cls(*, cfg)``."""

    def __call__(self, *, cfg: Any) -> AgentProtocol: ...


class BoundAgentProtocolFactory(Protocol):
    """``AGENT_PROTOCOLS.bind(cfg)``: ``make()``."""

    def __call__(self) -> AgentProtocol: ...
