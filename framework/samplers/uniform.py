"""Uniform question sampler: shuffled epochs, fixed group size."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from framework.config import ComponentConfig, Problem, check_range
from framework.registry.kinds import SAMPLERS
from framework.types import GroupRequest

__all__ = ["EpochOrder", "GroupRequest", "UniformSampler", "UniformSamplerConfig"]


@dataclass
class UniformSamplerConfig(ComponentConfig):
    questions_per_step: int = field(default=64, metadata={"help": "groups per training step"})
    group_size: int = field(default=8, metadata={"help": "rollouts per question (G)"})
    shuffle: bool = field(default=True, metadata={"help": "reshuffle the questions every epoch"})

    def problems(self) -> list[Problem]:
        out = check_range(self.questions_per_step, "questions_per_step", low=1)
        out += check_range(
            self.group_size, "group_size", low=2, fix="use at least 2 rollouts per group"
        )
        return out


def check_questions(questions: Sequence[Any]) -> None:
    """A sampler needs at least one question."""
    if len(questions) < 1:
        raise ValueError(
            f"[sampler] got a dataset of {len(questions)} questions; expected at least 1. "
            "Fix: point the dataset config at a non-empty split."
        )


class EpochOrder:
    """Walks ``pool`` (dataset rows) in epochs, each a permutation seeded by ``(seed, salt,
    epoch)`` (or the pool's own order without ``shuffle``). Its state is ``epoch`` and ``position``
    (rows drawn in the current epoch): the same state draws the same rows."""

    def __init__(self, pool: Sequence[int], seed: int, shuffle: bool, salt: int = 0) -> None:
        self.pool, self.seed, self.shuffle, self.salt = list(pool), seed, shuffle, salt
        self.epoch = self.position = 0
        self._order = self._permutation()

    def _permutation(self) -> list[int]:
        if not self.shuffle:
            return list(self.pool)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch + self.salt * 7919)
        return [self.pool[i] for i in torch.randperm(len(self.pool), generator=gen).tolist()]

    def take(self, n: int) -> list[int]:
        """The next ``n`` rows (an epoch boundary may fall among them)."""
        out = []
        for _ in range(n):
            if self.position == len(self.pool):
                self.epoch += 1
                self.position = 0
                self._order = self._permutation()
            out.append(self._order[self.position])
            self.position += 1
        return out

    def restore(self, seed: int, epoch: int, position: int) -> None:
        self.seed, self.epoch, self.position = seed, epoch, position
        self._order = self._permutation()


@SAMPLERS.register("uniform", config=UniformSamplerConfig)
class UniformSampler:
    """Walks the dataset in shuffled epochs, ``questions_per_step`` questions per step.

    Deterministic given ``seed``; :meth:`state_dict` captures the position so a resumed run draws the
    same questions as an uninterrupted one.

    Args:
        questions: the training questions (only their number matters here).
        seed: seed of the epoch permutations.
        cfg: batch and group sizes.
    """

    def __init__(self, questions: Sequence[Any], seed: int, *, cfg: UniformSamplerConfig) -> None:
        check_questions(questions)
        self.cfg = cfg
        self.num_questions = len(questions)
        self.seed = seed
        self.walk = EpochOrder(range(self.num_questions), seed, cfg.shuffle)

    @property
    def epoch(self) -> int:
        return self.walk.epoch

    def next_groups(self) -> list[GroupRequest]:
        """The groups of the next step (an epoch boundary may fall inside a step)."""
        rows = self.walk.take(self.cfg.questions_per_step)
        return [GroupRequest(q, self.cfg.group_size) for q in rows]

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.walk.epoch, "position": self.walk.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed = int(state["seed"])
        self.walk.restore(self.seed, int(state["epoch"]), int(state["position"]))
