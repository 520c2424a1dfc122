"""What the app schemas share: the run directory, ``_target_`` sections and optimiser schedules.

The app schemas themselves sit with the code that runs them, above the components they compose:
the train app's (the RL recipe's) in :mod:`framework.rl.config`, the SFT stage's in
:mod:`framework.sft.config`, the Lightning trainer's in :mod:`framework.lightning.trainer`, the other
apps' in :mod:`framework.cli.schema`. This package is
the bottom layer, so it holds only the checks they have in common.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from framework.config.problems import Problem, check, check_choice, check_range

#: where an app writes its outputs: the directory Hydra made for this run
RUN_DIR = "${hydra:runtime.output_dir}"


def schedule_problems(optim: Any) -> list[Problem]:
    """Checks shared by the optimiser sections: lr, weight decay, warm-up, schedule, clipping."""
    out = check_range(optim.lr, "lr", low=0.0, low_inclusive=False)
    out += check_range(optim.weight_decay, "weight_decay", low=0.0)
    out += check_range(optim.warmup_steps, "warmup_steps", low=0)
    out += check_choice(optim.schedule, "schedule", ("constant", "linear", "cosine"))
    out += check_range(optim.grad_clip, "grad_clip", low=0.0)
    return out


def target_problems(section: Any, path: str) -> list[Problem]:
    """Problems of a ``_target_`` section: the target's module must be importable."""
    if section is None:
        return []
    target = section.get("_target_") if isinstance(section, dict) else None
    if not isinstance(target, str) or "." not in target:
        return [
            Problem(
                f"{path}._target_",
                target,
                "a dotted class path",
                f"set {path}._target_ to e.g. lightning.pytorch.loggers.TensorBoardLogger",
            )
        ]
    module = target.rsplit(".", 1)[0]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    return check(found, f"{path}._target_", target, "an importable module path", "install it")
