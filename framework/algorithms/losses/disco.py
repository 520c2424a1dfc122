"""DisCO: a discriminative objective per group with a squared-hinge KL constraint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.losses.base import PolicyLossConfig
from framework.algorithms.losses.inputs import _approx_kl, _group_index, _row_advantage
from framework.algorithms.losses.ppo_clip import _masked_inputs
from framework.algorithms.stats.aggregation import aggregate, masked_mean
from framework.algorithms.stats.group import group_max, group_sum
from framework.config import Problem, check_choice, check_range, option
from framework.registry.kinds import POLICY_LOSSES
from framework.types import LossOutput, PolicyLossInputs

DISCO_SCORES = ("log_l", "l_ratio")


DISCO_NEGATIVES = ("softmax", "mean")


DISCO_KL = ("k1", "k3")


@dataclass
class DisCOLossConfig(PolicyLossConfig):
    needs_groups: ClassVar[bool] = True
    zero_advantage_inert: ClassVar[bool] = False  # the KL constraint covers every trained token

    score: str = option(
        "log_l",
        "log_l: mean token log-prob; l_ratio: mean token ratio pi/pi_old (the "
        "authors run it with tau=1)",
    )
    negatives: str = option(
        "softmax", "softmax: DisCO (tau-softmax over wrong rollouts); mean: DisCO-b"
    )
    tau: float = option(10.0, "temperature of the softmax over negatives")
    delta: float = option(1e-4, "KL budget of the constraint")
    beta: float = option(1e3, "squared-hinge penalty weight")
    kl_estimator: str = option(
        "k1", "KL(pi_old || pi) per token: k1 = log pi_old - log pi; k3 = rho - 1 - log rho"
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
