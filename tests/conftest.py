"""Shared fixtures."""

from __future__ import annotations

import pytest

from framework.registry import plugins


@pytest.fixture
def plugin_state():
    """Plugin loader state saved and restored around a test (loaded/failed lists)."""
    saved = (plugins._state.attempted, list(plugins._state.loaded), list(plugins._state.failed))
    plugins.reset()
    yield plugins._state
    plugins._state.attempted = saved[0]
    plugins._state.loaded[:] = saved[1]
    plugins._state.failed[:] = saved[2]
