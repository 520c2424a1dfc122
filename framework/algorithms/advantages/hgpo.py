"""HGPO: step advantages over hierarchical state contexts of growing length (arXiv 2602.22817).

The steps, states and token layout are :mod:`framework.algorithms.advantages.steps`'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from framework.algorithms.advantages.steps import (
    AgentSteps,
    StepAdvantageConfig,
    configured_steps,
    dense_ids,
    relative_to_group,
    steps_to_tokens,
)
from framework.algorithms.stats.group import group_size
from framework.config import Problem, check, option
from framework.registry.kinds import ADVANTAGES
from framework.types import AdvantageInputs


@dataclass
class HGPOAdvantageConfig(StepAdvantageConfig):
    state_key: str = option(
        "last_calls", "the STATE_KEYS entry of one state; levels k > 0 add the k states before it"
    )
    unbiased_std: bool = option(
        False, "Bessel-corrected std; false: population std, as the paper's code"
    )
    K: int = option(2, "deepest level: steps that share their last K + 1 states (paper: 2, 4)")
    alpha: float = option(1.0, "level weights w_k ∝ (k + weight_offset)^alpha; 0: uniform")
    weight_offset: int = option(1, "1: w_k ∝ (k + 1)^alpha (METHODS.md); 2: as the public code")

    def problems(self) -> list[Problem]:
        out = super().problems()
        out += check(
            self.K >= 0,
            "K",
            self.K,
            "an integer >= 0",
            "set K to 2 (the paper); 0 leaves GiGPO's step part alone",
        )
        out += check(
            math.isfinite(self.alpha), "alpha", self.alpha, "a finite number", "set alpha to 1.0"
        )
        out += check(
            self.weight_offset >= 1,
            "weight_offset",
            self.weight_offset,
            "an integer >= 1",
            "set weight_offset to 1 (METHODS.md) or 2 (the public code)",
        )
        return out


def hgpo_step_advantage(steps: AgentSteps, group_index: Tensor, cfg: HGPOAdvantageConfig) -> Tensor:
    """``[S]`` HGPO's advantage of each step (see ``hgpo``)."""
    question = group_index[steps.rollout].tolist()
    turn = steps.turn.tolist()
    num = torch.zeros_like(steps.returns)
    den = torch.zeros_like(steps.returns)
    for k in range(cfg.K + 1):
        keys = [
            (q, tuple(steps.states[s - k : s + 1])) if t >= k else ("no level", s)
            for s, (q, t) in enumerate(zip(question, turn, strict=True))
        ]
        ids = dense_ids(keys, steps.returns.device)
        adv = relative_to_group(steps.returns, ids, cfg)
        has_baseline = group_size(ids) >= 2  # alone, or no level k before turn k: drops out
        w = float(k + cfg.weight_offset) ** cfg.alpha
        num += torch.where(has_baseline, w * adv, torch.zeros_like(adv))
        den += has_baseline.to(den.dtype) * w
    return torch.where(den > 0, num / torch.where(den > 0, den, torch.ones_like(den)), num)


@ADVANTAGES.register("hgpo", config=HGPOAdvantageConfig)
def hgpo_advantage(inputs: AdvantageInputs, *, cfg: HGPOAdvantageConfig) -> Tensor:
    """HGPO: a weighted mean of step advantages over nested groups sharing the last ``k + 1`` states.

    He et al. 2026, "Hierarchy-of-Groups Policy Optimization for Long-Horizon Agentic Tasks", arXiv
    2602.22817 (https://arxiv.org/abs/2602.22817), ICLR 2026; code
    https://github.com/langfengQ/verl-agent/tree/master/recipe/hgpo (``core_hgpo.py``). With
    ``G(i, t)`` GiGPO's discounted step return and ``s(i, t)`` the state before turn ``t``::

        C_k(i, t) = (s(i, t - k), ..., s(i, t))                    k = 0..K, for t >= k
        A_k(i, t) = (G(i, t) - mean_Hk G) / (std_Hk G + eps)       Hk: same question and C_k
        w_k       = (k + 1)^alpha
        A(i, t)   = sum_{k in V} w_k A_k(i, t) / sum_{k in V} w_k  V: levels with |Hk| >= 2

    Level 0 is GiGPO's anchor group; ``H_0 ⊇ H_1 ⊇ ... ⊇ H_K`` trade variance (large, mixed-context
    groups) for bias (small, context-consistent ones), and the weights favour consistency.

    Choices (METHODS.md marks nothing loose; where the paper and code differ, said here):

    - Defaults: ``K = 2`` (the code's ``history_length=2``; the paper also runs 4), ``alpha = 1``
      (``length_weight_alpha``), ``gamma = 0.95``, std-normalised with the population std
      (``mode=mean_std_norm``, ``std(unbiased=False)``), ``eps = 1e-6``. No episode-level term:
      the code's optional ``base_group`` is off in its scripts.
    - Weights: ``w_k ∝ (k + 1)^alpha`` as METHODS.md states. The code weighs a window of
      ``k + 1`` states by ``(k + 2)^alpha`` (it keeps ``1^alpha`` for the optional base group);
      ``weight_offset = 2`` reproduces it.
    - Adaptive normalisation: the weights are renormalised over the levels where the step has a
      baseline (two or more steps in ``H_k``); a level where it is alone, or that does not exist
      yet (``t < k``), drops out, and a step alone at every level gets 0. The code does the same,
      but also drops a level whose advantage is exactly 0 (e.g. a group of equal returns); here
      such a level stays and pulls the mean toward 0.
    - State: ``last_calls``, the latest observation, as the paper's environments anchor on the
      current observation while the context holds history. With a full-history key (``calls``,
      ``observations``) every ``H_k`` equals ``H_0``, so HGPO becomes GiGPO's step part (a test checks it); our agent
      keeps its whole history in context, so only that key is an exactly consistent context.
    - ``K = 0`` is GiGPO's ``A_S`` alone (``omega A_S`` without ``A_E``).

    Args:
        inputs: ``rewards [N]``, ``group_index [N]``, ``token_mask [N, L]``, ``turns``.
        cfg: the estimator's config.

    Returns:
        ``[N, L]``: ``A(i, t)`` on the generated tokens of turn ``t``, 0 on tool responses and
        padding.

    Raises:
        ValueError: ``inputs`` carries no token mask or no turns.
    """
    steps = configured_steps(inputs, cfg, "hgpo")
    return steps_to_tokens(hgpo_step_advantage(steps, inputs.group_index, cfg), steps, inputs)
