"""What the app schemas share: the run directory, ``_target_`` sections and optimiser schedules.

The app schemas themselves sit with the code that runs them, above the components they compose:
the train app's (the RL recipe's) in :mod:`framework.rl.config`, the SFT stage's in
:mod:`framework.sft.config`, the Lightning trainer's in :mod:`framework.lightning.trainer`, the eval
app's in :mod:`framework.eval.config`, and so on (the table is :data:`framework.cli.app.APPS`). This
package is the bottom layer, so it holds only the checks they have in common.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from typing import Any

from framework.problems import Problem, check, check_choice, check_range

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
    return check(
        module_exists(module), f"{path}._target_", target, "an importable module path", "install it"
    )


def module_exists(name: str) -> bool:
    """Whether module ``name`` can be imported, without importing it or its parent packages.

    ``importlib.util.find_spec("a.b.c")`` imports ``a`` and ``a.b`` first: for
    ``lightning.pytorch.loggers`` that is Lightning and torchmetrics, seconds before any config is
    checked. Here the lookup walks the packages' directories instead; a name not found that way (a
    package that extends its path when imported) is looked up the importing way before it counts as
    missing.
    """
    if name in sys.modules:
        return True
    head, *rest = name.split(".")
    try:
        spec = importlib.util.find_spec(head)
        prefix = head
        for part in rest:
            if spec is None or spec.submodule_search_locations is None:
                spec = None
                break
            prefix = f"{prefix}.{part}"
            spec = importlib.machinery.PathFinder.find_spec(
                prefix, list(spec.submodule_search_locations)
            )
        if spec is not None:
            return True
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
