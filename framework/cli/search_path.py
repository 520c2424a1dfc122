"""Puts the config directories of loaded plugins on Hydra's search path."""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.plugins import Plugins
from hydra.plugins.search_path_plugin import SearchPathPlugin


class PluginConfigDirs(SearchPathPlugin):
    """Appends each loaded plugin's config directory after the framework's own ``conf/``."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from framework.registry.plugins import config_search_path, loaded

        dirs = set(config_search_path())
        for plugin in loaded():
            if plugin.config_dir in dirs:
                search_path.append(provider=f"seekrl-plugin:{plugin.name}", path=plugin.config_dir)


def register() -> None:
    """Register :class:`PluginConfigDirs` with Hydra (idempotent)."""
    Plugins.instance().register(PluginConfigDirs)
