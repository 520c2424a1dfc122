"""Combining a policy loss with a KL penalty."""

from __future__ import annotations

from torch import Tensor

from framework.algorithms.stats.aggregation import aggregate
from framework.types import LossOutput


def add_kl_penalty(
    out: LossOutput,
    kl_per_token: Tensor,
    mask: Tensor,
    *,
    coef: float,
    agg: str,
    norm_constant: float | None = None,
) -> LossOutput:
    """``loss + coef * aggregate(kl)``, with the KL reduced the same way as the policy loss.

    Args:
        out: the policy loss.
        kl_per_token: ``[N, L]`` from a KL estimator.
        mask: ``[N, L]`` effective trained-token mask (the one the policy loss used).
        coef: KL weight; 0 returns ``out`` unchanged (the caller should not even compute the KL).
        agg: aggregation mode of the policy loss.
        norm_constant: as for :func:`~framework.algorithms.stats.aggregation.aggregate`.

    Returns:
        A new output whose metrics also hold ``kl`` (the aggregated, unweighted estimate).
    """
    if coef == 0:
        return out
    kl = aggregate(kl_per_token, mask, agg, norm_constant)
    metrics = dict(out.metrics, kl=kl.detach())
    return LossOutput(out.loss + coef * kl, metrics)
