"""Input providers that read the step's rollouts themselves, without a model pass.

Each is registered in ``INPUT_PROVIDERS`` under the name a component lists in ``requires``
(:mod:`framework.rl.inputs`); the step calls it once per step, after scoring.
"""

from __future__ import annotations

from framework.config import ComponentConfig
from framework.registry import INPUT_PROVIDERS
from framework.rewards.text import normalize_answer
from framework.rl.inputs import InputContext


@INPUT_PROVIDERS.register("answers", config=ComponentConfig)
def answers_input(ctx: InputContext, *, cfg: ComponentConfig) -> list:
    """The ``answers`` input: per rollout its final answer, normalised as exact match normalises it
    (:func:`~framework.rewards.text.normalize_answer`); ``""`` for a rollout that gave none."""
    return [normalize_answer(t.answer) if t.answer is not None else "" for t in ctx.trajectories]


@INPUT_PROVIDERS.register("training_progress", config=ComponentConfig)
def training_progress_input(ctx: InputContext, *, cfg: ComponentConfig) -> float:
    """The ``training_progress`` input: the share of the run's steps done before this one (0 at
    the first step), one number for the whole batch, for components with a schedule."""
    return float(ctx.progress)
