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
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor

from framework.config import Problem, check, check_range, option
from framework.config.inert import InertRule
from framework.registry.kinds import SAMPLERS
from framework.samplers.uniform import UniformSampler, UniformSamplerConfig, same_walk_inert
from framework.types import GroupRequest


@dataclass
class DynamicSamplerConfig(UniformSamplerConfig):
    reserve: float = option(
        1.0,
        "reserve groups per step, as a multiple of questions_per_step (rounded up); "
        "they replace dropped groups. 0: drop only",
    )

    def problems(self) -> list[Problem]:
        return super().problems() + check_range(self.reserve, "reserve", low=0.0)


@dataclass
class RejectionSamplerConfig(DynamicSamplerConfig):
    reserve: float = option(0.0, "reserve groups per step, as a multiple of questions_per_step")


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
    """``uniform`` with its hop curriculum on (``start_hops`` 1 by default; every sampler takes
    ``sampler.start_hops``, this name keeps the curriculum's own entry in the registry)."""

    start_hops: int | None = option(1, "the largest hop count of the first stage")

    #: hop_curriculum is uniform with start_hops set (same_walk_inert)
    screen_inert: ClassVar[InertRule] = same_walk_inert

    def problems(self) -> list[Problem]:
        out = super().problems()
        return out + check(
            self.start_hops is not None,
            "start_hops",
            self.start_hops,
            "a hop count (hop_curriculum is the curriculum)",
            "set sampler.start_hops=1, or use sampler=uniform for no curriculum",
        )


@SAMPLERS.register("hop_curriculum", config=HopCurriculumConfig)
class HopCurriculumSampler(UniformSampler):
    """A curriculum by hop count: questions of at most ``start_hops`` hops first, one hop more
    every ``steps_per_stage`` steps, walked as by ``uniform``.

    It is :class:`~framework.samplers.uniform.UniformSampler` with ``start_hops`` set (that
    docstring gives the stages); every sampler takes ``sampler.start_hops`` the same way. Every
    training question needs ``hops`` (synthesized data has them)."""

    cfg: HopCurriculumConfig

    def hops_setting(self) -> tuple[str, Any]:
        return "name", "hop_curriculum"
