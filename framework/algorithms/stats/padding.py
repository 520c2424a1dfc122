"""Padding tensors of per-rollout rows to a common width (turn rewards of rounds or terms with
different most turns)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def pad_to_widest(parts: Sequence[Tensor]) -> list[Tensor]:
    """``parts`` each zero-padded at the end of every dimension after the first to the largest
    (``[n_j, T_j]`` turn rewards of different most turns), the first dimension unchanged."""
    shape = [max(p.shape[d] for p in parts) for d in range(1, parts[0].dim())]
    out = []
    for p in parts:
        pad = [x for d in reversed(range(1, p.dim())) for x in (0, shape[d - 1] - p.shape[d])]
        out.append(torch.nn.functional.pad(p, pad) if any(pad) else p)
    return out
