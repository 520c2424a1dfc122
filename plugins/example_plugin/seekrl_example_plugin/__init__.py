"""Example seekrl plugin: one reward, one advantage estimator and one experiment preset.

The distribution declares the entry point ``example = "seekrl_example_plugin:register"`` in the group
``seekrl.plugins``. The framework loads it before Hydra composes: importing this package registers the
components, and :func:`register` returns the directory of presets to add to Hydra's search path.
"""

from __future__ import annotations

import importlib
from pathlib import Path

#: Modules whose import registers this plugin's components.
COMPONENT_MODULES = (
    "seekrl_example_plugin.reward",
    "seekrl_example_plugin.advantage",
)

#: Hydra presets shipped with the plugin (``experiment/example_plugin.yaml``).
CONFIG_DIR = Path(__file__).resolve().parent / "conf"


def register() -> str:
    """Register the plugin's components; return its config directory for Hydra's search path."""
    for module in COMPONENT_MODULES:
        importlib.import_module(module)
    return str(CONFIG_DIR)


__all__ = ["COMPONENT_MODULES", "CONFIG_DIR", "register"]
