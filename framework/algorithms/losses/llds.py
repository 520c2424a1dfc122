"""Collapse fixes for search agents: PPO-clip plus a term that holds up the likelihood of the
tokens of good rollouts once it starts to fall.

Both terms compare the current log-probabilities with the behaviour policy's, so both are exactly
0 on the first, on-policy pass over a batch (the ratio is exactly 1; SAPO's with its threshold at
most 1, the paper's setting): they act from the second optimisation pass on
(``optim.policy_epochs >= 2``; their configs say so with ``acts_off_policy_only``, and the train
config refuses one pass). Each term is reduced with the loss's own aggregation, so micro-batching
stays exact. ``algorithm=llds`` sets ``loss.agg=token_mean``, the token mean over the trained tokens
of the authors' code (``verl_F.masked_mean`` of both the clip loss and the term), not the
framework's default ``seq_mean_token_mean``.
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
from framework.config import Problem, check_choice, check_range, option
from framework.registry.kinds import POLICY_LOSSES
from framework.types import LossOutput, PolicyLossInputs

#: LLDS's gates: one per action (maximal run of trained tokens with A_t >= 0: a model turn of a
#: rollout with A >= 0), or one per response
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

    coef: float = option(0.2, "lambda, the term's weight (paper: 0.2)")
    gate: str = option("action", f"one of {LLDS_GATES}: the paper's A-gate (per turn) or R-gate")

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
    """``[N, L]``: ``g_a(t) max(0, d_t)`` with ``d_t = old_t - logp_t`` on the trained tokens whose
    advantage is ``>= 0``, where the gate ``g_a`` is on when the token's run (or, with
    ``gate=response``, all of its row's such tokens) lost likelihood in sum; 0 elsewhere.

    As in the authors' code (``chunk_sums_vectorized`` over ``response_mask *
    (advantages >= 0)`` in ``dp_actor.py``), a run is a maximal stretch of trained tokens with
    ``A_t >= 0``, and the sums read those tokens only: with a rollout's advantage broadcast these
    are its actions (model turns) when ``A >= 0`` and nothing when ``A < 0``, but per-token
    advantages that change sign inside an action split it, and its ``A_t < 0`` tokens neither
    count in a gate nor are penalised. ``d = [0.2, -0.3, 0.5]``, ``A = [1, 1, -1]`` in one action:
    the run is the first two tokens, sum -0.1, gate off, so 0 everywhere (gating the whole action,
    sum 0.4, would penalise the first token: ``[0.2, 0, 0]``). The R-gate likewise sums ``d`` over
    the row's ``A_t >= 0`` tokens.

    Args:
        advantages: ``[N, L]`` per token (a rollout's advantage broadcast, or per-token ones).
    """
    m = mask.bool()
    d = (old_logprobs.detach() - logprobs).masked_fill(~m, 0.0)
    preserving = m & (advantages >= 0)
    index = action_index(preserving) if gate == "action" else preserving.long()
    sums = torch.zeros(d.shape[0], int(index.max()) + 1, dtype=d.dtype, device=d.device)
    sums.scatter_add_(1, index, d.detach())
    on = torch.gather(sums, 1, index) > 0
    keep = on & preserving
    return torch.where(keep, d.clamp(min=0.0), torch.zeros_like(d))


@POLICY_LOSSES.register("llds", config=LLDSLossConfig)
def llds_loss(inputs: PolicyLossInputs, *, cfg: LLDSLossConfig) -> LossOutput:
    """PPO-clip plus LLDS's likelihood-displacement term (authors' code, the A-gate)::

        d_t = logp_old_t - logp_t
        a = a maximal run of trained tokens with A_t >= 0 (an action of a rollout with A >= 0)
        g_a = 1[sum over a of d_t > 0]; tokens with A_t < 0 are in no run (g 0)
        L = L_clip + lambda * agg_t(g_a(t) max(0, d_t))   over every trained token

    Returns:
        Loss and PPO-clip's metrics, plus ``llds_term`` (the aggregated term before lambda) and
        ``llds_token_frac`` (share of trained tokens penalised).
    """
    out = ppo_clip_loss(inputs, cfg=cfg)
    mask, lp, old, adv = _masked_inputs(inputs)
    penalty = llds_penalty(lp, old, adv, mask, cfg.gate)
    return with_penalty_term(out, penalty, penalty > 0, mask, cfg, cfg.coef, "llds")
