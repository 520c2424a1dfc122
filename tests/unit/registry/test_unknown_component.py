"""The unknown-name error tells "not imported" (and why) from "not installed"."""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap

import pytest

import framework.registry
from framework.cli.app import load_config
from framework.registry import REWARDS, Registry, UnknownComponentError, plugins, sources

MODULE = """
from dataclasses import dataclass

from framework.config import ComponentConfig
from framework.registry import {registry}


@dataclass
class NewConfig(ComponentConfig):
    pass


@{registry}.register("{name}", config=NewConfig)
def new_component(inputs, *, cfg):
    return inputs
"""


@pytest.fixture
def new_framework_module(tmp_path, monkeypatch):
    """A module ``framework.algorithms.new_estimator`` that nothing imports (read from tmp_path)."""
    root = tmp_path / "framework"
    (root / "algorithms").mkdir(parents=True)
    (root / "algorithms" / "new_estimator.py").write_text(
        textwrap.dedent(MODULE.format(registry="ADVANTAGES", name="new_estimator"))
    )
    monkeypatch.setattr(sources, "FRAMEWORK_DIR", root)
    return "framework.algorithms.new_estimator"


def test_module_missing_from_builtin_modules(new_framework_module, plugin_state):
    reg = Registry("advantage", config_store=None)
    msg = str(reg.unknown("new_estimator"))
    assert msg.startswith("[advantage] got 'new_estimator'; expected one of: (none registered)")
    assert (
        "Fix: add 'framework.algorithms.new_estimator' to BUILTIN_MODULES in "
        "framework/registry/__init__.py: 'new_estimator' is registered at "
        "framework/algorithms/new_estimator.py:13, but nothing imports that module."
    ) in msg
    assert "install the plugin" not in msg


def test_missing_builtin_module_through_the_config_machinery(new_framework_module, plugin_state):
    with pytest.raises(UnknownComponentError) as info:
        load_config("train", ["advantage=new_estimator"])
    assert "Fix: add 'framework.algorithms.new_estimator' to BUILTIN_MODULES" in str(info.value)


def test_builtin_module_listed_but_not_loaded(new_framework_module, monkeypatch, plugin_state):
    listed = (*framework.registry.BUILTIN_MODULES, new_framework_module)
    monkeypatch.setattr(framework.registry, "BUILTIN_MODULES", listed)
    msg = str(Registry("advantage", config_store=None).unknown("new_estimator"))
    assert "Fix: call framework.registry.load_components() first: it imports " in msg
    assert new_framework_module in msg


def test_not_installed_keeps_the_install_advice(plugin_state):
    reg = Registry("advantage", config_store=None)
    msg = str(reg.unknown("nowhere_defined_estimator"))
    assert "Fix: choose one of the options of advantage, or install the plugin that provides" in msg
    # a name registered for another kind is not this kind's component
    assert "BUILTIN_MODULES" not in str(Registry("reward", config_store=None).unknown("grpo"))


# -- plugins: a package whose entry point imports one module; another module registers too -------


@pytest.fixture
def plugin_package(tmp_path, monkeypatch, plugin_state):
    """Package ``pkg_<suffix>``: ``entry`` (the entry point) and ``extra`` (not imported by it)."""
    suffix = tmp_path.name.replace("-", "_").lower()
    package = f"pkg_{suffix}"
    names = {"entry": f"entry_reward_{suffix}", "extra": f"extra_reward_{suffix}"}
    root = tmp_path / package
    root.mkdir()
    (root / "__init__.py").write_text("")
    for module, name in names.items():
        (root / f"{module}.py").write_text(
            textwrap.dedent(MODULE.format(registry="REWARDS", name=name))
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = importlib.metadata.EntryPoint("mine", f"{package}.entry", plugins.ENTRY_POINT_GROUP)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [ep])
    monkeypatch.delenv(plugins.DISABLE_ENV, raising=False)
    yield package, names, root
    for name in names.values():
        REWARDS.remove(name)
    for mod in [m for m in sys.modules if m == package or m.startswith(f"{package}.")]:
        sys.modules.pop(mod)


def test_plugin_module_not_imported_by_its_entry_point(plugin_package):
    package, names, _ = plugin_package
    plugins.load_plugins()
    assert names["entry"] in REWARDS and names["extra"] not in REWARDS
    msg = str(REWARDS.unknown(names["extra"]))
    assert (
        f"Fix: import {package}.extra from the entry point of plugin 'mine' ({package}.entry)"
        in (msg)
    )


def test_plugin_that_failed_to_import(plugin_package):
    _, names, root = plugin_package
    with (root / "entry.py").open("a") as f:
        f.write('raise ImportError("missing dependency xyz")\n')
    plugins.load_plugins()
    with pytest.raises(UnknownComponentError) as info:
        REWARDS.get(names["entry"])
    msg = str(info.value)
    assert (
        f"Fix: fix the import error of plugin 'mine' (ImportError: missing dependency xyz), "
        f"which registers '{names['entry']}' at {root / 'entry.py'}:13."
    ) in msg
    assert "'mine' (ImportError: missing dependency xyz)" in msg.splitlines()[-1]
    assert isinstance(info.value.__cause__, ImportError)


def test_plugins_turned_off(plugin_package, monkeypatch):
    _, names, _ = plugin_package
    monkeypatch.setenv(plugins.DISABLE_ENV, "1")
    plugins.load_plugins()
    msg = str(REWARDS.unknown(names["entry"]))
    assert (
        f"Fix: unset {plugins.DISABLE_ENV}: plugin 'mine' (?) registers '{names['entry']}'" in msg
    )
    assert "failed to load" not in msg
