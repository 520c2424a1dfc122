"""Rollout augmenters: components that roll out more than the step's groups.

Some methods need rollouts the sampler's groups do not give: Monte-Carlo continuations from a
turn boundary to value it (SPO, HiPER without a critic), forced early answers after each turn
(S-GRPO), stored rollouts of the other outcome added to a one-outcome group and a group for a
hard question's reflected prompt (R³), rollouts of a hinted question (HiLL). An augmenter is the one place where a component may do that. It is a
class registered in :data:`~framework.registry.AUGMENTERS` (config section ``augment``; default
``none``) and built once per run; after the step has drawn and scored its groups, it receives them
(:class:`~framework.rl.drawn.Drawn`) and an :class:`AugmentContext` through which it can roll out
(fresh questions or continuations of a turn prefix: :class:`~framework.rollout.engine.Prefix`),
score and judge, and returns the rollouts the step trains on, with per-rollout extras that reach
the advantage estimator and the loss as inputs (``Scores.extras``):

    @dataclass
    class MyAugmenterConfig(ComponentConfig):
        provides: ClassVar[tuple[str, ...]] = ("my_values",)

    @AUGMENTERS.register("mine", config=MyAugmenterConfig)
    class Mine:
        def __init__(self, *, cfg): ...
        def augment(self, drawn, ctx) -> Augmented: ...
        def state_dict(self) -> dict: ...
        def load_state_dict(self, state) -> None: ...

An input named in an augmenter's ``provides`` needs no provider: a component that ``requires`` it
is valid with that augmenter selected, and the config check names the augmenter otherwise. The
extra rollouts an augmenter generates are counted in the step's figures (``augment/rollouts``,
``augment/generated_tokens``, ``timing/augment``), so a method's cost is visible next to its gain.
An augmenter's ``state_dict`` is saved in the run's checkpoints (a replay buffer survives resume).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

import torch

from framework.config import ComponentConfig
from framework.data.schema import QAItem
from framework.registry import AUGMENTERS
from framework.registry.protocols import Tokenizer
from framework.rl.drawn import Drawn
from framework.rollout.engine import Prefix
from framework.rollout.metrics import correct, correctness_metric
from framework.rollout.scoring import Scores, score
from framework.types import Trajectory


@dataclass
class AugmenterConfig(ComponentConfig):
    """Base of every augmenter's config."""

    #: the inputs this augmenter puts in ``Scores.extras`` (components may ``require`` them)
    provides: ClassVar[tuple[str, ...]] = ()


# the trainer reads ``provides`` (inputs it puts in Scores.extras)
AUGMENTERS.declare_config_base(AugmenterConfig)


@dataclass
class AugmentContext:
    """What an augmenter may use: the rollout loop and the step's reward.

    Attributes:
        loop: the step's rollout loop (``run`` for fresh rollouts; ``run_from`` for continuations
            of a prefix, :meth:`~framework.rollout.engine.AgentLoop.run_from`).
        reward: the reward config the step scores with.
        policy: the policy, as it was before this step's update (eval mode while rolling out).
        tokenizer: the rollout backend's tokenizer.
        progress: the share of the run's steps done before this one.
    """

    loop: Any
    reward: ComponentConfig
    policy: torch.nn.Module
    tokenizer: Tokenizer
    progress: float = 0.0
    #: every rollout generated through this context (the step counts them)
    generated: list[Trajectory] = field(default_factory=list)

    def run(
        self, questions: Sequence[str], sizes: Sequence[int], question_ids: Sequence[int]
    ) -> list[Trajectory]:
        """``sizes[g]`` fresh rollouts of ``questions[g]`` (grouped; ``group`` = ``g``)."""
        with self._rolling():
            out = self.loop.run(list(questions), list(sizes), question_ids=list(question_ids))
        self.generated += out
        return out

    def run_from(self, prefixes: Sequence[Prefix]) -> list[Trajectory]:
        """One continuation of each :class:`~framework.rollout.engine.Prefix`, in order."""
        if not prefixes:
            return []
        with self._rolling():
            out = self.loop.run_from(list(prefixes))
        self.generated += out
        return out

    def score(self, trajectories: Sequence[Trajectory], items: Sequence[QAItem]) -> Scores:
        """Rewards of ``trajectories`` (``items[t.group]`` is each one's question)."""
        return score(trajectories, items, self.reward)

    def correct(self, trajectories: Sequence[Trajectory], items: Sequence[QAItem]) -> list[bool]:
        """Per rollout, right by the reward's answer metric (what samplers call correct)."""
        return correct(trajectories, items, correctness_metric(self.reward))

    def _rolling(self) -> torch.no_grad:
        self.policy.eval()
        return torch.no_grad()


@dataclass
class Augmented:
    """What an augmenter returns.

    Attributes:
        drawn: the rollouts the step trains on (its groups renumbered ``0 .. len(items) - 1``),
            their questions and scores, with the provided inputs in ``scores.extras``.
        figures: ``augment/...`` figures of this step (counts, shares).
    """

    drawn: Drawn
    figures: dict[str, float] = field(default_factory=dict)


C = TypeVar("C", bound=AugmenterConfig)


class Augmenter(ABC, Generic[C]):
    """Base of the built-in augmenters (``C``: the augmenter's config class): stateless unless a
    subclass keeps state."""

    def __init__(self, *, cfg: C) -> None:
        self.cfg = cfg

    @abstractmethod
    def augment(self, drawn: Drawn, ctx: AugmentContext) -> Augmented:
        """The rollouts the step trains on (see the module docstring)."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        del state


@AUGMENTERS.register("none", config=AugmenterConfig)
class NoAugmenter(Augmenter[AugmenterConfig]):
    """The default: the step trains on the groups it drew, nothing more is rolled out."""

    def augment(self, drawn: Drawn, ctx: AugmentContext) -> Augmented:
        return Augmented(drawn)


def with_extras(drawn: Drawn, **extras: torch.Tensor) -> Drawn:
    """``drawn`` with ``extras`` (first dimension = its rollouts) added to its scores' extras."""
    n = len(drawn.trajectories)
    for name, value in extras.items():
        if value.shape[0] != n:
            raise ValueError(f"extra {name!r} has {value.shape[0]} rows for {n} rollouts")
    s = drawn.scores
    return Drawn(drawn.trajectories, drawn.items, Scores(s.total, s.components, s.extras | extras))
