"""Reward shaping that needs the whole group."""

from __future__ import annotations

import torch
from torch import Tensor

from framework.algorithms.stats.group import group_max_normalize


def entity_shaped_reward(
    correct: Tensor, match_rate: Tensor, valid: Tensor, group_index: Tensor, alpha: float
) -> Tensor:
    """E-GRPO's reward (arXiv 2510.24694, METHODS.md steps 4-5).

    ``R_i = 0`` if rollout ``i`` is invalid (format error or over budget); else ``1`` if its answer is
    correct; else ``alpha * γ̂_i`` with ``γ̂_i = γ_i / max_j γ_j`` over the group (0 when the max is 0).
    The maximum runs over all rollouts of the group, valid or not. ``alpha = 0`` is plain GRPO's
    binary outcome reward.

    Args:
        correct: ``[N]`` bool, final answer correct.
        match_rate: ``[N]`` float in [0, 1], ``γ_i`` = share of ground-truth entities found.
        valid: ``[N]`` bool, no format error and within budget.
        group_index: ``[N]`` int group ids.
        alpha: weight of the entity reward for wrong answers.

    Returns:
        ``[N]`` rewards in [0, 1] when ``alpha <= 1``.
    """
    gamma_hat = group_max_normalize(match_rate.to(torch.get_default_dtype()), group_index)
    shaped = torch.where(correct.bool(), torch.ones_like(gamma_hat), alpha * gamma_hat)
    return torch.where(valid.bool(), shaped, torch.zeros_like(shaped))


def overlong_penalty(lengths: Tensor, max_length: int, cache_length: int) -> Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, arXiv 2503.14476, eq. 13).

    With ``L_max = max_length`` and ``L_cache = cache_length``::

        R(|y|) = 0                                  if |y| <= L_max - L_cache
               = ((L_max - L_cache) - |y|) / L_cache  if L_max - L_cache < |y| <= L_max
               = -1                                 if |y| > L_max

    The penalty falls linearly from 0 to -1 across the cache window and is continuous at both
    ends (``|y| = L_max`` gives exactly -1).

    Args:
        lengths: ``[N]`` response lengths ``|y|`` in tokens.
        max_length: ``L_max``, positive.
        cache_length: ``L_cache``, in ``[1, L_max]``.

    Returns:
        ``[N]`` float penalties in ``[-1, 0]``.
    """
    y = lengths.to(torch.get_default_dtype())
    start = float(max_length - cache_length)
    inside = (start - y) / float(cache_length)
    return inside.clamp(min=-1.0, max=0.0)
