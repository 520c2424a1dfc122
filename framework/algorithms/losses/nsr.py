"""NSR: PPO-clip on the negative-advantage tokens only, the first of four policy-loss variants of
the group-based RL literature (NSR, ETR, CISPO and DisCO, each in its own module).

Each takes :class:`~framework.types.PolicyLossInputs`, returns a :class:`~framework.types.LossOutput`
to minimise and reduces its per-token terms with its config's ``agg``
(:func:`~framework.algorithms.stats.aggregation.aggregate`), so the trainer's micro-batch weights
reproduce the full-batch loss. Tokens outside the effective mask (tool responses, padding, dropped
rollouts) neither change the loss nor receive gradient.

* ``nsr``: PPO-clip on the negative-advantage tokens only; ``positive_weight`` > 0 is W-REINFORCE.
* ``etr``: PPO-clip whose clip range widens with ``|A|`` and with the group's outcome variance.
* ``cispo``: the clipped importance weight, stop-gradient, times ``A * log π`` (every token keeps
  its gradient).
* ``disco``: a discriminative objective per group (correct vs. wrong rollouts) with a
  squared-hinge KL constraint instead of clipping.

``etr`` and ``disco`` read ``PolicyLossInputs.group_index`` (their configs set ``needs_groups``,
so the trainer keeps every group in one micro-batch).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from framework.algorithms.losses.inputs import _approx_kl
from framework.algorithms.losses.ppo_clip import ClipLossConfig, _clipped_objective, _masked_inputs
from framework.algorithms.stats.aggregation import masked_mean
from framework.config import Problem, check_range, option
from framework.registry.kinds import POLICY_LOSSES
from framework.types import LossOutput, PolicyLossInputs


@dataclass
class NSRLossConfig(ClipLossConfig):
    positive_weight: float = option(
        0.0, "lambda: weight of positive-advantage tokens; 0 = NSR, 0.1 = the paper's W-REINFORCE"
    )

    def problems(self) -> list[Problem]:
        out = check_range(
            self.positive_weight,
            "positive_weight",
            low=0.0,
            high=1.0,
            fix="0 trains on negative samples only (NSR); the paper's W-REINFORCE uses 0.1",
        )
        return out + super().problems()


@POLICY_LOSSES.register("nsr", config=NSRLossConfig)
def nsr_loss(inputs: PolicyLossInputs, *, cfg: NSRLossConfig) -> LossOutput:
    """Negative-sample reinforcement (Zhu et al. 2025, "The Surprising Effectiveness of Negative
    Reinforcement in LLM Reasoning", https://arxiv.org/abs/2506.01347).

    The paper splits the RLVR objective into positive and negative sample reinforcement,
    ``L_RLVR = L_PSR + L_NSR`` with ``L_PSR = -E_x[sum_{y: r=+1} π(y|x)]`` and
    ``L_NSR = +E_x[sum_{y: r=-1} π(y|x)]``, and trains on ``L_NSR`` alone; W-REINFORCE is
    ``λ·L_PSR + L_NSR`` with ``λ = 0.1``. As in the authors' code, the surrogate is PPO-clip; per
    token::

        loss_t = -w_t · min(ρ_t A_t, clip(ρ_t, 1 - ε_low, 1 + ε_high) A_t)
        w_t = 1 if A_t < 0,  λ (positive_weight) if A_t > 0

    so with ``λ = 0`` tokens of rollouts with ``A >= 0`` contribute nothing (value and gradient).
    The sign is per token for ``[N, L]`` advantages, per rollout for ``[N]``. Only ``ε_low``
    matters for pure NSR (the upper bound never binds when ``A < 0``).

    Choices and differences from the paper:

    * Advantages are the configured estimator's. The paper's are the raw ±1 rewards (REINFORCE,
      no baseline), so every wrong rollout has ``A = -1``, all-wrong groups included; with a group
      baseline (``grpo``, ``rloo``, ...) all-wrong groups get ``A = 0`` and drop out.
    * Aggregation is ``cfg.agg`` over every trained token: positive rollouts' tokens stay in the
      denominator with a zero term (the trainer's micro-batch weights count every trained token).
      The authors' NSR run trains on the wrong rollouts only, so their token mean runs over the
      negative tokens: with ``agg=token_mean`` their loss is this one divided by the share of
      negative tokens (a batch-level step-size factor). For W-REINFORCE both are the token mean over
      all tokens.

    Returns:
        Loss and ``clip_frac``, ``clip_frac_low``, ``clip_frac_high``, ``ratio_mean``,
        ``approx_kl`` (as ``ppo_clip``) and ``negative_token_frac`` (share of trained tokens with
        ``A < 0``).
    """
    mask, lp, old, adv = _masked_inputs(inputs)
    weight = torch.where(adv > 0, torch.full_like(adv, cfg.positive_weight), torch.ones_like(adv))
    log_ratio = lp - old
    out = _clipped_objective(log_ratio.exp(), adv * weight, mask, cfg.clip_low, cfg.clip_high, cfg)
    out.metrics["approx_kl"] = _approx_kl(log_ratio, mask)
    out.metrics["negative_token_frac"] = masked_mean((adv < 0).float(), mask)
    return out
