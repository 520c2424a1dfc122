"""Samplers that choose which groups a step trains on: dynamic sampling and rejection.

Both draw like :class:`~framework.samplers.uniform.UniformSampler` (shuffled epochs), plus
``reserve`` groups per step; :func:`~framework.rl.step.rl_step` rolls the step's groups out,
keeps those :meth:`keep_group` accepts, and rolls out reserve groups to replace the dropped ones
until the step has ``questions_per_step`` kept groups or the reserve is spent. A step then trains on
its kept groups only; a step that kept none makes no update. A reserve group not needed is skipped
(its question comes round again next epoch), so the questions a step draws, and the sampler state
a checkpoint resumes from, do not depend on any rollout.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from framework.config import Problem, check_range
from framework.registry.kinds import SAMPLERS
from framework.samplers.uniform import UniformSampler, UniformSamplerConfig, question_hops
from framework.types import GroupRequest


@dataclass
class DynamicSamplerConfig(UniformSamplerConfig):
    reserve: float = field(
        default=1.0,
        metadata={
            "help": "reserve groups per step, as a multiple of questions_per_step (rounded up); "
            "they replace dropped groups. 0: drop only"
        },
    )

    def problems(self) -> list[Problem]:
        return super().problems() + check_range(self.reserve, "reserve", low=0.0)


@dataclass
class RejectionSamplerConfig(DynamicSamplerConfig):
    reserve: float = field(
        default=0.0,
        metadata={"help": "reserve groups per step, as a multiple of questions_per_step"},
    )


class _FilteringSampler(UniformSampler):
    cfg: DynamicSamplerConfig

    def next_groups(self) -> list[GroupRequest]:
        """``questions_per_step`` groups, then ``ceil(reserve * questions_per_step)`` reserve ones."""
        groups = super().next_groups()
        extra = math.ceil(self.cfg.reserve * self.cfg.questions_per_step)
        rows = self.walk.take(extra)
        return groups + [GroupRequest(q, self.cfg.group_size, reserve=True) for q in rows]


@SAMPLERS.register("dapo_dynamic", config=DynamicSamplerConfig)
class DynamicSampler(_FilteringSampler):
    """DAPO's dynamic sampling (Yu et al. 2025, arXiv 2503.14476, section 3.2): a group whose
    rewards are all equal has zero advantage under a group-normalised estimator and only dilutes
    the batch, so it is dropped and replaced from the reserve.

    ``keep_group``: the group's total rewards are not all equal (``max - min > 1e-6``). Under E-GRPO
    an all-wrong group with different entity credit is kept: its rewards differ.
    """

    def keep_group(self, rewards: Tensor, correct: Tensor) -> bool:
        return bool(rewards.max() - rewards.min() > 1e-6)


@SAMPLERS.register("reinforce_rej", config=RejectionSamplerConfig)
class RejectionSampler(_FilteringSampler):
    """REINFORCE-Rej (Xiong et al. 2025, arXiv 2504.11343): groups whose rollouts are all correct
    or all wrong are left out of the update; by default nothing replaces them (``reserve: 0``).

    ``keep_group``: at least one rollout is correct and at least one is not (by the reward's answer
    metric, the one the ``rollout/accuracy`` figure uses).
    """

    def keep_group(self, rewards: Tensor, correct: Tensor) -> bool:
        return bool(correct.any() and not correct.all())


@dataclass
class HopCurriculumConfig(UniformSamplerConfig):
    start_hops: int = field(
        default=1, metadata={"help": "the largest hop count of the first stage"}
    )
    steps_per_stage: int = field(
        default=8, metadata={"help": "steps before the largest hop count allowed rises by one"}
    )

    def problems(self) -> list[Problem]:
        out = super().problems() + check_range(self.start_hops, "start_hops", low=1)
        return out + check_range(self.steps_per_stage, "steps_per_stage", low=1)


@SAMPLERS.register("hop_curriculum", config=HopCurriculumConfig)
class HopCurriculumSampler(UniformSampler):
    """A curriculum by hop count: steps ``0 .. steps_per_stage - 1`` draw only questions of at most
    ``start_hops`` hops, each later stage allows one hop more, until every question is in.

    Within a stage the allowed questions are walked in shuffled epochs (as ``uniform``); a new stage
    starts a new walk. A stage with no new question is passed through (``start_hops`` below the
    easiest question starts at the easiest; with ``max_hops`` the last stage stops there). Every
    training question needs ``hops`` (synthesized data has them).
    """

    cfg: HopCurriculumConfig

    def __init__(self, questions: Sequence[Any], seed: int, *, cfg: HopCurriculumConfig) -> None:
        hops = question_hops(questions, "name", "hop_curriculum")
        super().__init__(questions, seed, cfg=cfg)
        self.hops = hops
        self.levels = sorted({hops[i] for i in self.pool})
        self.steps = 0
        self.stage_hops = -1
        self._enter(self._hops_at(0))

    def _hops_at(self, step: int) -> int:
        """The largest hop count step ``step`` may draw (at least the easiest question's)."""
        allowed = self.cfg.start_hops + step // self.cfg.steps_per_stage
        return max(allowed, self.levels[0])

    def _enter(self, max_hops: int) -> None:
        max_hops = min(max_hops, self.levels[-1])
        if max_hops != self.stage_hops:
            pool = [i for i in self.pool if self.hops[i] <= max_hops]
            self.walk = type(self.walk)(pool, self.seed, self.cfg.shuffle, salt=max_hops)
            self.stage_hops = max_hops

    def next_groups(self) -> list[GroupRequest]:
        self._enter(self._hops_at(self.steps))
        self.steps += 1
        return super().next_groups()

    def state_dict(self) -> dict[str, Any]:
        return dict(super().state_dict(), steps=self.steps, stage_hops=self.stage_hops)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed = int(state["seed"])
        self.steps = int(state["steps"])
        self.stage_hops = -1
        self._enter(int(state["stage_hops"]))
        self.walk.restore(self.seed, int(state["epoch"]), int(state["position"]))
