"""GiGPO: an episode advantage plus a step advantage over the steps of one state (arXiv 2505.10978).

The steps, states and token layout are :mod:`framework.algorithms.advantages.steps`'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from framework.algorithms.advantages.grpo import _float_rewards
from framework.algorithms.advantages.steps import (
    AgentSteps,
    StepAdvantageConfig,
    configured_steps,
    dense_ids,
    relative_to_group,
    steps_to_tokens,
)
from framework.config import Problem, check, option
from framework.registry.kinds import ADVANTAGES
from framework.types import AdvantageInputs


@dataclass
class GiGPOAdvantageConfig(StepAdvantageConfig):
    omega: float = option(1.0, "weight of the step-level advantage (paper: 1)")
    episode_stats_per_step: bool = option(
        False,
        "count each rollout once per turn in the episode mean and std, as the "
        "public code does; false: once per rollout (the paper's eq. 3)",
    )

    def problems(self) -> list[Problem]:
        return super().problems() + check(
            math.isfinite(self.omega) and self.omega >= 0,
            "omega",
            self.omega,
            "a finite number >= 0",
            "set omega to 1.0 (the paper); 0 gives episode-level GRPO on every token",
        )


def gigpo_episode_advantage(
    inputs: AdvantageInputs, steps: AgentSteps, cfg: GiGPOAdvantageConfig
) -> Tensor:
    """``[N]`` GiGPO's episode level: GRPO over each question's rewards (see ``gigpo``)."""
    r = _float_rewards(inputs)
    if not cfg.episode_stats_per_step:
        return relative_to_group(r, inputs.group_index, cfg)
    per_step = relative_to_group(r[steps.rollout], inputs.group_index[steps.rollout], cfg)
    out = torch.zeros_like(r)  # a rollout without turns has no token to carry it
    out[steps.rollout] = per_step
    return out


@ADVANTAGES.register("gigpo", config=GiGPOAdvantageConfig)
def gigpo_advantage(inputs: AdvantageInputs, *, cfg: GiGPOAdvantageConfig) -> Tensor:
    """GiGPO: episode-level GRPO plus ``omega`` times a step advantage within each anchor state.

    Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training", arXiv 2505.10978
    (https://arxiv.org/abs/2505.10978); code https://github.com/langfengQ/verl-agent
    (``gigpo/core_gigpo.py``). For rollout ``i`` of a question, with reward ``R_i`` after its
    ``T_i`` turns, and turn ``t`` in the anchor group ``U(i, t)`` (the question's steps whose state
    before the turn is the same)::

        A_E(i)    = (R_i - mean_g R) / (std_g R + eps)                        eq. 3
        G(i, t)   = gamma^(T_i - 1 - t) R_i                                   eq. 5
        A_S(i, t) = (G(i, t) - mean_U G) / (std_U G + eps)                    eqs. 6-7
        A(i, t)   = A_E(i) + omega A_S(i, t)                                  eq. 8

    Choices (defaults: ``gamma = 0.95``, ``omega = 1``, as the paper and its scripts):

    - Anchor state: ``STATE_KEYS[state_key]`` of the turns before ``t``; the default ``calls`` is
      every call so far, turn by turn (identical calls and observations). Step 0 of every rollout
      is the question itself, so the first turns of a question form one anchor group.
      ``last_calls`` anchors on the latest observation only, as verl-agent's search environment;
      ``observations`` compares the observations' text as well as the calls.
    - Normalisation: by the std (``scale_by_std``; the code's ``mode=mean_std_norm``, which its run
      scripts use; the paper reports both with and without std) with ``torch.std``'s Bessel
      correction, as the code. ``scale_by_std=false`` is the code's ``mean_norm``.
    - Episode statistics: each rollout counted once (eq. 3). The code's rows are steps and it
      counts a rollout once per step (``compute_mean_std_cross_steps``), so long rollouts weigh
      more; ``episode_stats_per_step=true`` reproduces that.
    - Groups of one: a question with one rollout gets ``A_E = 0`` (GRPO's convention here; the
      code uses mean 0 and std 1), a step alone in its anchor group gets ``A_S = 0`` (as the code).
    - The outcome reward is the only step reward (sparse): ``G`` discounts it back from the last
      turn. A single-turn group gets ``A = (1 + omega) A_E``; ``omega = 0`` is GRPO per token.

    Args:
        inputs: ``rewards [N]``, ``group_index [N]``, ``token_mask [N, L]``, ``turns``.
        cfg: the estimator's config.

    Returns:
        ``[N, L]``: ``A(i, t)`` on the generated tokens of turn ``t``, 0 on tool responses and
        padding.

    Raises:
        ValueError: ``inputs`` carries no token mask or no turns.
    """
    steps = configured_steps(inputs, cfg, "gigpo")
    episode = gigpo_episode_advantage(inputs, steps, cfg)  # [N]
    question = inputs.group_index[steps.rollout].tolist()
    anchors = dense_ids(zip(question, steps.states, strict=True), steps.returns.device)  # [S]
    step = relative_to_group(steps.returns, anchors, cfg)  # [S]
    return steps_to_tokens(episode[steps.rollout] + cfg.omega * step, steps, inputs)
