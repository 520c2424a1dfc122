"""Rollout correction: the mismatch between the rollout backend's and the trainer's log-probs.

The rollout backend (vLLM, or the framework's decoding loop) samples a token from its own
distribution ``μ``; the trainer scores the same token with the same weights under ``π_old``
(another kernel, precision or batch layout). The two differ, so even "on-policy" training is
slightly off policy (Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy
RL Training", https://fengyao.notion.site/off-policy-rl). This module measures the gap and
computes importance weights that correct the policy gradient for it.

Notation, per trained token ``t`` of rollout ``i`` (shapes ``[n, R]``, masked by ``mask``)::

    δ_t = log π_old(y_t) - log μ(y_t)          (trainer minus rollout; ``old - behav``)
    ρ_t = exp(δ_t)                             token ratio
    ρ_i = exp(Σ_t δ_t) = Π_t ρ_t               sequence ratio (over the rollout's trained tokens)

* **Mismatch figures** (:func:`mismatch_figures`): the per-token k3 estimate of
  ``KL(μ || π_old)``, ``k3_t = ρ_t - 1 - δ_t`` (>= 0; unbiased for the KL with tokens drawn from
  ``μ``, Schulman 2020, http://joschu.net/blog/kl-approx.html), its token mean and maximum (verl's
  rollout-correction metrics log the same k3 mean as ``k3_kl``), and the share of tokens whose ratio
  lies outside ``[1/C, C]`` (``|δ_t| > log C``).
* **TIS**, truncated importance sampling (Yao et al. 2025): ``w = min(ρ, C)``.
* **MIS**, masked importance sampling (Liu, Li et al. 2025, "When Speed Kills Stability:
  Demystifying RL Collapse from the Training-Inference Mismatch",
  https://richardli.xyz/rl-collapse; TRL's ``vllm_importance_sampling_mode=*_mask``):
  ``w = ρ · 1[ρ <= C]``: a token (or a whole rollout) whose ratio exceeds ``C`` is dropped from the
  gradient, the rest keep their importance weight. The mask is upper-sided as in those sources; a
  ratio far below 1 already gets a small weight. (verl's ``rollout_rs`` also rejects below
  ``1/C``.)

``ρ`` is the token ratio at ``level=token`` and the sequence ratio, broadcast to the rollout's
tokens, at ``level=sequence`` (unbiased for the sequence-level gradient, at a variance that grows
with length). Log-ratios (and their sequence sums) are clamped to ``±20`` before exponentiating, as
verl does, so one wild token cannot overflow. The weights are detached and multiply each token's
policy-gradient term; tokens they zero stay in the loss's denominator (the trainer's micro-batch
weights are planned from the masks before any log-prob is computed).

``π_old`` is the trainer's log-prob before the step's update: the detached current log-probs in
the first epoch, or the kept behaviour log-probs (``optim.policy_epochs > 1``), verl's "decoupled"
mode. ``μ`` is the distribution the backend sampled from, after temperature / top-k / top-p, while
the trainer scores at temperature 1 without filters: with any other sampling setting the figures
include that difference (and the weights correct for it, at a larger variance).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from framework.config import Problem, check

CORRECTION_MODES = ("none", "tis", "mis")
CORRECTION_LEVELS = ("token", "sequence")
#: log-ratios (and sequence sums of them) are clamped to this before exp (verl's safety bound)
LOG_RATIO_BOUND = 20.0


def log_ratios(old: Tensor, behav: Tensor, mask: Tensor) -> Tensor:
    """``[n, R]`` detached ``old - behav`` in float32 on the masked tokens, 0 elsewhere (unclamped)."""
    mask = mask.bool()
    delta = old.detach().float() - behav.detach().float().to(old.device)
    return delta.masked_fill(~mask, 0.0)


@dataclass
class MismatchStats:
    """Token sums of the mismatch (and of the correction, when one is on) over one micro-batch;
    ``+`` merges micro-batches exactly."""

    tokens: int = 0
    kl_sum: float = 0.0
    kl_max: float = 0.0
    beyond: int = 0
    #: a correction was applied: ``corrected`` tokens truncated or masked, ``weight_sum`` of weights
    correction: bool = False
    corrected: int = 0
    weight_sum: float = 0.0

    def __add__(self, other: MismatchStats) -> MismatchStats:
        return MismatchStats(
            self.tokens + other.tokens,
            self.kl_sum + other.kl_sum,
            max(self.kl_max, other.kl_max),
            self.beyond + other.beyond,
            self.correction or other.correction,
            self.corrected + other.corrected,
            self.weight_sum + other.weight_sum,
        )

    def figures(self) -> dict[str, float]:
        """``rollout_mismatch_kl_mean`` / ``_kl_max`` / ``_frac_beyond``, and with a correction
        ``rollout_correction_frac`` (share of tokens truncated or masked) and
        ``rollout_correction_weight_mean``; empty without tokens."""
        if self.tokens == 0:
            return {}
        out = {
            "rollout_mismatch_kl_mean": self.kl_sum / self.tokens,
            "rollout_mismatch_kl_max": self.kl_max,
            "rollout_mismatch_frac_beyond": self.beyond / self.tokens,
        }
        if self.correction:
            out["rollout_correction_frac"] = self.corrected / self.tokens
            out["rollout_correction_weight_mean"] = self.weight_sum / self.tokens
        return out


def mismatch_stats(
    old: Tensor,
    behav: Tensor,
    mask: Tensor,
    *,
    threshold: float,
    correction: CorrectionWeights | None = None,
) -> MismatchStats:
    """:class:`MismatchStats` of the masked tokens (see :func:`mismatch_figures`), with the
    counts of ``correction`` (:func:`correction_weights` of the same tensors) when given."""
    mask = mask.bool()
    delta = log_ratios(old, behav, mask).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    # [T] per-token k3 of KL(μ || π_old), as expm1(δ) - δ in float64: the mismatch of two fp32
    # scorings of the same weights is ~1e-7 per token, whose k3 (~δ²/2) float32 rounds to 0
    d64 = delta.double()
    k3 = (torch.expm1(d64) - d64)[mask]
    if k3.numel() == 0:
        return MismatchStats()
    beyond = (delta.abs() > math.log(threshold))[mask]
    out = MismatchStats(
        tokens=int(k3.numel()),
        kl_sum=float(k3.sum()),
        kl_max=float(k3.max()),
        beyond=int(beyond.sum()),
    )
    if correction is not None:
        out.correction = True
        out.corrected = int((correction.changed.bool() & mask).sum())
        out.weight_sum = float(correction.weights[mask].sum())
    return out


def mismatch_figures(
    old: Tensor, behav: Tensor, mask: Tensor, *, threshold: float = 2.0
) -> dict[str, float]:
    """Trainer-vs-rollout log-prob mismatch over the masked tokens.

    Args:
        old: ``[n, R]`` the trainer's log-probs of the sampled tokens (before the update).
        behav: ``[n, R]`` the rollout backend's log-probs of the same tokens.
        mask: ``[n, R]`` bool, the tokens to measure (generated and trained).
        threshold: ``C``; a token counts as beyond when its ratio is outside ``[1/C, C]``.

    Returns:
        ``rollout_mismatch_kl_mean`` and ``rollout_mismatch_kl_max``: token mean and maximum of
        ``k3 = ρ - 1 - log ρ`` (``ρ = exp(old - behav)``), the estimate of ``KL(μ || π_old)``;
        ``rollout_mismatch_frac_beyond``: share of tokens with ``|old - behav| > log C``. Empty
        when the mask selects no token.
    """
    return mismatch_stats(old, behav, mask, threshold=threshold).figures()


class CorrectionWeights(NamedTuple):
    """``weights [n, R]`` (detached, 0 outside the mask) and ``changed [n, R]`` (bool: the tokens
    whose weight the threshold truncated, under tis, or masked, under mis)."""

    weights: Tensor
    changed: Tensor


def correction_weights(
    old: Tensor,
    behav: Tensor,
    mask: Tensor,
    *,
    mode: str,
    level: str = "token",
    threshold: float = 2.0,
) -> CorrectionWeights:
    """Importance weights correcting the policy gradient for the rollout/trainer mismatch.

    ``tis``: ``min(ρ, C)`` (Yao et al. 2025); ``mis``: ``ρ · 1[ρ <= C]`` (Liu, Li et al. 2025);
    ``none``: 1 on every masked token. ``ρ`` is the token ratio ``exp(old - behav)`` at
    ``level=token``, the sequence ratio ``exp(Σ_t (old - behav))`` over the row's masked tokens,
    broadcast to them, at ``level=sequence`` (see the module docstring).

    Args:
        old: ``[n, R]`` the trainer's log-probs before the update.
        behav: ``[n, R]`` the rollout backend's log-probs.
        mask: ``[n, R]`` bool, the trained tokens.
        mode: ``none``, ``tis`` or ``mis``.
        level: ``token`` or ``sequence``.
        threshold: ``C`` (> 1).

    Returns:
        :class:`CorrectionWeights`: weights (float32, detached, 0 outside ``mask``) and the tokens
        the threshold changed.

    Raises:
        ValueError: an unknown mode or level.
    """
    if mode not in CORRECTION_MODES:
        raise ValueError(
            f"[loss.rollout_correction] got {mode!r}; expected one of {CORRECTION_MODES}"
        )
    if level not in CORRECTION_LEVELS:
        raise ValueError(
            f"[loss.rollout_correction_level] got {level!r}; expected one of {CORRECTION_LEVELS}"
        )
    mask = mask.bool()
    delta = log_ratios(old, behav, mask)  # [n, R]
    if mode == "none":
        return CorrectionWeights(mask.float(), torch.zeros_like(mask))
    # [n, R]: log ρ_t per token, or the row's log ρ_i = Σ_t δ_t on every column
    log_rho = delta if level == "token" else delta.sum(-1, keepdim=True).expand_as(delta)
    rho = log_rho.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND).exp()
    over = (rho > threshold) & mask
    weights = rho.clamp(max=threshold) if mode == "tis" else rho.masked_fill(over, 0.0)
    return CorrectionWeights(weights.masked_fill(~mask, 0.0), over)


def rollout_source_problems(correction: str, rollout: Any) -> list[Problem]:
    """Whether the rollout section records the log-probs ``loss.rollout_correction`` needs.

    The transformers backend's ``decoder=generate`` records none; the decoding loop and vLLM do.
    (For an app schema's cross-section check; the trainer raises at the first step otherwise.)
    """
    if correction == "none":
        return []
    return check(
        getattr(rollout, "decoder", None) != "generate",
        "loss.rollout_correction",
        correction,
        "rollout log-probs, which rollout.decoder=generate does not record",
        "use rollout.decoder=loop (or rollout=vllm), or set loss.rollout_correction=none",
    )
