"""SPAE: Step Potential Advantage Estimation (arXiv 2601.03823), partial: credit each turn by how
much it raised the policy's *potential* to answer, and give less credit to turns a correct rollout
spent after its answer was already likely (over-checking).

Exact (the paper's README and probe example): the potential combines a correctness term, the
policy's mean per-token probability of the gold answer behind an "answer now" probe,
``Acc = (1/|y*|) Σ_m π(y*_m | prefix, probe, y*_<m)``, and a confidence term,
``Conf = exp(-(1/L) Σ_l H_l)`` (the length-normalised entropy of the probe's continuation); the
token advantage is ``Â_(i,j) = Â_i f(Φ_(i,M(j))) + ξ g(ΔΦ_(i,M(j)))``. Choices
(``../shared/METHODS-2.md`` item 4), hence "partial":

- steps are turns, and the probe is IGPO's answer scaffold before each turn
  (:func:`~framework.rl.answer_probs.probe_prefix_ends`); the potential after turn ``k`` is the
  probe before turn ``k + 1``, so ``ΔΦ_k = Φ_(k+1) - Φ_k`` for every turn but the last (whose
  credit is the outcome's), and ``ΔΦ = 0`` there;
- one teacher-forced probe per turn instead of ``N`` sampled ones: ``Conf`` is the entropy of the
  next-token distributions at the gold answer's tokens (the ``gold_potential`` input);
- ``Φ = Acc · Conf``; ``f = 1 - κ`` on the turns of a correct rollout (reward > 0) that start with
  the potential already at ``τ`` or above at some earlier probe (``τ = 0.8``, ``κ = 0.5``), else 1;
  ``g(ΔΦ) = clip(ΔΦ, -1, 1)``, ``ξ = 0.1``; ``Â_i`` is GRPO's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.advantages.grpo import GRPOAdvantageConfig, grpo_advantage
from framework.algorithms.advantages.turns import (
    PROBE_PREFIX,
    turn_table,
    turn_token_values,
)
from framework.config import Problem, check_range, option
from framework.registry import ADVANTAGES
from framework.types import AdvantageInputs


@dataclass
class SPAEAdvantageConfig(GRPOAdvantageConfig):
    #: ``extras["gold_potential"]``: Φ before each turn (framework/rl/answer_probs.py)
    requires: ClassVar[tuple[str, ...]] = ("gold_potential",)
    paper: ClassVar[str] = "SPAE: Step Potential Advantage Estimation, arXiv 2601.03823"
    fidelity: ClassVar[str] = "partial"

    tau: float = option(0.8, "saturation potential (choice)")
    kappa: float = option(0.5, "saturation penalty (choice)")
    xi: float = option(0.1, "weight of the potential gain (choice)")
    probe_batch_size: int = option(8, "probes (prefix + gold answer) per forward pass")
    probe_prefix: str = option(PROBE_PREFIX, "scaffold between a rollout prefix and the answer")

    def problems(self) -> list[Problem]:
        out = check_range(self.tau, "tau", low=0.0, high=1.0)
        out += check_range(self.kappa, "kappa", low=0.0, high=1.0)
        out += check_range(self.xi, "xi", low=0.0)
        out += check_range(self.probe_batch_size, "probe_batch_size", low=1)
        return out + super().problems()


def probe_accuracy(gold_token_probs: Sequence[Sequence[float]]) -> float:
    """``Acc = (1/N) Σ_n (1/|y*|) Σ_m p_(n,m)``: the mean per-token gold probability of each probe,
    averaged over probes."""
    return sum(sum(p) / len(p) for p in gold_token_probs) / len(gold_token_probs)


def probe_confidence(entropies: Sequence[Sequence[float]]) -> float:
    """``Conf = (1/N) Σ_n exp(-(1/L_n) Σ_l H_(n,l))``."""
    return sum(math.exp(-sum(h) / len(h)) for h in entropies) / len(entropies)


def potential_advantage(
    group_adv: Tensor,
    correct: Tensor,
    potential: Tensor,
    valid: Tensor,
    tau: float,
    kappa: float,
    xi: float,
) -> Tensor:
    """``[N, T]``: ``Â_i f_(i,k) + ξ clip(ΔΦ_(i,k), -1, 1)`` per turn (module docstring); 0 past a
    rollout's turns.

    Args:
        group_adv: ``[N]`` the rollouts' group advantages.
        correct: ``[N]`` bool.
        potential: ``[N, T]`` Φ before each turn.
        valid: ``[N, T]`` bool, the rollouts' own turns.
    """
    phi = potential.to(group_adv.dtype) * valid
    nxt = torch.nn.functional.pad(phi[:, 1:], (0, 1))
    has_next = torch.nn.functional.pad(valid[:, 1:], (0, 1), value=False)
    delta = torch.where(has_next, nxt - phi, torch.zeros_like(phi))
    saturated = torch.cummax((phi >= tau) & valid, dim=1).values
    f = torch.where(saturated & correct.unsqueeze(-1), 1.0 - kappa, 1.0)
    out = group_adv.unsqueeze(-1) * f + xi * delta.clamp(-1.0, 1.0)
    return out * valid


@ADVANTAGES.register("spae", config=SPAEAdvantageConfig)
def spae_advantage(inputs: AdvantageInputs, *, cfg: SPAEAdvantageConfig) -> Tensor:
    """SPAE (partial; module docstring): GRPO's advantage, discounted on over-checking turns of
    correct rollouts, plus each turn's gain in answer potential::

        Φ_(i,k) = Acc · Conf of the gold answer behind the probe before turn k
        ΔΦ_(i,k) = Φ_(i,k+1) - Φ_(i,k)  (0 for the last turn)
        f_(i,k) = 1 - κ if rollout i is correct and max_(p <= k) Φ_(i,p) >= τ, else 1
        A_(i,k) = Â_i f_(i,k) + ξ clip(ΔΦ_(i,k), -1, 1)   on every token generated in turn k

    Returns:
        ``[N, L]`` advantages, 0 on tool responses and padding.
    """
    source = (
        "the training step fills it through the gold_potential input provider, which spae's "
        "config requires (framework.rl.answer_probs)"
    )
    _, phi, valid = turn_table(inputs, "gold_potential", "spae", source)
    group = grpo_advantage(inputs, cfg=cfg)
    correct = inputs.rewards > 0
    values = potential_advantage(group, correct, phi, valid, cfg.tau, cfg.kappa, cfg.xi)
    return turn_token_values(values, inputs)
