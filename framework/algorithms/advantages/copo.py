"""COPO: Consistency-Aware Policy Optimization (arXiv 2508.04138), from the authors' code.

GRPO's advantage is 0 for every rollout of a group whose rollouts all agree (all right or all
wrong). COPO adds a *global* advantage per question, its group's mean reward standardised over the
batch's questions, and mixes it with the group-relative (local) advantage through a sigmoid gate on
the entropy of the group's final answers.

Source: github.com/hijih/copo-code (README: ``global_flg="soft-with-zero"`` "represents our COPO
method"; ``verl/run_copo.sh``). The paper's method section could not be read from here, so no
equation numbers; the README names the gate's two constants γ (code ``k``) and ρ (code ``b``).
What the code computes, per rollout ``i`` of question ``q`` with ``G_q`` rollouts (binary reward):

- local (``compute_grpo_outcome_advantage_with_global``, verl/trainer/ppo/core_algos.py): GRPO with
  the Bessel-corrected group std, ``A^L_i = (r_i - mean_q r) / (std_q r + eps)``, ``eps = 1e-6``;
  a group of one gets verl's mean 0, std 1: ``A^L_i = r_i / (1 + eps)``;
- global (``compute_score_global`` and the same function): ``R_q = mean_q r`` (times
  ``1 - λ_q H_q`` with ``λ_q = (1 - 1/G_q) / log2 G_q`` when ``reward_coef_flg`` is on; it is off
  in every released script, here ``consistency_coef``), then over the batch's questions, each
  counted once, with the Bessel-corrected std: ``A^G_q = (R_q - mean R) / (std R + eps)``;
- entropy (``compute_score_global``): ``H_q = -Σ_a p_a log2 p_a`` over the distinct final answers
  of the group, in bits, not normalised;
- gate (``compute_policy_loss_with_global``, ``soft-with-zero``): weight on the local term
  ``w_i = sigmoid(γ (H_q - ρ)) · [r_i != 0]``, so a rollout with reward 0 learns from the global
  term alone; γ = 5, ρ = 1 in ``run_copo.sh`` (the 3B script: γ = 20, ρ = 1.5).

The code mixes two PPO-clip losses, ``w_i L(A^L_i) + (1 - w_i) L(A^G_q)``; an advantage estimator
returns one advantage, so here ``A_i = w_i A^L_i + (1 - w_i) A^G_q`` goes into the shared loss.
The two agree exactly (loss and gradient) while the ratio is inside the clip range, e.g. on the
single on-policy update per batch of the shipped arm, and whenever ``A^L_i`` and ``A^G_q`` have the
same sign; they differ where clipping is active on terms of opposite sign (and verl's dual clip is
not ours). That, and the following choices of ours, make the component "partial":

- the answers are the ``answers`` input (normalised as exact match normalises them; ``""`` for a
  rollout without one), not the code's math-answer extraction;
- a batch of one question gets ``A^G = 0`` (the code's ``torch.std`` of one value is NaN), a group
  of one gets ``λ_q = 0`` (the code divides by ``log2 1``), and the entropy has no ``+1e-8``
  inside the logarithm (a difference of order 1e-8 bits).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.stats.group import dense_index, group_center, group_std
from framework.config import ComponentConfig, Problem, check_range, option
from framework.registry import ADVANTAGES
from framework.types import AdvantageInputs


@dataclass
class COPOAdvantageConfig(ComponentConfig):
    requires: ClassVar[tuple[str, ...]] = ("answers",)
    paper: ClassVar[str] = "COPO: Consistency-Aware Policy Optimization, arXiv 2508.04138"
    fidelity: ClassVar[str] = "partial"

    gamma: float = option(5.0, "gate steepness γ (code k): w = sigmoid(γ (H - ρ)); run_copo.sh: 5")
    rho: float = option(1.0, "gate threshold ρ (code b), in bits of answer entropy; run_copo.sh: 1")
    consistency_coef: bool = option(
        False, "scale the global reward by 1 - λ H (code reward_coef_flg; off in its scripts)"
    )
    epsilon: float = option(1e-6, "added to each std before dividing")

    def problems(self) -> list[Problem]:
        out = check_range(self.epsilon, "epsilon", low=0.0, fix="use a small positive epsilon")
        out += check_range(self.gamma, "gamma", low=0.0, fix="use a non-negative steepness")
        return out


def _entropy_bits(answers: Sequence[str], inv: Tensor, k: int) -> Tensor:
    """``[K]``: per group ``-Σ_a p_a log2 p_a`` over its distinct answers."""
    by_group: list[list[str]] = [[] for _ in range(k)]
    for g, a in zip(inv.tolist(), answers, strict=True):
        by_group[g].append(a)
    per_group = []
    for members in by_group:
        n = len(members)
        h = -sum(c / n * math.log2(c / n) for c in Counter(members).values())
        per_group.append(h + 0.0)  # a unanimous group's -0.0 as 0.0
    return torch.tensor(per_group, dtype=torch.get_default_dtype())


def answer_entropy(answers: Sequence[str], group_index: Tensor) -> Tensor:
    """``[N]``: the entropy in bits of each rollout's group's final answers (``-Σ p log2 p`` over
    the distinct answers; 0 for a unanimous group or a group of one)."""
    inv, k = dense_index(group_index)
    return _entropy_bits(answers, inv, k)[inv]


def consistency_advantage(
    rewards: Tensor,
    group_index: Tensor,
    answers: Sequence[str],
    *,
    gamma: float = 5.0,
    rho: float = 1.0,
    consistency_coef: bool = False,
    epsilon: float = 1e-6,
) -> Tensor:
    """COPO's ``A_i = w_i A^L_i + (1 - w_i) A^G_q`` (module docstring).

    Args:
        rewards: ``[N]`` float.
        group_index: ``[N]`` the rollouts' questions.
        answers: per rollout its normalised final answer (``""`` for none).
        gamma: the gate's steepness γ.
        rho: the gate's threshold ρ, in bits.
        consistency_coef: scale each question's global reward by ``1 - λ_q H_q``.
        epsilon: added to the group std and to the batch std.

    Returns:
        ``[N]``.
    """
    r = rewards if rewards.is_floating_point() else rewards.to(torch.get_default_dtype())
    inv, k = dense_index(group_index)
    size = torch.bincount(inv, minlength=k).to(r)  # [K]
    n = size[inv]  # [N]
    h_q = _entropy_bits(answers, inv, k).to(r)  # [K] bits

    # local: GRPO, Bessel-corrected std; a group of one keeps r / (1 + eps) (verl: mean 0, std 1)
    centered = group_center(r, group_index)
    std = group_std(r, group_index, unbiased=True)
    local = torch.where(std > 0, centered / (std + epsilon), torch.zeros_like(r))
    local = torch.where(n > 1, local, r / (1.0 + epsilon))

    # global: the group's mean reward, standardised over the batch's questions (Bessel-corrected)
    glob_r = torch.zeros(k, dtype=r.dtype, device=r.device).index_add_(0, inv, r) / size  # [K]
    if consistency_coef:
        # λ_q = (1 - 1/G) / log2 G; 0 for a group of one (the clamp only keeps log2 1 off the divisor)
        lam = torch.where(
            size > 1, (1 - 1 / size) / torch.log2(size).clamp(min=1.0), torch.zeros_like(size)
        )
        glob_r = glob_r * (1 - lam * h_q)
    # one question, or all alike: no spread, A^G = 0 (the code: NaN for one question)
    spread = glob_r.std(unbiased=True) if k > 1 else torch.zeros((), dtype=r.dtype)
    glob = (glob_r - glob_r.mean()) / (spread + epsilon) if spread > 0 else torch.zeros_like(glob_r)

    # gate: sigmoid(γ (H - ρ)) on the local term, and only for rollouts with a non-zero reward
    w = torch.sigmoid(gamma * (h_q[inv] - rho)) * (r != 0).to(r)
    return w * local + (1 - w) * glob[inv]


@ADVANTAGES.register("copo", config=COPOAdvantageConfig)
def copo_advantage(inputs: AdvantageInputs, *, cfg: COPOAdvantageConfig) -> Tensor:
    """COPO (the authors' code, ``soft-with-zero``; module docstring)::

        A^L_i = (r_i - mean_q r) / (std_q r + eps)        Bessel-corrected std
        A^G_q = (R_q - mean_batch R) / (std_batch R + eps)  R_q = mean_q r, Bessel-corrected
        H_q   = -Σ_a p_a log2 p_a                          over the group's final answers
        w_i   = sigmoid(γ (H_q - ρ)) · [r_i != 0]
        A_i   = w_i A^L_i + (1 - w_i) A^G_q

    Args:
        inputs: ``rewards [N]``, ``group_index [N]``, ``extras["answers"]`` (the ``answers`` input:
            per rollout its normalised final answer).
        cfg: the estimator's config.

    Returns:
        ``[N]`` advantages.
    """
    return consistency_advantage(
        inputs.rewards,
        inputs.group_index,
        inputs.extras["answers"],
        gamma=cfg.gamma,
        rho=cfg.rho,
        consistency_coef=cfg.consistency_coef,
        epsilon=cfg.epsilon,
    )
