"""GSPO: PPO-clip on the sequence-level (length-normalised) ratio."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from framework.algorithms.losses.base import on_policy_ratio_inert
from framework.algorithms.losses.ppo_clip import ClipLossConfig, _clipped_objective, _masked_inputs
from framework.algorithms.stats.aggregation import masked_mean
from framework.config import option
from framework.config.inert import InertRule
from framework.registry.kinds import POLICY_LOSSES
from framework.types import LossOutput, PolicyLossInputs


@dataclass
class GSPOLossConfig(ClipLossConfig):
    #: on policy the sequence ratio is 1 and the gradient is PPO-clip's (gspo_loss)
    screen_inert: ClassVar[InertRule] = on_policy_ratio_inert

    clip_low: float = option(3e-4, "sequence ratio lower bound 1 - x")
    clip_high: float = option(4e-4, "sequence ratio upper bound 1 + x")


@POLICY_LOSSES.register("gspo", config=GSPOLossConfig)
def gspo_loss(inputs: PolicyLossInputs, *, cfg: GSPOLossConfig) -> LossOutput:
    """GSPO: PPO-clip on the sequence ratio ``s_i = exp(mean_t log ρ_{i,t})``.

    Zheng et al. 2025 (arXiv 2507.18071). Implemented token-wise as
    ``s_{i,t} = sg[s_i] · π(y_t) / sg[π(y_t)]``: its value is ``s_i`` on every token, and with
    ``agg=seq_mean_token_mean`` the gradient equals that of the sequence objective
    ``-min(s_i A_i, clip(s_i) A_i)`` averaged over rollouts. On policy (``s_i = ρ_t = 1``, one
    update per rollout batch) no bound is active and the gradient equals PPO-clip's under the same
    aggregation, so a run with ``optim.policy_epochs=1`` trains exactly as ``ppo_clip`` does.

    Args:
        inputs: as :func:`ppo_clip_loss`; advantages should be per rollout.
        cfg: sequence-ratio bounds (3e-4 / 4e-4 in the paper) and aggregation.

    Returns:
        Loss and the same metrics as :func:`ppo_clip_loss` (over tokens), plus ``seq_ratio_mean``.
    """
    mask, lp, old, adv = _masked_inputs(inputs)
    tokens = mask.sum(-1).clamp(min=1)  # [N]
    log_seq_ratio = ((lp - old).sum(-1) / tokens).detach()  # [N] mean_t log ρ
    log_ratio = log_seq_ratio.unsqueeze(-1) + lp - lp.detach()  # [N, L] value log s_i
    out = _clipped_objective(log_ratio.exp(), adv, mask, cfg.clip_low, cfg.clip_high, cfg)
    with torch.no_grad():
        has = mask.any(-1)
        seq_ratio = log_seq_ratio.exp()
        out.metrics["seq_ratio_mean"] = (seq_ratio * has).sum() / has.sum().clamp(min=1)
        token_log_ratio = lp - old
        out.metrics["approx_kl"] = masked_mean(token_log_ratio.exp() - 1.0 - token_log_ratio, mask)
    return out
