"""What loading plugins leaves behind: the distribution registering components now, and the plugins
that loaded or failed (read by the registries' error messages and the components listing).

No import of the rest of the registry package, so every module of it may read this state.
"""

from __future__ import annotations

import contextvars
import os
from dataclasses import dataclass, field

#: The distribution that is registering components right now (set by the plugin loader).
current_source: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "seekrl_current_source", default=None
)

ENTRY_POINT_GROUP = "seekrl.plugins"
DISABLE_ENV = "SEEKRL_NO_PLUGINS"


@dataclass(frozen=True)
class LoadedPlugin:
    """A plugin that loaded."""

    name: str
    distribution: str
    value: str
    config_dir: str | None


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that raised while loading; it was skipped."""

    name: str
    distribution: str
    value: str
    exception: BaseException

    @property
    def error_type(self) -> str:
        return type(self.exception).__name__

    @property
    def message(self) -> str:
        return str(self.exception).splitlines()[0] if str(self.exception) else ""


@dataclass
class _State:
    attempted: bool = False
    loaded: list[LoadedPlugin] = field(default_factory=list)
    failed: list[PluginFailure] = field(default_factory=list)


_state = _State()


def autoload_disabled() -> bool:
    """True when ``SEEKRL_NO_PLUGINS`` is set to a true value."""
    return os.environ.get(DISABLE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def loaded() -> list[LoadedPlugin]:
    """Plugins loaded in this process."""
    return list(_state.loaded)


def failures() -> list[PluginFailure]:
    """Plugins that failed to load in this process."""
    return list(_state.failed)


def reset() -> None:
    """Forget what was loaded (tests); registered components stay registered."""
    _state.attempted = False
    _state.loaded.clear()
    _state.failed.clear()
