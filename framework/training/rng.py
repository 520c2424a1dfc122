"""The random state a training checkpoint carries: a resumed run draws what the uninterrupted one
would."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def random_state() -> dict[str, Any]:
    """The torch, Python and numpy random states, as plain types (checkpoints load with
    ``weights_only=True``)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": [name, [int(k) for k in keys], int(pos), int(has_gauss), float(gauss)],
    }


def set_random_state(state: dict[str, Any]) -> None:
    """Restore what :func:`random_state` returned."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
