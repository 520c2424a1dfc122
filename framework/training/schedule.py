"""The optimiser (AdamW) and learning-rate multipliers: linear warm-up, then constant, linear or
cosine decay to 0."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

FUSED_DEVICES = ("cpu", "cuda")


def adamw(params: Iterable[Any], *, fused: bool = True, **kwargs: Any) -> Any:
    """``torch.optim.AdamW`` over ``params``, with torch's fused kernel when asked and every
    parameter is a floating-point tensor on a CPU or CUDA device (otherwise the multi-tensor
    ``foreach`` one). On this project's 2-core CPU the fused step over SmolLM2-135M took 0.09 s
    against 0.4-1.2 s; TRL's trainer uses it by default as well."""
    import torch

    params = list(params)
    ok = fused and all(p.is_floating_point() and p.device.type in FUSED_DEVICES for p in params)
    if ok:
        return torch.optim.AdamW(params, fused=True, **kwargs)
    return torch.optim.AdamW(params, foreach=True, **kwargs)


def lr_multiplier(schedule: str, warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """``f(step)`` for ``torch.optim.lr_scheduler.LambdaLR`` (``step`` counts optimiser steps from 0).

    Warm-up rises linearly from ``1 / (warmup_steps + 1)`` to 1; decay then runs over the remaining
    steps and reaches 0 after ``total_steps``.
    """
    if schedule not in ("constant", "linear", "cosine"):
        raise ValueError(
            f"[optim.schedule] got {schedule!r}; expected constant, linear or cosine. Fix: pick one."
        )

    def f(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        if schedule == "constant":
            return 1.0
        span = max(total_steps - warmup_steps, 1)
        progress = min((step - warmup_steps) / span, 1.0)
        if schedule == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return f


def optimizer_and_schedule(policy: Any, optim: Any, total_steps: int) -> tuple[Any, Any]:
    """AdamW over the trainable parameters of ``policy`` and its ``LambdaLR`` schedule, as the
    ``optim`` config section says, over ``total_steps`` optimiser steps."""
    import torch

    o = optim
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = adamw(
        params,
        fused=o.fused,
        lr=o.lr,
        betas=(o.beta1, o.beta2),
        eps=o.eps,
        weight_decay=o.weight_decay,
    )
    multiplier = lr_multiplier(o.schedule, o.warmup_steps, total_steps)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, multiplier)
