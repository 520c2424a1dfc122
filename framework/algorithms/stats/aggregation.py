"""Reduction of a per-token loss matrix to a scalar, one table entry per mode (``loss.agg``).

Modes (:data:`AGG_MODES`):

* ``token_mean``: every trained token of the batch weighs the same (DAPO, arXiv 2503.14476).
* ``seq_mean_token_mean``: mean over rollouts of each rollout's token mean (GRPO; E-GRPO). Rollouts
  with no trained token are left out of the outer mean.
* ``token_sum_norm``: each rollout's token sum divided by a constant, averaged over all ``N`` rows
  (Dr. GRPO, arXiv 2503.20783): no length normalisation, so longer wrong answers are not favoured.
  The constant (``norm_constant``, typically the maximum response length) and ``N`` do not depend on
  the masks, which keeps the estimator unbiased.

A mode is a reduce and a per-row weight; adding one is one line in :data:`AGG_MODES`, and config
validation, :func:`aggregate` and :func:`chunk_weights` all read that table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from framework.problems import table_entry


@dataclass(frozen=True)
class Aggregation:
    """One aggregation mode.

    Attributes:
        reduce: ``(values [N, L] zeroed outside the mask, mask [N, L] bool, norm_constant)`` to a
            scalar.
        row_weight: ``mask [N, L] bool`` to ``[N]`` float: each row's share of the batch's
            normaliser, so that micro-batches weighted by their rows' share reproduce ``reduce`` of
            the whole batch (see :func:`chunk_weights`).
        needs_norm_constant: the mode divides by ``loss.norm_constant``, which must then be
            positive.
    """

    reduce: Callable[[Tensor, Tensor, float | None], Tensor]
    row_weight: Callable[[Tensor], Tensor]
    needs_norm_constant: bool = False


def _token_mean(v: Tensor, m: Tensor, norm_constant: float | None) -> Tensor:
    return v.sum() / m.sum().clamp(min=1)


def _seq_mean_token_mean(v: Tensor, m: Tensor, norm_constant: float | None) -> Tensor:
    tokens = m.sum(-1)  # [N]
    per_seq = v.sum(-1) / tokens.clamp(min=1)  # [N]
    has = tokens > 0  # [N]
    return (per_seq * has).sum() / has.sum().clamp(min=1)


def _token_sum_norm(v: Tensor, m: Tensor, norm_constant: float | None) -> Tensor:
    # aggregate() has checked that norm_constant is positive
    return v.sum(-1).sum() / (v.shape[0] * float(norm_constant))  # type: ignore[arg-type]


#: mode name -> how token losses reduce and what each row weighs in the batch total
AGG_MODES: dict[str, Aggregation] = {
    "token_mean": Aggregation(_token_mean, lambda m: m.sum(-1).float()),
    "seq_mean_token_mean": Aggregation(_seq_mean_token_mean, lambda m: m.any(-1).float()),
    "token_sum_norm": Aggregation(
        _token_sum_norm, lambda m: torch.ones(m.shape[0]), needs_norm_constant=True
    ),
}


def aggregation(mode: str) -> Aggregation:
    """The table entry of ``mode``.

    Raises:
        ValueError: ``mode`` is not in :data:`AGG_MODES`.
    """
    return table_entry(AGG_MODES, mode, "loss.agg")


def aggregate(
    values: Tensor, mask: Tensor, mode: str, norm_constant: float | None = None
) -> Tensor:
    """Reduce ``values [N, L]`` over the positions where ``mask [N, L]`` is true.

    Args:
        values: per-token losses; entries under a false mask are ignored (even NaN).
        mask: bool or 0/1 trained-token mask.
        mode: one of :data:`AGG_MODES`.
        norm_constant: the divisor of ``token_sum_norm`` (required for that mode).

    Returns:
        A scalar tensor connected to ``values``' graph (0 when nothing is masked in).

    Raises:
        ValueError: unknown mode, or ``token_sum_norm`` without a positive ``norm_constant``.
    """
    agg = aggregation(mode)
    if agg.needs_norm_constant and (norm_constant is None or norm_constant <= 0):
        raise ValueError(
            f"[loss.norm_constant] got {norm_constant!r}; expected a positive number for "
            f"agg={mode}. Fix: set loss.norm_constant to the maximum response length."
        )
    m = mask.bool()
    return agg.reduce(values.masked_fill(~m, 0.0), m, norm_constant)


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` over the true entries of ``mask`` (0 when there are none)."""
    m = mask.bool()
    return values.masked_fill(~m, 0.0).sum() / m.sum().clamp(min=1)


def chunk_weights(mask: Tensor, chunks: list[Tensor], mode: str) -> list[float]:
    """Weights ``w_k`` with ``sum_k w_k * aggregate(v[c_k], mask[c_k]) == aggregate(v, mask)``.

    Gradient accumulation over micro-batches must reproduce the full-batch loss of the chosen
    aggregation: each chunk's share is its rows' :attr:`Aggregation.row_weight` over the batch's
    (trained tokens for ``token_mean``, rollouts with any trained token for
    ``seq_mean_token_mean``, rows for ``token_sum_norm``). Rows left out of every chunk still count
    in the batch totals, so rollouts whose loss terms are exactly 0 (zero advantage, no KL) can be
    skipped without changing loss or gradient.

    Args:
        mask: ``[N, L]`` effective trained-token mask of the whole batch (bool or 0/1).
        chunks: row indices of each micro-batch (disjoint).
        mode: one of :data:`AGG_MODES`.

    Returns:
        One float per chunk (0 for chunks whose rows carry no weight).
    """
    per_row = aggregation(mode).row_weight(mask.bool())  # [N]
    total = float(per_row.sum())
    if total == 0:
        return [0.0] * len(chunks)
    return [float(per_row[c].sum()) / total for c in chunks]
