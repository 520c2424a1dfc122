"""Policy-loss variants of the group-based RL literature: NSR, ETR, CISPO and DisCO.

Each takes :class:`~framework.types.PolicyLossInputs`, returns a :class:`~framework.types.LossOutput`
to minimise and reduces its per-token terms with its config's ``agg``
(:func:`~framework.algorithms.aggregation.aggregate`), so the trainer's micro-batch weights
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

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.aggregation import aggregate, masked_mean
from framework.algorithms.group import group_max, group_mean, group_sum
from framework.algorithms.losses import (
    ClipLossConfig,
    PolicyLossConfig,
    _clipped_objective,
    _masked_inputs,
    on_policy_ratio_inert,
)
from framework.config import Problem, check, check_choice, check_range
from framework.config.inert import InertRule
from framework.registry.kinds import POLICY_LOSSES
from framework.types import LossOutput, PolicyLossInputs


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


# --------------------------------------------------------------------------- NSR / W-REINFORCE


@dataclass
class NSRLossConfig(ClipLossConfig):
    positive_weight: float = field(
        default=0.0,
        metadata={
            "help": "lambda: weight of positive-advantage tokens; 0 = NSR, 0.1 = the paper's "
            "W-REINFORCE"
        },
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


# --------------------------------------------------------------------------- ETR


@dataclass
class ETRLossConfig(ClipLossConfig):
    needs_groups: ClassVar[bool] = True
    #: on policy (ratio 1) no widened bound acts either: PPO-clip's gradient, summed over
    #: whole-group micro-batches (on_policy_ratio_inert says so)
    screen_inert: ClassVar[InertRule] = on_policy_ratio_inert

    advantage_elasticity: float = field(
        default=0.25,
        metadata={"help": "alpha: the clip range grows by the factor 1 + alpha * tanh(|A|)"},
    )
    variance_elasticity: float = field(
        default=0.25,
        metadata={
            "help": "kappa: the clip range grows by the factor 1 + kappa * 4 p(1-p), p the "
            "group's share of positive advantages"
        },
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.advantage_elasticity, "advantage_elasticity", low=0.0)
        out += check_range(self.variance_elasticity, "variance_elasticity", low=0.0)
        out += super().problems()
        if out:
            return out
        widest = self.clip_low * (1 + self.advantage_elasticity) * (1 + self.variance_elasticity)
        return check(
            widest < 1.0,
            "clip_low",
            self.clip_low,
            f"clip_low * (1 + advantage_elasticity) * (1 + variance_elasticity) < 1 (got "
            f"{widest:.3g}), so the ratio's lower bound stays positive",
            "lower clip_low or the elasticities",
        )


def etr_clip_scale(inputs: PolicyLossInputs, cfg: ETRLossConfig) -> Tensor:
    """``[N, L]`` factor by which ETR widens both clip bounds of every token (>= 1).

    ``(1 + α·tanh|A_{i,t}|) · (1 + κ·4·p̂_g(1 - p̂_g))`` with ``p̂_g`` the share of rollouts of
    rollout ``i``'s group ``g`` whose advantage is positive; every rollout of the group counts,
    dropped (over-budget) ones included. Entries outside the effective mask are 1. The advantages
    are the unweighted ones: rollout correction's ``token_weights`` scale the loss terms, not the
    trust region.
    """
    mask = inputs.effective_mask()
    adv = inputs.token_advantages().detach().masked_fill(~mask, 0.0)
    groups = _group_index(inputs, "etr")
    row_adv = _row_advantage(inputs).to(adv.dtype)
    share = group_mean((row_adv > 0).to(adv.dtype), groups)  # [N] p̂_g
    variance = 4.0 * share * (1.0 - share)  # [N] in [0, 1], 1 at p̂ = 1/2
    micro = 1.0 + cfg.advantage_elasticity * torch.tanh(adv.abs())  # [N, L]
    macro = 1.0 + cfg.variance_elasticity * variance  # [N]
    return (micro * macro.unsqueeze(-1)).masked_fill(~mask, 1.0)


@POLICY_LOSSES.register("etr", config=ETRLossConfig)
def etr_loss(inputs: PolicyLossInputs, *, cfg: ETRLossConfig) -> LossOutput:
    """ETR: PPO-clip with elastic trust regions (Zhang et al. 2026, "ETR: Outcome-Guided Elastic
    Trust Regions for Policy Optimization", https://arxiv.org/abs/2601.03723).

    The paper widens the clip range per sample with the advantage magnitude (micro level) and per
    group with the variance of the group's pass rate, giving more room to questions in the
    "optimal learning zone" (macro level). Its exact functions and constants were not available
    when this was written (METHODS.md marks them loose); the form chosen here::

        ε_{i,t}^low  = ε_low  · e_{i,t},   ε_{i,t}^high = ε_high · e_{i,t}
        e_{i,t} = (1 + α·tanh|A_{i,t}|) · (1 + κ·4·p̂_g(1 - p̂_g))
        loss_t  = -min(ρ_t A_t, clip(ρ_t, 1 - ε_{i,t}^low, 1 + ε_{i,t}^high) A_t)

    * ``p̂_g`` is the share of the group's rollouts with ``A > 0``: for 0/1 rewards and any
      estimator with a group baseline it is exactly the group's pass rate, so ``4 p̂(1 - p̂)`` is the
      Bernoulli outcome variance scaled to [0, 1] (the loss sees advantages, not rewards). For
      graded rewards it is the share above the group baseline.
    * ``tanh`` saturates the advantage term so a rare outcome's large ``|A|`` cannot open the region
      without bound: ``e <= (1 + α)(1 + κ)``.
    * Defaults ``α = κ = 0.25`` (our choice): with ε = 0.2 / 0.28 the widest region is
      [0.69, 1.44]. ``α = κ = 0`` is exactly ``ppo_clip``.
    * Both bounds widen by the same factor, so clip-higher's asymmetry is kept.

    Args:
        inputs: as ``ppo_clip``, plus ``group_index`` (required).
        cfg: base bounds, elasticities and aggregation.

    Returns:
        Loss and the ``ppo_clip`` metrics (clip fractions against each token's own bounds), plus
        ``clip_scale_mean`` (mean widening factor over trained tokens).

    Raises:
        ValueError: ``inputs.group_index`` is None.
    """
    mask, lp, old, adv = _masked_inputs(inputs)
    scale = etr_clip_scale(inputs, cfg).detach()
    log_ratio = lp - old
    out = _clipped_objective(
        log_ratio.exp(), adv, mask, cfg.clip_low * scale, cfg.clip_high * scale, cfg
    )
    out.metrics["approx_kl"] = _approx_kl(log_ratio, mask)
    out.metrics["clip_scale_mean"] = masked_mean(scale, mask)
    return out


# --------------------------------------------------------------------------- CISPO


@dataclass
class CISPOLossConfig(PolicyLossConfig):
    #: on policy the detached weight clip(1) is 1: PPO-clip's gradient (cispo_loss)
    screen_inert: ClassVar[InertRule] = on_policy_ratio_inert

    clip_low: float = field(
        default=1.0,
        metadata={"help": "IS weight lower bound is 1 - clip_low (>= 1: no lower bound, MiniMax)"},
    )
    clip_high: float = field(
        default=0.2, metadata={"help": "IS weight upper bound is 1 + clip_high"}
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.clip_low, "clip_low", low=0.0, low_inclusive=False)
        out += check_range(self.clip_high, "clip_high", low=0.0, low_inclusive=False)
        return out + super().problems()


@POLICY_LOSSES.register("cispo", config=CISPOLossConfig)
def cispo_loss(inputs: PolicyLossInputs, *, cfg: CISPOLossConfig) -> LossOutput:
    """CISPO (MiniMax 2025, MiniMax-M1, https://arxiv.org/abs/2506.13585, eqs. 4-5).

    Clips the importance-sampling weight, not the update::

        loss_t = -sg(clip(ρ_t, 1 - ε_low, 1 + ε_high)) · A_t · log π_θ(y_t)

    The weight carries no gradient, so every trained token keeps its policy gradient
    ``-ŵ_t A_t ∇log π`` (PPO-clip zeroes the tokens whose ratio left the region); on policy
    (``ρ = 1``) the gradient equals PPO-clip's. MiniMax sets ``ε_low`` large (no lower bound) and
    tunes ``ε_high``; the defaults are ``clip_low = 1`` (lower bound 0, which a ratio never goes
    below) and ``clip_high = 0.2`` (verl's CISPO example). The paper normalises by the batch's
    token count (``agg=token_mean``); ``cfg.agg`` decides here. The loss value (log-probabilities
    weighted by advantages) only serves its gradient.

    Returns:
        Loss and ``clip_frac`` (tokens whose weight was truncated), ``clip_frac_low``,
        ``clip_frac_high``, ``ratio_mean``, ``approx_kl``.
    """
    mask, lp, old, adv = _masked_inputs(inputs)
    log_ratio = lp - old
    ratio = log_ratio.detach().exp()
    low, high = 1.0 - cfg.clip_low, 1.0 + cfg.clip_high
    weight = ratio.clamp(low, high)  # detached: sg(clip(ρ))
    per_token = -weight * adv * lp
    loss = aggregate(per_token, mask, cfg.agg, cfg.norm_constant)
    with torch.no_grad():
        below, above = (ratio < low).float(), (ratio > high).float()
        metrics = {
            "clip_frac": masked_mean(below + above, mask),
            "clip_frac_low": masked_mean(below, mask),
            "clip_frac_high": masked_mean(above, mask),
            "ratio_mean": masked_mean(ratio, mask),
        }
    metrics["approx_kl"] = _approx_kl(log_ratio, mask)
    return LossOutput(loss, metrics)


# --------------------------------------------------------------------------- DisCO

DISCO_SCORES = ("log_l", "l_ratio")
DISCO_NEGATIVES = ("softmax", "mean")
DISCO_KL = ("k1", "k3")


@dataclass
class DisCOLossConfig(PolicyLossConfig):
    needs_groups: ClassVar[bool] = True
    zero_advantage_inert: ClassVar[bool] = False  # the KL constraint covers every trained token

    score: str = field(
        default="log_l",
        metadata={
            "help": "log_l: mean token log-prob; l_ratio: mean token ratio pi/pi_old (the "
            "authors run it with tau=1)"
        },
    )
    negatives: str = field(
        default="softmax",
        metadata={"help": "softmax: DisCO (tau-softmax over wrong rollouts); mean: DisCO-b"},
    )
    tau: float = field(default=10.0, metadata={"help": "temperature of the softmax over negatives"})
    delta: float = field(default=1e-4, metadata={"help": "KL budget of the constraint"})
    beta: float = field(default=1e3, metadata={"help": "squared-hinge penalty weight"})
    kl_estimator: str = field(
        default="k1",
        metadata={
            "help": "KL(pi_old || pi) per token: k1 = log pi_old - log pi; k3 = rho - 1 - log rho"
        },
    )

    def problems(self) -> list[Problem]:
        out = check_choice(self.score, "score", DISCO_SCORES)
        out += check_choice(self.negatives, "negatives", DISCO_NEGATIVES)
        out += check_choice(self.kl_estimator, "kl_estimator", DISCO_KL)
        out += check_range(self.tau, "tau", low=0.0, low_inclusive=False)
        out += check_range(self.delta, "delta", low=0.0)
        out += check_range(self.beta, "beta", low=0.0)
        return out + super().problems()


def disco_coefficients(
    scores: Tensor, labels: Tensor, trained: Tensor, groups: Tensor, cfg: DisCOLossConfig
) -> Tensor:
    """``[N]`` DisCO's weight of each rollout's score, detached: the objective's gradient is
    ``sum_i c_i ∇s_i`` within each group.

    Positives (``labels > 0``) get ``1 / n_+``; negatives (``labels < 0``) get ``-w_j`` with
    ``w = softmax_j(s_j / τ)`` over the group's negatives (``negatives=softmax``: the gradient of
    ``τ log mean_j exp(s_j / τ)``) or ``1 / n_-`` (``negatives=mean``). Rollouts without trained
    tokens, with a zero label, or in a group lacking positives or negatives get 0.
    """
    with torch.no_grad():
        dtype = scores.dtype
        pos = trained & (labels > 0)
        neg = trained & (labels < 0)
        n_pos = group_sum(pos.to(dtype), groups)
        n_neg = group_sum(neg.to(dtype), groups)
        valid = (n_pos > 0) & (n_neg > 0)
        if cfg.negatives == "softmax":
            z = torch.where(neg, scores / cfg.tau, torch.full_like(scores, float("-inf")))
            top = group_max(z, groups)
            top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
            e = torch.where(neg, torch.exp(z - top), torch.zeros_like(scores))
            w_neg = e / group_sum(e, groups).clamp(min=torch.finfo(dtype).tiny)
        else:
            w_neg = neg.to(dtype) / n_neg.clamp(min=1)
        c = torch.where(pos, 1.0 / n_pos.clamp(min=1), -w_neg)
        return torch.where(valid & (pos | neg), c, torch.zeros_like(c))


@POLICY_LOSSES.register("disco", config=DisCOLossConfig)
def disco_loss(inputs: PolicyLossInputs, *, cfg: DisCOLossConfig) -> LossOutput:
    """DisCO: discriminative constrained optimisation (Li et al. 2025, "DisCO: Reinforcing Large
    Reasoning Models with Discriminative Constrained Optimization",
    https://arxiv.org/abs/2505.12366).

    Per group (question) ``g`` with correct rollouts ``+`` and wrong ones ``-``, maximise::

        J_g = mean_{i in +} s_i - τ · log mean_{j in -} exp(s_j / τ)        (DisCO, τ = 10)
        J_g = mean_{i in +} s_i - mean_{j in -} s_j                         (DisCO-b, negatives=mean)

    with the score ``s_i = mean_t log π(y_{i,t})`` (``log_l``) or ``mean_t ρ_{i,t}`` (``l_ratio``), no
    clipping, subject to ``KL(π_old || π) <= δ``, enforced by a squared-hinge penalty. Loss::

        loss = -Agg_{i,t}(G_g · c_i · f_{i,t}) + (β/2) · [KL - δ]_+^2

    ``f`` is ``log π`` or ``ρ`` per token, ``c_i`` :func:`disco_coefficients` (detached), ``G_g``
    the number of trained rollouts in ``i``'s group and ``Agg`` the ``cfg.agg`` reduction. With
    ``seq_mean_token_mean`` and groups of equal size its gradient is that of ``-(1/Q) sum_g J_g``
    (``Q`` groups; groups lacking positives or negatives count in ``Q`` with ``J = 0``), as in the
    authors' code; ``token_mean`` weighs every token alike (each rollout's score becomes its
    token sum over the batch's tokens), ``token_sum_norm`` divides token sums by ``N · C``.

    Choices:

    * Positive / negative: the sign of the rollout's advantage (``A > 0`` / ``A < 0``; the mean over
      its generated tokens for ``[N, L]`` advantages). For 0/1 rewards with a group baseline that is
      correct / wrong, as the paper's ``r = 1`` / ``r = 0``. ``A = 0`` rollouts are in neither set.
    * The softmax weights use the paper's sequence-mean score whatever ``agg``.
    * KL: ``Agg`` of the per-token estimate, ``k1 = log π_old - log π`` by default (the authors'
      scripts, ``ppo_kl_type=kl``) or ``k3``. The penalty's gradient ``β [KL - δ]_+ ∇KL`` is the
      authors' code's (``β = 1e3``, ``δ = 1e-4``). It is computed per micro-batch (the authors
      compute it per mini-batch) and is 0 on the first, on-policy epoch (``KL = 0``): it acts only
      with ``optim.policy_epochs > 1``.
    * Needs whole groups (``needs_groups``) and is not skipped at zero advantage: the KL term covers
      every trained token.
    * Rollout correction's ``token_weights`` multiply the discriminative term's per-token
      ``f_{i,t}`` (the policy-gradient part); the softmax weights, labels and KL constraint are
      computed without them.

    Args:
        inputs: log-probabilities, masks, advantages and ``group_index`` (required).
        cfg: score, negatives' weighting, τ, δ, β, KL estimator and aggregation.

    Returns:
        Loss and ``constraint_kl`` (the constraint's KL estimate; ``kl`` is the name of the
        reference-KL term's figure), ``constraint_excess`` (``[KL - δ]_+``),
        ``score_gap`` (mean over groups with both sets of ``mean_+ s - mean_- s``),
        ``valid_group_frac`` (share of groups with trained rollouts that have both),
        ``ratio_mean``, ``approx_kl``.

    Raises:
        ValueError: ``inputs.group_index`` is None.
    """
    mask, lp, old, _ = _masked_inputs(inputs)
    groups = _group_index(inputs, "disco")
    log_ratio = lp - old
    f = lp if cfg.score == "log_l" else log_ratio.exp()  # [N, L] the score's per-token terms
    f = f.masked_fill(~mask, 0.0)
    tokens = mask.sum(-1)  # [N]
    trained = tokens > 0
    scores = (f.detach().sum(-1) / tokens.clamp(min=1)).to(lp.dtype)  # [N] paper's score
    labels = _row_advantage(inputs).to(lp.dtype)
    coef = disco_coefficients(scores, labels, trained, groups, cfg)  # [N]
    size = group_sum(trained.to(lp.dtype), groups)  # [N] G_g
    weight = (size * coef).unsqueeze(-1)  # [N, 1]
    if inputs.token_weights is not None:  # [N, L] rollout correction on the gradient terms
        weight = weight * inputs.token_weights.detach().to(lp.dtype).masked_fill(~mask, 0.0)
    discriminative = aggregate(-weight * f, mask, cfg.agg, cfg.norm_constant)
    k3 = cfg.kl_estimator == "k3"
    kl_tokens = log_ratio.exp() - 1.0 - log_ratio if k3 else -log_ratio  # [N, L]
    kl = aggregate(kl_tokens, mask, cfg.agg, cfg.norm_constant)
    excess = (kl - cfg.delta).clamp(min=0.0)
    loss = discriminative + 0.5 * cfg.beta * excess * excess
    with torch.no_grad():
        metrics = {
            "constraint_kl": kl.detach(),
            "constraint_excess": excess.detach(),
            "ratio_mean": masked_mean(log_ratio.exp(), mask),
            **_group_figures(scores, labels, trained, groups),
        }
    metrics["approx_kl"] = _approx_kl(log_ratio, mask)
    return LossOutput(loss, metrics)


def _group_figures(scores: Tensor, labels: Tensor, trained: Tensor, groups: Tensor) -> dict:
    """``score_gap`` and ``valid_group_frac`` over the groups that have trained rollouts."""
    dtype = scores.dtype
    _, inverse = torch.unique(groups, return_inverse=True)
    k = int(inverse.max()) + 1 if inverse.numel() else 0

    def per_group(values: Tensor) -> Tensor:
        return torch.zeros(k, dtype=dtype, device=scores.device).index_add_(0, inverse, values)

    pos = (trained & (labels > 0)).to(dtype)
    neg = (trained & (labels < 0)).to(dtype)
    n_pos, n_neg, n_trained = per_group(pos), per_group(neg), per_group(trained.to(dtype))
    gap = per_group(scores * pos) / n_pos.clamp(min=1) - per_group(scores * neg) / n_neg.clamp(
        min=1
    )
    valid = (n_pos > 0) & (n_neg > 0)
    present = n_trained > 0
    zero = scores.new_zeros(())
    return {
        "score_gap": gap[valid].mean() if bool(valid.any()) else zero,
        "valid_group_frac": valid.to(dtype).sum() / present.to(dtype).sum().clamp(min=1),
    }
