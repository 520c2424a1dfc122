"""D³S's token level (``loss=d3s``): keep the top share of tokens by ``|A_t| H_t``.

The method, its schedule and its choices: :mod:`framework.algorithms.advantages.d3s`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.advantages.d3s import D3SScheduleConfig, relaxed
from framework.algorithms.losses.ppo_clip import (
    ClipLossConfig,
    _clipped_objective,
    _masked_inputs,
    require_entropy,
)
from framework.config import Problem, check_range, option
from framework.registry.kinds import POLICY_LOSSES
from framework.types import LossOutput, PolicyLossInputs


@dataclass
class D3SLossConfig(D3SScheduleConfig, ClipLossConfig):
    needs_entropy: ClassVar[bool] = True

    token_share: float = option(0.5, "rho, share of tokens kept at the start (choice)")

    def problems(self) -> list[Problem]:
        out = check_range(self.token_share, "token_share", low=0.0, high=1.0, low_inclusive=False)
        return out + super().problems()


def top_tokens(scores: Tensor, mask: Tensor, share: float) -> Tensor:
    """``[N, L]`` bool: the ``ceil(share T)`` masked tokens with the largest ``scores`` (``T`` the
    masked tokens; ties by position)."""
    m = mask.bool()
    t = int(m.sum())
    keep = torch.zeros_like(m)
    if t == 0:
        return keep
    n = max(1, math.ceil(share * t))
    flat = scores.masked_fill(~m, float("-inf")).flatten()
    keep.view(-1)[flat.topk(n).indices] = True
    return keep & m


@POLICY_LOSSES.register("d3s", config=D3SLossConfig)
def d3s_loss(inputs: PolicyLossInputs, *, cfg: D3SLossConfig) -> LossOutput:
    """D3S's token level (module docstring): PPO-clip on the top ``ρ`` share of trained tokens by
    ``|A_t| H_t``, the others adding 0 (and still counting in the normaliser)::

        ρ' = token_share + (1 - token_share) min(progress / relax_until, 1)
        per token: -min(ρ A, clip(ρ) A) on the kept tokens, 0 elsewhere

    Raises:
        ValueError: the inputs carry no entropy (the trainer fills it: ``needs_entropy``).
    """
    entropy = require_entropy(inputs, "d3s")
    mask, lp, old, adv = _masked_inputs(inputs)
    share = relaxed(cfg.token_share, float(inputs.extras["training_progress"]), cfg.relax_until)
    # ranked by the advantage itself: the rollout-correction weights folded into ``adv`` scale
    # the kept tokens' terms, they do not choose them
    raw = inputs.token_advantages().detach().to(adv.dtype)
    kept = top_tokens(raw.abs() * entropy.to(adv.dtype), mask, share)
    out = _clipped_objective((lp - old).exp(), adv * kept, mask, cfg.clip_low, cfg.clip_high, cfg)
    out.metrics["d3s_token_share"] = kept.sum() / mask.sum().clamp(min=1)
    return out
