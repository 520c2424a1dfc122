"""Each component kind's call signature as a :class:`typing.Protocol`, checked by the type checker.

A registry is typed by its kind's protocol (``ADVANTAGES: Registry[AdvantageFn]``), and
``Registry.register`` returns the target unchanged as that type, so ``mypy`` checks every function
or class registered in ``framework/`` (and in a typed plugin) against the signature the framework
calls it with. The first argument of a function kind is positional-only here, so a component may
name it as it likes; ``cfg`` is the component's own config dataclass, declared by its registration.

Types from layers above the registries (the dataset's ``QAItem``, the step's ``InputContext``, the
judges' ``JudgeInputs``, the backends' ``Generation``) appear as ``Any``: the registries sit below
them (``tests/unit/test_import_graph.py``), and those components are checked where they are defined.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from torch import Tensor

from framework.types import (
    AdvantageInputs,
    GroupRequest,
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


class SamplerFactory(Protocol):
    """``SAMPLERS``: ``cls(questions, seed, *, cfg)``."""

    def __call__(self, questions: Sequence[Any], seed: int, /, *, cfg: Any) -> Sampler: ...


class Retriever(Protocol):
    """What a ``RETRIEVERS`` class builds (:class:`framework.retrieval.types.Retriever`)."""

    def search(self, queries: Sequence[str], k: int) -> list[Any]: ...

    def document(self, *, doc_id: str | None = None, title: str | None = None) -> Any: ...

    def close(self) -> None: ...


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


class RolloutBackend(Protocol):
    """What a ``ROLLOUT_BACKENDS`` class builds: batched generation whose weights follow the
    policy."""

    def generate(
        self,
        sequences: Sequence[Sequence[int]],
        max_new_tokens: Sequence[int],
        stop: Sequence[str],
        seeds: Sequence[int] | None = None,
    ) -> list[Any]: ...

    def update_weights(self, model: Any) -> None: ...


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
