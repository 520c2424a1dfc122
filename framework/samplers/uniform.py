"""Uniform question sampler: shuffled epochs, fixed group size."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from framework.config import ComponentConfig, Problem, check_range, option
from framework.config.inert import InertRule, differing_fields
from framework.registry.kinds import SAMPLERS
from framework.types import GroupRequest

__all__ = [
    "EpochOrder",
    "GroupRequest",
    "UniformSampler",
    "UniformSamplerConfig",
    "hop_pool",
    "question_hops",
]


def same_walk_inert(section: Any, train: Any, baseline: Any) -> str | None:
    """The inert rule (:mod:`framework.config.inert`) of ``uniform`` and ``hop_curriculum``:
    ``hop_curriculum`` is ``uniform`` with its curriculum on (the same sampler class but for the
    name an error message gives), so with ``start_hops`` set and every other field the same, the
    two draw the same questions in the same order."""
    base = baseline.sampler
    names = {section.name, base.name}
    if names != {"uniform", "hop_curriculum"} or section.start_hops is None:
        return None
    differing = [n for n in differing_fields(section, base) if n != "name"]
    if differing:
        return None
    return (
        f"with sampler.start_hops={section.start_hops}, uniform walks hop_curriculum's stages: "
        "the same sampler under two names, so the questions are the baseline's"
    )


@dataclass
class UniformSamplerConfig(ComponentConfig):
    #: uniform with start_hops set is hop_curriculum (same_walk_inert)
    screen_inert: ClassVar[InertRule] = same_walk_inert

    questions_per_step: int = option(64, "groups per training step")
    group_size: int = option(8, "rollouts per question (G)")
    shuffle: bool = option(True, "reshuffle the questions every epoch")
    max_hops: int | None = option(
        None,
        "train only on questions of at most this many hops (synthesized data has hop "
        "counts); None: every question",
    )
    start_hops: int | None = option(
        None,
        "a hop curriculum: the largest hop count of the first stage, one more every "
        "steps_per_stage steps (any sampler draws from the stage's questions); None: none",
    )
    steps_per_stage: int = option(8, "steps before the largest hop count allowed rises by one")

    def problems(self) -> list[Problem]:
        out = check_range(self.questions_per_step, "questions_per_step", low=1)
        out += check_range(
            self.group_size, "group_size", low=2, fix="use at least 2 rollouts per group"
        )
        if self.max_hops is not None:
            out += check_range(self.max_hops, "max_hops", low=1, fix="use null for every question")
        if self.start_hops is not None:
            out += check_range(
                self.start_hops, "start_hops", low=1, fix="use null for no curriculum"
            )
        return out + check_range(self.steps_per_stage, "steps_per_stage", low=1)


def check_questions(questions: Sequence[object]) -> None:
    """A sampler needs at least one question."""
    if len(questions) < 1:
        raise ValueError(
            f"[sampler] got a dataset of {len(questions)} questions; expected at least 1. "
            "Fix: point the dataset config at a non-empty split."
        )


def question_hops(questions: Sequence[Any], field: str, value: object) -> list[int]:
    """Every question's hop count; when any lacks one, an error naming the setting that needs
    them (``sampler.<field>`` set to ``value``)."""
    missing = sum(getattr(q, "hops", None) is None for q in questions)
    if missing:
        raise ValueError(
            f"[sampler.{field}] got {value} with {missing} of {len(questions)} training questions "
            "without a hop count; expected every question to have one. Fix: train on a "
            "synthesized dataset (dataset=synth_small, synth, ...) or drop the hop settings "
            "(sampler=uniform, sampler.max_hops=null, sampler.start_hops=null)."
        )
    return [int(q.hops) for q in questions]


def hop_pool(questions: Sequence[Any], max_hops: int | None) -> list[int]:
    """The rows a sampler may draw: all of them, or those of at most ``max_hops`` hops."""
    if max_hops is None:
        return list(range(len(questions)))
    hops = question_hops(questions, "max_hops", max_hops)
    pool = [i for i, h in enumerate(hops) if h <= max_hops]
    if not pool:
        raise ValueError(
            f"[sampler.max_hops] got {max_hops}; expected a limit some training question meets "
            f"(the easiest has {min(hops)} hops). Fix: raise sampler.max_hops or set it to null."
        )
    return pool


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

    With ``cfg.start_hops`` set, a hop curriculum: steps ``0 .. steps_per_stage - 1`` draw only
    questions of at most ``start_hops`` hops, each later stage allows one hop more, until every
    question is in. Within a stage the allowed questions are walked in shuffled epochs; a new stage
    starts a new walk (salted by its hop limit). A stage with no new question is passed through
    (``start_hops`` below the easiest question starts at the easiest; with ``max_hops`` the last
    stage stops there). The curriculum belongs to this base class so that every sampler built on
    it (dynamic sampling, VADE, XRPO, ...) runs on the same stages: ``pool`` and ``walk`` are always
    the current stage's.

    Args:
        questions: the training questions (their number, and their hop counts with
            ``cfg.max_hops`` or ``cfg.start_hops``).
        seed: seed of the epoch permutations.
        cfg: batch and group sizes, the hop limit and curriculum.

    ``pool`` holds the rows the sampler may draw now (every row, those within ``max_hops``, and
    those of the curriculum's stage).
    """

    def __init__(self, questions: Sequence[Any], seed: int, *, cfg: UniformSamplerConfig) -> None:
        check_questions(questions)
        self.cfg = cfg
        self.num_questions = len(questions)
        self.seed = seed
        self.pool = self.full_pool = hop_pool(questions, cfg.max_hops)
        self.steps = 0
        self.stage_hops = -1
        if cfg.start_hops is None:
            self.walk = EpochOrder(self.pool, seed, cfg.shuffle)
            return
        self.hops = question_hops(questions, *self.hops_setting())
        self.levels = sorted({self.hops[i] for i in self.full_pool})
        self._enter(self._hops_at(0))

    def hops_setting(self) -> tuple[str, Any]:
        """The setting (field, value) an error names when the curriculum meets questions without
        hop counts."""
        return "start_hops", self.cfg.start_hops

    @property
    def curriculum(self) -> bool:
        return self.cfg.start_hops is not None

    @property
    def epoch(self) -> int:
        return self.walk.epoch

    def _hops_at(self, step: int) -> int:
        """The largest hop count step ``step`` may draw (at least the easiest question's)."""
        assert self.cfg.start_hops is not None
        allowed = self.cfg.start_hops + step // self.cfg.steps_per_stage
        return max(allowed, self.levels[0])

    def _enter(self, max_hops: int) -> None:
        max_hops = min(max_hops, self.levels[-1])
        if max_hops != self.stage_hops:
            self.pool = [i for i in self.full_pool if self.hops[i] <= max_hops]
            self.walk = EpochOrder(self.pool, self.seed, self.cfg.shuffle, salt=max_hops)
            self.stage_hops = max_hops

    def advance(self) -> None:
        """Start the next step's draw: the curriculum moves to that step's stage (a no-op without
        one). Every ``next_groups`` calls it once, first."""
        if self.curriculum:
            self._enter(self._hops_at(self.steps))
            self.steps += 1

    def next_groups(self) -> list[GroupRequest]:
        """The groups of the next step (an epoch boundary may fall inside a step)."""
        self.advance()
        rows = self.walk.take(self.cfg.questions_per_step)
        return [GroupRequest(q, self.cfg.group_size) for q in rows]

    def state_dict(self) -> dict[str, Any]:
        state = {"epoch": self.walk.epoch, "position": self.walk.position, "seed": self.seed}
        if self.curriculum:
            state.update(steps=self.steps, stage_hops=self.stage_hops)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed = int(state["seed"])
        if self.curriculum:
            self.steps = int(state["steps"])
            self.stage_hops = -1
            self._enter(int(state["stage_hops"]))
        self.walk.restore(self.seed, int(state["epoch"]), int(state["position"]))
