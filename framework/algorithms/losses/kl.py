"""KL estimators between the policy and a reference policy, per token.

Schulman, "Approximating KL divergence" (2020): with ``log r = log π_ref - log π_θ`` on tokens sampled
from the policy, ``k1 = -log r`` (unbiased, high variance, can be negative), ``k2 = (log r)^2 / 2``
(biased, low variance), ``k3 = r - 1 - log r`` (unbiased, non-negative). The coefficient is 0 by
default, and then no reference model is loaded at all. ``k3`` is also capped (``kl.cap``, 10 by
default as in verl), since it grows as ``exp(log r)``: see :func:`kl_k3`.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from framework.config import ComponentConfig, Problem, check_range, option
from framework.registry.kinds import KL_ESTIMATORS

#: log r is clamped to this magnitude so k3's exp cannot overflow on tokens the reference rejects.
LOG_RATIO_CLAMP = 20.0
#: k3's default cap (verl clamps its k3, ``low_var_kl``, to [-10, 10]; k3 >= 0, so only 10 bites)
K3_CAP = 10.0


@dataclass
class KLConfig(ComponentConfig):
    coef: float = option(0.0, "weight of the KL term in the loss; 0 skips the reference model")

    def problems(self) -> list[Problem]:
        return check_range(self.coef, "coef", low=0.0, fix="use kl.coef=0 to disable the term")


# the trainer reads ``coef`` (0 turns the term and its reference model off)
KL_ESTIMATORS.declare_config_base(KLConfig)


@dataclass
class K3Config(KLConfig):
    cap: float = option(
        K3_CAP, "k3 per token is clamped to at most this (no gradient beyond it); 0 = no cap"
    )

    def problems(self) -> list[Problem]:
        fix = "set cap to a positive number such as 10 (verl's), or 0 to turn the clamp off"
        out = check_range(self.cap, "cap", low=0.0, fix=fix)
        return out + super().problems()


def _log_ratio(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    return (ref_logprobs - logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


@KL_ESTIMATORS.register("k1", config=KLConfig)
def kl_k1(logprobs: Tensor, ref_logprobs: Tensor, *, cfg: KLConfig) -> Tensor:
    """``k1 = log π_θ - log π_ref`` per token. Shapes: ``[N, L]`` in, ``[N, L]`` out."""
    return -_log_ratio(logprobs, ref_logprobs)


@KL_ESTIMATORS.register("k2", config=KLConfig)
def kl_k2(logprobs: Tensor, ref_logprobs: Tensor, *, cfg: KLConfig) -> Tensor:
    """``k2 = (log π_ref - log π_θ)^2 / 2`` per token. Shapes: ``[N, L]`` in, ``[N, L]`` out."""
    return 0.5 * _log_ratio(logprobs, ref_logprobs).square()


@KL_ESTIMATORS.register("k3", config=K3Config)
def kl_k3(logprobs: Tensor, ref_logprobs: Tensor, *, cfg: K3Config) -> Tensor:
    """``min(r - 1 - log r, cap)`` with ``r = π_ref / π_θ`` per token (>= 0). ``[N, L]`` -> ``[N, L]``.

    ``log r = log π_ref - log π_θ`` is first clamped to ``[-20, 20]`` (no overflow), as for every
    estimator. Uncapped, k3 grows as ``r``: where the policy has made a token far less likely than
    the reference (``log r = 10``) k3 is ``e^10 - 11 ≈ 2.2e4`` and its gradient in ``log π_θ``,
    ``1 - r``, is ``≈ -2.2e4``, so one token could dominate the step. The cap (``cfg.cap``, 10 by
    default as verl's clamp of its k3; ``0`` turns it off) is a clamp: a token whose k3 exceeds it
    contributes exactly ``cap`` and passes **zero gradient** (the KL term stops pulling that token
    back towards the reference; the policy loss alone moves it). Below the cap the value and the
    gradient are k3's own. k3 >= 0, so only the upper side is clamped; k3 reaches 10 at
    ``log r ≈ 2.61`` (``r ≈ 13.6``) and at ``log r ≈ -11.0`` (``r ≈ 1.7e-5``).
    """
    log_r = _log_ratio(logprobs, ref_logprobs)
    k3 = log_r.exp() - 1.0 - log_r
    return k3.clamp(max=cfg.cap) if cfg.cap > 0 else k3
