"""HiLL's hint reward (arXiv 2604.00698; the authors' ``transfer_weighted_non_deg``), exact.

A hint for an all-wrong question is worth what its hinted group teaches the policy without it:

    p̂      = share of the n hinted rollouts that are correct (reward 0 if p̂ is 0 or 1)
    non_deg = 1 - p̂^n - (1 - p̂)^n            (the chance a group of n is not all-equal)
    Δ       = mean over correct hinted rollouts of
              [mean_t log π(y_t | q) - mean_t log π(y_t | q + hint)]    (≤ 0: the hint helped)
    w       = exp(min(Δ, 0) / T),  T = 0.3   (a hint the solution relies on transfers less)
    R_hint  = non_deg · w

A hint that leaks a gold answer, or is longer than allowed, gets -0.2 whatever it achieved (the
authors' gates: ``hint_gate`` in :mod:`framework.rl.augmenters`). The ``hints`` augmenter (:mod:`framework.rl.augmenters`) writes the hints, rolls
the hinted groups out and puts the best hint's group in place of the all-wrong one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: what a gated hint (leak, overlong, empty) earns
GATE_PENALTY = -0.2


def non_degenerate(p_hat: float, n: int) -> float:
    """``1 - p̂^n - (1 - p̂)^n``: the chance that ``n`` draws are not all equal; 0 at p̂ in {0, 1}."""
    if p_hat <= 0.0 or p_hat >= 1.0:
        return 0.0
    return 1.0 - p_hat**n - (1.0 - p_hat) ** n


def hint_reward(
    correct: Sequence[bool], reliance: Sequence[float], *, temperature: float = 0.3
) -> float:
    """``R_hint = non_deg · exp(min(Δ, 0) / T)`` of one hint.

    Args:
        correct: per hinted rollout, right or not (``n`` of them).
        reliance: per *correct* hinted rollout, ``mean_t log π(y|q) - mean_t log π(y|q+hint)``.
        temperature: ``T``.
    """
    n = len(correct)
    if n == 0:
        return 0.0
    p_hat = sum(bool(c) for c in correct) / n
    nd = non_degenerate(p_hat, n)
    if nd == 0.0:
        return 0.0
    delta = sum(reliance) / len(reliance) if reliance else 0.0
    return nd * math.exp(min(delta, 0.0) / temperature)
