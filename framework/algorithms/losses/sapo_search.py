"""SAPO for search agents: PPO-clip plus a term that holds up drifting tokens of good rollouts.

Acts off-policy only, as LLDS (:mod:`framework.algorithms.losses.llds` says why).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.losses.ppo_clip import (
    ClipLossConfig,
    _masked_inputs,
    ppo_clip_loss,
    with_penalty_term,
)
from framework.config import Problem, check_range, option
from framework.registry.kinds import POLICY_LOSSES
from framework.types import LossOutput, PolicyLossInputs


@dataclass
class SAPOSearchLossConfig(ClipLossConfig):
    paper: ClassVar[str] = (
        "SAPO: Search Agent Policy Optimization (Improving Search Agent with One Line of Code), "
        "arXiv 2603.10069"
    )
    fidelity: ClassVar[str] = "exact"
    #: with threshold <= 1 (the paper's 1.0) no token is held at ratio 1; above 1 every positive
    #: token is, and the term's value is 0 there but its gradient is not (see sapo_search_loss)
    acts_off_policy_only: ClassVar[bool] = True

    coef: float = option(0.1, "gamma, the drift penalty's weight (paper: 0.1)")
    threshold: float = option(
        1.0, "tau: a token of a positive rollout is held when its ratio < tau (paper: 1.0)"
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.coef, "coef", low=0.0)
        out += check_range(
            self.threshold,
            "threshold",
            low=0.0,
            low_inclusive=False,
            fix="set threshold above 0, e.g. 1.0 (the paper's tau)",
        )
        return out + super().problems()


def drift_mask(log_ratio: Tensor, advantages: Tensor, mask: Tensor, threshold: float) -> Tensor:
    """``[N, L]`` bool: SAPO's condition ``1[ρ_t < τ, A_t > 0]`` (Eq. 11) on the trained tokens,
    ``ρ_t = exp(log_ratio)`` taken without gradient (the indicator's own derivative, the paper's
    Dirac term of Eq. 12, is 0 almost everywhere)."""
    ratio = log_ratio.detach().exp()
    return mask.bool() & (advantages > 0) & (ratio < threshold)


def drift_penalty(log_ratio: Tensor, held: Tensor) -> Tensor:
    """``[N, L]``: ``-log ρ_t`` (the log-ratio estimate of Eq. 10, negated: the loss minimises what
    the objective maximises) where ``held`` (:func:`drift_mask`), 0 elsewhere. Its gradient is
    ``-∇ log π_θ`` on the held tokens (Eq. 12): it raises their likelihood."""
    return torch.where(held, -log_ratio, torch.zeros_like(log_ratio))


@POLICY_LOSSES.register("sapo_search", config=SAPOSearchLossConfig)
def sapo_search_loss(inputs: PolicyLossInputs, *, cfg: SAPOSearchLossConfig) -> LossOutput:
    """PPO-clip plus SAPO's conditional drift penalty (paper Eq. 9-11: the log-ratio KL estimate,
    on tokens of positive-advantage rollouts whose ratio fell below tau; not Qwen's Soft Adaptive
    Policy Optimization of the same name)::

        ρ_t = π_θ / π_old;  m_t = 1[ρ_t < tau] 1[A_t > 0]
        L = L_clip - gamma * agg_t(m_t log ρ_t)   (gamma 0.1, tau 1.0)

    Paper: "Improving Search Agent with One Line of Code" (arXiv 2603.10069; read in the authors'
    PDF, github.com/swordlidev/SAPO, Figs/SAPO_nju.pdf, whose abstract is arXiv v1's word for word
    but whose author list differs: the equation numbers are that PDF's). Eq. 9 adds
    ``gamma KL[π_θ || π_old]`` to GRPO's clipped objective inside its ``1/G sum_i 1/|o_i| sum_t``; Eq. 10 estimates the KL by
    ``log ρ_t``; Eq. 11 conditions it on ``ρ_t < tau`` and ``A_t > 0``; Eq. 12-13 give the term's
    gradient ``gamma m_t ∇ log π_θ`` (plus a Dirac term at ``ρ_t = tau``). Section 4.1 and Table 4:
    gamma 0.1, tau 1.0 (tau in {0.6, 0.8, 1.0, 1.2} was tried, 1.0 best).

    Followed as written: the strict ``ρ_t < tau`` and ``A_t > 0`` of Eq. 11 (a rollout with
    advantage 0 adds nothing) and Eq. 9's average over every trained token. Choices ours: (1) Eq. 11
    over the paper's appendix listing and the authors' code, which hold ``ρ_t <= tau`` and
    ``A >= 0`` and take the term's token mean over the rollouts with ``A >= 0`` alone; (2) the term
    is reduced with the loss's ``agg`` (the default ``seq_mean_token_mean`` is Eq. 9's); (3) the
    condition reads the advantages after rollout-correction weights (a token weighted 0 is not
    held), the penalty itself is not weighted; (4) the ratio enters the condition without gradient
    (the Dirac term is dropped).

    With tau <= 1 the term is exactly 0 (value and gradient) where the ratio is exactly 1, so on a
    batch's first pass; its gradient does not fade as ``ρ_t`` nears tau from below (it is
    ``-gamma ∇ log π_θ / normaliser`` whatever the drift), so old log-probs recomputed with
    numerical noise switch it on at full strength. With tau > 1 it acts on the first pass too.

    Returns:
        Loss and PPO-clip's metrics, plus ``sapo_term`` (the aggregated ``-m_t log ρ_t`` before
        gamma) and ``sapo_token_frac`` (share of trained tokens held by ``m_t``).
    """
    out = ppo_clip_loss(inputs, cfg=cfg)
    mask, lp, old, adv = _masked_inputs(inputs)
    log_ratio = lp - old
    held = drift_mask(log_ratio, adv, mask, cfg.threshold)
    return with_penalty_term(out, drift_penalty(log_ratio, held), held, mask, cfg, cfg.coef, "sapo")
