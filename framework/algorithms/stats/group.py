"""Statistics over groups of rollouts given a flat ``group_index``.

All functions take ``values [N]`` and ``group_index [N]`` (any integers; equal values form a group)
and return ``[N]``: each rollout receives its group's statistic, so results combine elementwise.
"""

from __future__ import annotations

import torch
from torch import Tensor


def dense_index(group_index: Tensor) -> tuple[Tensor, int]:
    """Map arbitrary group ids to ``0..K-1``; returns ``(inverse [N], K)``."""
    uniq, inverse = torch.unique(group_index, return_inverse=True)
    return inverse, int(uniq.numel())


def group_size(group_index: Tensor) -> Tensor:
    """``[N]`` number of rollouts in each rollout's group (float)."""
    inv, k = dense_index(group_index)
    counts = torch.bincount(inv, minlength=k).to(torch.get_default_dtype())
    return counts[inv]


def group_sum(values: Tensor, group_index: Tensor) -> Tensor:
    """``[N]`` sum of ``values`` over each rollout's group."""
    inv, k = dense_index(group_index)
    sums = torch.zeros(k, dtype=values.dtype, device=values.device).index_add_(0, inv, values)
    return sums[inv]


def group_mean(values: Tensor, group_index: Tensor) -> Tensor:
    """``[N]`` mean of ``values`` over each rollout's group."""
    return group_sum(values, group_index) / group_size(group_index).to(values)


def group_std(values: Tensor, group_index: Tensor, *, unbiased: bool = True) -> Tensor:
    """``[N]`` standard deviation within each group; 0 for a group of one (never NaN)."""
    n = group_size(group_index).to(values)
    centered = values - group_mean(values, group_index)
    denom = (n - 1.0).clamp(min=1.0) if unbiased else n
    var = group_sum(centered * centered, group_index) / denom
    return torch.where(n > 1, var, torch.zeros_like(var)).clamp(min=0).sqrt()


def _group_reduce(values: Tensor, group_index: Tensor, reduce: str) -> Tensor:
    inv, k = dense_index(group_index)
    init = torch.zeros(k, dtype=values.dtype, device=values.device)
    return init.scatter_reduce(0, inv, values, reduce=reduce, include_self=False)[inv]


def group_max(values: Tensor, group_index: Tensor) -> Tensor:
    """``[N]`` maximum of ``values`` over each rollout's group."""
    return _group_reduce(values, group_index, "amax")


def group_min(values: Tensor, group_index: Tensor) -> Tensor:
    """``[N]`` minimum of ``values`` over each rollout's group."""
    return _group_reduce(values, group_index, "amin")


def group_median(values: Tensor, group_index: Tensor) -> Tensor:
    """``[N]`` lower median of ``values`` over each rollout's group.

    An odd group's median is its middle value; an even group has no unique median and gets the
    lower of the two middle values (``torch.median``'s convention), so the result is always one of
    the group's own values and ``values - group_median(values)`` is exactly 0 at the median.
    """
    inv, k = dense_index(group_index)
    order = torch.argsort(values, stable=True)  # by value ...
    order = order[torch.argsort(inv[order], stable=True)]  # ... within each group, groups in turn
    counts = torch.bincount(inv, minlength=k)
    starts = torch.cumsum(counts, 0) - counts
    medians = values[order][starts + (counts - 1) // 2]  # [K]
    return medians[inv]


def group_center(values: Tensor, group_index: Tensor) -> Tensor:
    """``[N]`` ``values - group_mean(values)``, exactly 0 in groups whose values are all equal.

    The float mean of e.g. eight 0.3s is not exactly 0.3; without the guard the rounding residue
    (~1e-8) becomes a same-sign advantage once divided by a tiny std.
    """
    constant = group_max(values, group_index) == group_min(values, group_index)
    centered = values - group_mean(values, group_index)
    return torch.where(constant, torch.zeros_like(centered), centered)


def group_max_normalize(values: Tensor, group_index: Tensor) -> Tensor:
    """``[N]`` ``values / max_group(values)``; 0 where the group maximum is <= 0.

    E-GRPO's normalisation of entity match rates (arXiv 2510.24694): the best rollout of a group
    gets 1, a group where no rollout matched anything gets 0 everywhere.
    """
    gmax = group_max(values, group_index)
    safe = torch.where(gmax > 0, gmax, torch.ones_like(gmax))
    return torch.where(gmax > 0, values / safe, torch.zeros_like(values))
