"""The entry-point plugin loader, with fake entry points."""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap

import pytest

from framework.registry import REWARDS, plugins

GOOD = """
from dataclasses import dataclass
from pathlib import Path
from framework.config import ComponentConfig
from framework.registry import REWARDS

@dataclass
class GoodConfig(ComponentConfig):
    bonus: float = 1.0

@REWARDS.register("{name}", config=GoodConfig)
def good(inputs, *, cfg):
    return cfg.bonus

def register():
    return str(Path(__file__).parent / "{conf}")
"""

HALF_BROKEN = """
from dataclasses import dataclass
from framework.config import ComponentConfig
from framework.registry import REWARDS

@dataclass
class HalfConfig(ComponentConfig):
    pass

@REWARDS.register("{name}", config=HalfConfig)
def half(inputs, *, cfg):
    return 0.0

raise ImportError("missing dependency xyz")
"""


@pytest.fixture
def fake_plugins(tmp_path, monkeypatch, plugin_state):
    """Write plugin modules into tmp_path and make entry_points() return them."""
    suffix = tmp_path.name.replace("-", "_").lower()
    names = {"good": f"good_reward_{suffix}", "half": f"half_reward_{suffix}"}
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / f"good_{suffix}.py").write_text(
        textwrap.dedent(GOOD.format(name=names["good"], conf="conf"))
    )
    (tmp_path / f"half_{suffix}.py").write_text(
        textwrap.dedent(HALF_BROKEN.format(name=names["half"]))
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = [
        importlib.metadata.EntryPoint("good", f"good_{suffix}:register", plugins.ENTRY_POINT_GROUP),
        importlib.metadata.EntryPoint("half", f"half_{suffix}", plugins.ENTRY_POINT_GROUP),
    ]

    def entry_points(group):
        assert group == plugins.ENTRY_POINT_GROUP
        return eps

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.delenv(plugins.DISABLE_ENV, raising=False)
    yield names, tmp_path
    for name in names.values():
        REWARDS.remove(name)
    for mod in (f"good_{suffix}", f"half_{suffix}"):
        sys.modules.pop(mod, None)


def test_good_plugin_loads_and_broken_one_is_reported_and_skipped(fake_plugins, caplog):
    names, tmp_path = fake_plugins
    loaded = plugins.load_plugins()
    assert [p.name for p in loaded] == ["good"]
    assert loaded[0].config_dir == f"file://{(tmp_path / 'conf').resolve()}"
    assert names["good"] in REWARDS
    # the broken plugin registered a component before raising: it must not stay behind
    assert names["half"] not in REWARDS
    (failure,) = plugins.failures()
    assert failure.name == "half" and failure.error_type == "ImportError"
    assert "missing dependency xyz" in failure.message
    assert "plugin 'half'" in caplog.text and "failed to load and was skipped" in caplog.text
    assert plugins.config_search_path() == [loaded[0].config_dir]


def test_loading_is_idempotent(fake_plugins):
    plugins.load_plugins()
    plugins.load_plugins()  # a second import would raise DuplicateComponentError
    assert len(plugins.loaded()) == 1 and len(plugins.failures()) == 1


def test_environment_variable_disables_autoload(fake_plugins, monkeypatch):
    names, _ = fake_plugins
    monkeypatch.setenv(plugins.DISABLE_ENV, "1")
    assert plugins.autoload_disabled()
    assert plugins.load_plugins() == []
    assert names["good"] not in REWARDS and plugins.failures() == []


@pytest.mark.parametrize(
    "value,disabled", [("", False), ("0", False), ("false", False), ("1", True), ("yes", True)]
)
def test_disable_values(monkeypatch, value, disabled):
    monkeypatch.setenv(plugins.DISABLE_ENV, value)
    assert plugins.autoload_disabled() is disabled


def test_config_dir_must_exist(tmp_path):
    with pytest.raises(NotADirectoryError):
        plugins._search_path_entry(tmp_path / "nope")
    assert plugins._search_path_entry("pkg://some.pkg/conf") == "pkg://some.pkg/conf"
    assert plugins._search_path_entry(None) is None
