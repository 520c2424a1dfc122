"""Reduction of a per-token loss matrix to a scalar.

Modes (``agg``):

* ``token_mean``: every trained token of the batch weighs the same (DAPO, arXiv 2503.14476).
* ``seq_mean_token_mean``: mean over rollouts of each rollout's token mean (GRPO; E-GRPO). Rollouts
  with no trained token are left out of the outer mean.
* ``token_sum_norm``: each rollout's token sum divided by a constant, averaged over all ``N`` rows
  (Dr. GRPO, arXiv 2503.20783): no length normalisation, so longer wrong answers are not favoured.
  The constant (``norm_constant``, typically the maximum response length) and ``N`` do not depend on
  the masks, which keeps the estimator unbiased.
"""

from __future__ import annotations

import torch
from torch import Tensor

AGG_MODES = ("token_mean", "seq_mean_token_mean", "token_sum_norm")


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
    m = mask.bool()
    v = values.masked_fill(~m, 0.0)
    if mode == "token_mean":
        return v.sum() / m.sum().clamp(min=1)
    if mode == "seq_mean_token_mean":
        tokens = m.sum(-1)
        per_seq = v.sum(-1) / tokens.clamp(min=1)
        has = tokens > 0
        return (per_seq * has).sum() / has.sum().clamp(min=1)
    if mode == "token_sum_norm":
        if norm_constant is None or norm_constant <= 0:
            raise ValueError(
                f"[loss.norm_constant] got {norm_constant!r}; expected a positive number for "
                "agg=token_sum_norm. Fix: set loss.norm_constant to the maximum response length."
            )
        return v.sum(-1).sum() / (v.shape[0] * float(norm_constant))
    raise ValueError(f"[loss.agg] got {mode!r}; expected one of {list(AGG_MODES)}. Fix: pick one.")


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` over the true entries of ``mask`` (0 when there are none)."""
    m = mask.bool()
    return values.masked_fill(~m, 0.0).sum() / m.sum().clamp(min=1)


def chunk_weights(mask: Tensor, chunks: list[Tensor], mode: str) -> list[float]:
    """Weights ``w_k`` with ``sum_k w_k * aggregate(v[c_k], mask[c_k]) == aggregate(v, mask)``.

    Gradient accumulation over micro-batches must reproduce the full-batch loss of the chosen
    aggregation: each chunk's share is its trained tokens (``token_mean``), its rollouts that have
    any trained token (``seq_mean_token_mean``) or its rows (``token_sum_norm``) over the batch's.
    Rows left out of every chunk still count in the batch totals, so rollouts whose loss terms are
    exactly 0 (zero advantage, no KL) can be skipped without changing loss or gradient.

    Args:
        mask: ``[N, L]`` effective trained-token mask of the whole batch (bool or 0/1).
        chunks: row indices of each micro-batch (disjoint).
        mode: one of :data:`AGG_MODES`.

    Returns:
        One float per chunk (0 for chunks whose rows carry no weight).
    """
    if mode not in AGG_MODES:
        raise ValueError(
            f"[loss.agg] got {mode!r}; expected one of {list(AGG_MODES)}. Fix: pick one."
        )
    m = mask.bool()
    if mode == "token_mean":
        per_row = m.sum(-1).float()
    elif mode == "seq_mean_token_mean":
        per_row = m.any(-1).float()
    else:
        per_row = torch.ones(m.shape[0])
    total = float(per_row.sum())
    if total == 0:
        return [0.0] * len(chunks)
    return [float(per_row[c].sum()) / total for c in chunks]
