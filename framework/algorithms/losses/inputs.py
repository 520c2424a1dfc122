"""What several policy losses read from :class:`~framework.types.PolicyLossInputs`: one advantage
per row, the group index, the approximate KL.
"""

from __future__ import annotations

import torch
from torch import Tensor

from framework.algorithms.stats.aggregation import masked_mean
from framework.types import PolicyLossInputs


def _row_advantage(inputs: PolicyLossInputs) -> Tensor:
    """``[N]`` detached advantage per rollout: ``A_i``, or the mean of its token advantages over
    its generated tokens (``token_mask``) when advantages are ``[N, L]``."""
    adv = inputs.advantages.detach()
    if adv.dim() == 1:
        return adv
    tokens = inputs.token_mask.bool()
    return adv.masked_fill(~tokens, 0.0).sum(-1) / tokens.sum(-1).clamp(min=1)


def _group_index(inputs: PolicyLossInputs, loss: str) -> Tensor:
    if inputs.group_index is None:
        raise ValueError(
            f"[loss.{loss}] got PolicyLossInputs without group_index; expected each rollout's "
            "group, as the loss uses statistics of whole groups. Fix: pass group_index (the "
            "trainer fills it from Trajectory.group)."
        )
    return inputs.group_index.to(inputs.logprobs.device)


def _approx_kl(log_ratio: Tensor, mask: Tensor) -> Tensor:
    """k3 estimate of KL(old || new) over the trained tokens (detached)."""
    with torch.no_grad():
        return masked_mean(log_ratio.exp() - 1.0 - log_ratio, mask)
