"""Each component kind's call signature as a :class:`typing.Protocol`, checked by the type checker.

A registry is typed by its kind's protocol (``ADVANTAGES: Registry[AdvantageFn]``), and
``Registry.register`` returns the target unchanged as that type, so ``mypy`` checks every function
or class registered in ``framework/`` (and in a typed plugin) against the signature the framework
calls it with. The first argument of a function kind is positional-only here, so a component may
name it as it likes; ``cfg`` is the component's own config dataclass, declared by its registration.

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


class AdvantageFn(Protocol):
    """``ADVANTAGES``: ``[N]`` per rollout, or ``[N, L]`` per response token."""

    def __call__(self, inputs: AdvantageInputs, /, *, cfg: Any) -> Tensor: ...


class PolicyLossFn(Protocol):
    """``POLICY_LOSSES``: the loss of a micro-batch and its figures."""

    def __call__(self, inputs: PolicyLossInputs, /, *, cfg: Any) -> LossOutput: ...


class KLFn(Protocol):
    """``KL_ESTIMATORS``: per-token KL ``[N, L]`` of the policy from the reference."""

    def __call__(self, logprobs: Tensor, ref_logprobs: Tensor, /, *, cfg: Any) -> Tensor: ...


class DatasetFn(Protocol):
    """``DATASETS``: the questions of one split (``QAItem`` each)."""

    def __call__(self, split: str, /, *, cfg: Any) -> list[Any]: ...


class InputProviderFn(Protocol):
    """``INPUT_PROVIDERS``: one input a component ``requires``, computed from an ``InputContext``
    (a tensor whose first dimension is the step's rollouts, or any per-rollout object)."""

    def __call__(self, ctx: Any, /, *, cfg: Any) -> Any: ...


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
class AdaptiveSampler(Protocol):
    """A sampler that learns from the trained groups (``observe``) and whose resumable state
    includes what it observed up to a step (``state_after`` of the state drawn for it)."""

    def observe(
        self,
        step: int,
        questions: Sequence[int],
        rewards: Sequence[Sequence[float]],
        correct: Sequence[Sequence[bool]],
    ) -> None: ...

    def state_after(self, drawn: dict[str, Any]) -> dict[str, Any]: ...


class SamplerFactory(Protocol):
    """``SAMPLERS``: ``cls(questions, seed, *, cfg)``."""

    def __call__(self, questions: Sequence[Any], seed: int, /, *, cfg: Any) -> Sampler: ...


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


class RetrieverFactory(Protocol):
    """``RETRIEVERS``: ``cls(*, cfg)``."""

    def __call__(self, *, cfg: Any) -> Retriever: ...


@runtime_checkable
class Tokenizer(Protocol):
    """What the agent loop needs of a tokenizer (a Hugging Face tokenizer has all of it)."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


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

    def update_weights(self, model: Any) -> None: ...


@runtime_checkable
class CountsCalls(Protocol):
    """A backend that counts its ``generate`` calls (kept in a checkpoint, for the record)."""

    calls: int


class RolloutBackendFactory(Protocol):
    """``ROLLOUT_BACKENDS``: ``cls(*, cfg, model=None, tokenizer=None)``."""

    def __call__(self, *, cfg: Any, model: Any = None, tokenizer: Any = None) -> RolloutBackend: ...


class Judge(Protocol):
    """What a ``JUDGES`` class builds: a verdict per answer."""

    def __call__(self, inputs: Any, /) -> list[bool]: ...


class JudgeFactory(Protocol):
    """``JUDGES``: ``cls(*, cfg, backend=None)``."""

    def __call__(self, *, cfg: Any, backend: Any = None) -> Judge: ...


class HealthMonitor(Protocol):
    """What a ``HEALTH_MONITORS`` class builds: a verdict per step, and its state for resuming."""

    def check(self, step: int, figures: Mapping[str, float], run: Mapping[str, str]) -> Any: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class HealthMonitorFactory(Protocol):
    """``HEALTH_MONITORS``: ``cls(*, cfg)``."""

    def __call__(self, *, cfg: Any) -> HealthMonitor: ...
