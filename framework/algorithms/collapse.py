"""Collapse fixes for search agents: PPO-clip plus a term that holds up the likelihood of the
tokens of good rollouts once it starts to fall.

Both terms compare the current log-probabilities with the behaviour policy's, so both are exactly
0 on the first, on-policy pass over a batch (the ratio is 1): they act from the second optimisation
pass on (``optim.policy_epochs >= 2``; their configs say so with ``acts_off_policy_only``, and the
train config refuses one pass). Each term is reduced with the loss's own aggregation, so
micro-batching stays exact (with ``agg=token_mean``, the papers' token mean).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.aggregation import aggregate, masked_mean
from framework.algorithms.losses import ClipLossConfig, _masked_inputs, ppo_clip_loss
from framework.config import Problem, check_choice, check_range
from framework.registry.kinds import POLICY_LOSSES
from framework.types import LossOutput, PolicyLossInputs

#: LLDS's gates: one per action (maximal run of trained tokens: a model turn), or one per response
LLDS_GATES = ("action", "response")


@dataclass
class LLDSLossConfig(ClipLossConfig):
    paper: ClassVar[str] = (
        "LLDS: Lazy Likelihood-Displacement Stabilization (GRPO collapse in Search-R1), "
        "arXiv 2512.04220"
    )
    fidelity: ClassVar[str] = "exact"
    acts_off_policy_only: ClassVar[bool] = True
    #: a rollout with advantage 0 is in the preserving set (A >= 0): it cannot be skipped
    zero_advantage_inert: ClassVar[bool] = False

    coef: float = field(default=0.2, metadata={"help": "lambda, the term's weight (paper: 0.2)"})
    gate: str = field(
        default="action",
        metadata={"help": f"one of {LLDS_GATES}: the paper's A-gate (per turn) or R-gate"},
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.coef, "coef", low=0.0)
        return out + check_choice(self.gate, "gate", LLDS_GATES) + super().problems()


def action_index(mask: Tensor) -> Tensor:
    """``[N, L]`` long: each trained token's action within its row (1, 2, ...: maximal runs of
    trained tokens, so each model turn between tool responses), 0 off the mask."""
    m = mask.bool()
    starts = m & ~torch.nn.functional.pad(m[:, :-1], (1, 0), value=False)
    return torch.cumsum(starts.long(), dim=1) * m.long()


def llds_penalty(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, gate: str = "action"
) -> Tensor:
    """``[N, L]``: ``g_a(t) max(0, d_t)`` with ``d_t = old_t - logp_t`` on the tokens of rollouts
    whose advantage is ``>= 0``, where the gate ``g_a`` is on when the token's action (or, with
    ``gate=response``, its whole response) lost likelihood in sum; 0 elsewhere.

    Args:
        advantages: ``[N, L]`` per token (a rollout's advantage broadcast).
    """
    m = mask.bool()
    d = (old_logprobs.detach() - logprobs).masked_fill(~m, 0.0)
    index = action_index(m) if gate == "action" else m.long()
    sums = torch.zeros(d.shape[0], int(index.max()) + 1, dtype=d.dtype, device=d.device)
    sums.scatter_add_(1, index, d.detach())
    on = torch.gather(sums, 1, index) > 0
    keep = on & m & (advantages >= 0)
    return torch.where(keep, d.clamp(min=0.0), torch.zeros_like(d))


@POLICY_LOSSES.register("llds", config=LLDSLossConfig)
def llds_loss(inputs: PolicyLossInputs, *, cfg: LLDSLossConfig) -> LossOutput:
    """PPO-clip plus LLDS's likelihood-displacement term (authors' code, the A-gate)::

        d_t = logp_old_t - logp_t
        g_a = 1[sum over action a of d_t > 0], for rollouts with A >= 0 (0 for the others)
        L = L_clip + lambda * agg_t(g_a(t) max(0, d_t))   over every trained token

    Returns:
        Loss and PPO-clip's metrics, plus ``llds_term`` (the aggregated term before lambda) and
        ``llds_token_frac`` (share of trained tokens penalised).
    """
    out = ppo_clip_loss(inputs, cfg=cfg)
    mask, lp, old, adv = _masked_inputs(inputs)
    penalty = llds_penalty(lp, old, adv, mask, cfg.gate)
    term = aggregate(penalty, mask, cfg.agg, cfg.norm_constant)
    with torch.no_grad():
        out.metrics["llds_term"] = term.detach()
        out.metrics["llds_token_frac"] = masked_mean((penalty > 0).float(), mask)
    return LossOutput(out.loss + cfg.coef * term, out.metrics)


@dataclass
class SAPOSearchLossConfig(ClipLossConfig):
    paper: ClassVar[str] = (
        "SAPO: Search Agent Policy Optimization (importance-sampling distribution drift), "
        "arXiv 2603.10069"
    )
    fidelity: ClassVar[str] = "reconstructed"
    acts_off_policy_only: ClassVar[bool] = True

    coef: float = field(default=0.1, metadata={"help": "beta, the KL term's weight (choice)"})
    drop: float = field(
        default=0.2,
        metadata={"help": "a token is held when its ratio is below 1 - drop (choice)"},
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.coef, "coef", low=0.0)
        out += check_range(self.drop, "drop", low=0.0, high=1.0, low_inclusive=False)
        return out + super().problems()


def drift_penalty(log_ratio: Tensor, advantages: Tensor, mask: Tensor, drop: float) -> Tensor:
    """``[N, L]``: the k3 estimate ``ρ - 1 - log ρ`` on tokens of positive-advantage rollouts whose
    ratio ``ρ`` fell below ``1 - drop``; 0 elsewhere."""
    ratio = log_ratio.exp()
    held = mask.bool() & (advantages > 0) & (ratio.detach() < 1.0 - drop)
    k3 = ratio - 1.0 - log_ratio
    return torch.where(held, k3, torch.zeros_like(k3))


@POLICY_LOSSES.register("sapo_search", config=SAPOSearchLossConfig)
def sapo_search_loss(inputs: PolicyLossInputs, *, cfg: SAPOSearchLossConfig) -> LossOutput:
    """PPO-clip plus SAPO's masked KL term (reconstructed from the abstract: the mask, the k3
    estimator, beta and the threshold are our choices; not Qwen's Soft Adaptive Policy
    Optimization of the same name)::

        m_t = 1[A > 0] 1[ρ_t < 1 - drop]
        L = L_clip + beta * agg_t(m_t (ρ_t - 1 - log ρ_t))

    Returns:
        Loss and PPO-clip's metrics, plus ``sapo_term`` and ``sapo_token_frac`` (share of
        trained tokens held).
    """
    out = ppo_clip_loss(inputs, cfg=cfg)
    mask, lp, old, adv = _masked_inputs(inputs)
    penalty = drift_penalty(lp - old, adv, mask, cfg.drop)
    term = aggregate(penalty, mask, cfg.agg, cfg.norm_constant)
    with torch.no_grad():
        out.metrics["sapo_term"] = term.detach()
        out.metrics["sapo_token_frac"] = masked_mean((penalty > 0).float(), mask)
    return LossOutput(out.loss + cfg.coef * term, out.metrics)
