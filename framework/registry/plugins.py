"""Third-party components through one entry-point group.

A plugin distribution declares, in its ``pyproject.toml``::

    [project.entry-points."seekrl.plugins"]
    my_plugin = "my_package.plugin:register"

The entry point names a module or a callable. Loading it imports the module (its decorators register
components in :mod:`framework.registry`); a callable is then called with no arguments and may return
a config directory (a path, or a ``pkg://`` / ``file://`` Hydra search-path entry) whose presets are
added to Hydra's search path, e.g. ``experiment/my_plugin.yaml``.

Plugins load before Hydra composes. A plugin that fails is reported by name and skipped; if the config
then uses a name the registry lacks, the registry's error chains that plugin's exception. Set the
environment variable ``SEEKRL_NO_PLUGINS=1`` to disable autoloading.
"""

from __future__ import annotations

import importlib.metadata
import logging
from pathlib import Path

from framework.registry.kinds import ALL
from framework.registry.state import (
    DISABLE_ENV,
    ENTRY_POINT_GROUP,
    LoadedPlugin,
    PluginFailure,
    _state,
    autoload_disabled,
    current_source,
    failures,
    loaded,
    reset,
)

__all__ = [
    "DISABLE_ENV",
    "ENTRY_POINT_GROUP",
    "LoadedPlugin",
    "PluginFailure",
    "autoload_disabled",
    "config_search_path",
    "failures",
    "load_plugins",
    "loaded",
    "reset",
]

log = logging.getLogger(__name__)


def load_plugins(*, enabled: bool | None = None) -> list[LoadedPlugin]:
    """Load every plugin of :data:`ENTRY_POINT_GROUP` once; report and skip the broken ones.

    Args:
        enabled: ``None`` follows ``SEEKRL_NO_PLUGINS``; ``False`` loads nothing.

    Returns:
        The plugins loaded so far.
    """
    if enabled is None:
        enabled = not autoload_disabled()
    if not enabled or _state.attempted:
        return list(_state.loaded)
    _state.attempted = True
    for ep in sorted(
        importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name
    ):
        dist = ep.dist.name if ep.dist is not None else "?"
        _load_one(ep, dist)
    return list(_state.loaded)


def _load_one(ep: importlib.metadata.EntryPoint, dist: str) -> None:
    before = {kind: set(reg.names()) for kind, reg in ALL.items()}
    token = current_source.set(dist)
    try:
        obj = ep.load()
        result = obj() if callable(obj) else None
        config_dir = _search_path_entry(result)
    except Exception as exc:  # a broken plugin must not take the framework down
        for kind, reg in ALL.items():  # drop what it registered before failing
            for name in set(reg.names()) - before[kind]:
                reg.remove(name)
        _state.failed.append(PluginFailure(ep.name, dist, ep.value, exc))
        log.warning(
            "seekrl: plugin '%s' (%s, %s) failed to load and was skipped: %s: %s. "
            "Set %s=1 to disable plugin autoloading.",
            ep.name,
            dist,
            ep.value,
            type(exc).__name__,
            exc,
            DISABLE_ENV,
        )
        return
    finally:
        current_source.reset(token)
    _state.loaded.append(LoadedPlugin(ep.name, dist, ep.value, config_dir))


def _search_path_entry(result: object) -> str | None:
    if result is None:
        return None
    text = str(result)
    if text.startswith(("pkg://", "file://")):
        return text
    path = Path(text)
    if not path.is_dir():
        raise NotADirectoryError(f"plugin config directory {text!r} does not exist")
    return f"file://{path.resolve()}"


def config_search_path() -> list[str]:
    """Hydra search-path entries contributed by loaded plugins."""
    return [p.config_dir for p in _state.loaded if p.config_dir]
