"""Uniform question sampler: shuffled epochs, fixed group size."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from framework.config import ComponentConfig, Problem, check_range
from framework.registry.kinds import SAMPLERS
from framework.types import GroupRequest

__all__ = ["GroupRequest", "UniformSampler", "UniformSamplerConfig"]  # GroupRequest: re-exported


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


@SAMPLERS.register("uniform", config=UniformSamplerConfig)
class UniformSampler:
    """Walks the dataset in shuffled epochs, ``questions_per_step`` questions per step.

    Deterministic given ``seed``; :meth:`state_dict` captures the position so a resumed run draws the
    same questions as an uninterrupted one.

    Args:
        num_questions: dataset size.
        seed: seed of the epoch permutations.
        cfg: batch and group sizes.
    """

    def __init__(self, num_questions: int, seed: int, *, cfg: UniformSamplerConfig) -> None:
        if num_questions < 1:
            raise ValueError(
                f"[sampler] got a dataset of {num_questions} questions; expected at least 1. "
                "Fix: point the dataset config at a non-empty split."
            )
        self.cfg = cfg
        self.num_questions = num_questions
        self.seed = seed
        self.epoch = 0
        self.position = 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        if not self.cfg.shuffle:
            return list(range(self.num_questions))
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.num_questions, generator=gen).tolist()

    def next_groups(self) -> list[GroupRequest]:
        """The groups of the next step (an epoch boundary may fall inside a step)."""
        out = []
        for _ in range(self.cfg.questions_per_step):
            if self.position == self.num_questions:
                self.epoch += 1
                self.position = 0
                self._order = self._permutation(self.epoch)
            out.append(GroupRequest(self._order[self.position], self.cfg.group_size))
            self.position += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed = int(state["seed"])
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self._order = self._permutation(self.epoch)
