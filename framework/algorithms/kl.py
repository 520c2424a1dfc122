"""KL estimators between the policy and a reference policy, per token.

Schulman, "Approximating KL divergence" (2020): with ``log r = log π_ref - log π_θ`` on tokens sampled
from the policy, ``k1 = -log r`` (unbiased, high variance, can be negative), ``k2 = (log r)^2 / 2``
(biased, low variance), ``k3 = r - 1 - log r`` (unbiased, non-negative). The coefficient is 0 by
default, and then no reference model is loaded at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

from framework.config import ComponentConfig, Problem, check_range
from framework.registry.kinds import KL_ESTIMATORS

#: log r is clamped to this magnitude so k3's exp cannot overflow on tokens the reference rejects.
LOG_RATIO_CLAMP = 20.0


@dataclass
class KLConfig(ComponentConfig):
    coef: float = field(
        default=0.0,
        metadata={"help": "weight of the KL term in the loss; 0 skips the reference model"},
    )

    def problems(self) -> list[Problem]:
        return check_range(self.coef, "coef", low=0.0, fix="use kl.coef=0 to disable the term")


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


@KL_ESTIMATORS.register("k3", config=KLConfig)
def kl_k3(logprobs: Tensor, ref_logprobs: Tensor, *, cfg: KLConfig) -> Tensor:
    """``k3 = r - 1 - log r`` with ``r = π_ref / π_θ`` per token (>= 0). ``[N, L]`` -> ``[N, L]``."""
    log_r = _log_ratio(logprobs, ref_logprobs)
    return log_r.exp() - 1.0 - log_r
