"""A new advantage estimator added by following the extension guide alone, selected with
``advantage=NAME``.

The code and the command-line overrides are read from the "Adding a component" section of
``docs/extending.md``, so the documented route is the tested one: the module becomes a plugin (an
entry point naming it, as the page's "Plugins" section says) and the train config binds it like any
built-in.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

import pytest
import torch

from framework.cli.app import load_config
from framework.registry import ADVANTAGES, plugins
from framework.types import AdvantageInputs

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "extending.md"


def _readme_recipe() -> tuple[str, list[str]]:
    """The code block of "Adding a component" and the overrides it says to select it with."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text[text.index("## Adding a component") :]
    section = section[: section.index("\n## ")]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    select = re.search(r"select it with `([^`]+)`", section)
    assert code and select, (
        "docs/extending.md: 'Adding a component' lost its example or its select line"
    )
    return code.group(1), select.group(1).split()


@pytest.fixture
def readme_plugin(tmp_path, monkeypatch, plugin_state):
    """The guide's code as a module that a (fake) ``seekrl.plugins`` entry point names."""
    code, overrides = _readme_recipe()
    module = f"my_components_{tmp_path.name.replace('-', '_').lower()}"
    (tmp_path / f"{module}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = importlib.metadata.EntryPoint("my_plugin", module, plugins.ENTRY_POINT_GROUP)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [ep])
    monkeypatch.delenv(plugins.DISABLE_ENV, raising=False)
    name = overrides[0].split("=", 1)[1]
    assert name not in ADVANTAGES
    yield module, name, overrides
    ADVANTAGES.remove(name)
    sys.modules.pop(module, None)


def test_readme_estimator_runs_through_the_train_config(readme_plugin):
    module, _, overrides = readme_plugin
    assert overrides == ["advantage=my_advantage", "advantage.scale=2"]
    cfg = load_config("train", overrides)
    assert type(cfg.advantage).__module__ == module and cfg.advantage.scale == 2.0
    assert [p.name for p in plugins.loaded()] == ["my_plugin"] and not plugins.failures()
    estimator = ADVANTAGES.bind(cfg.advantage)  # what the trainer calls
    rewards = torch.tensor([1.0, 0.0, 0.5, 2.0, 2.0, 0.0])  # [N = 6]
    group_index = torch.tensor([0, 0, 0, 1, 1, 1])  # two groups of three
    advantages = estimator(AdvantageInputs(rewards=rewards, group_index=group_index))
    # scale * (r - group max): group 0 max 1 -> 2 * [0, -1, -0.5]; group 1 max 2 -> 2 * [0, 0, -2]
    assert torch.allclose(advantages, torch.tensor([0.0, -2.0, -1.0, 0.0, 0.0, -4.0]))


def test_readme_estimator_defaults_come_from_its_config(readme_plugin):
    _, name, _ = readme_plugin
    cfg = load_config("train", [f"advantage={name}"])
    assert cfg.advantage.name == name and cfg.advantage.scale == 1.0
    rewards, group_index = torch.tensor([3.0, 1.0]), torch.tensor([7, 7])
    out = ADVANTAGES.bind(cfg.advantage)(AdvantageInputs(rewards, group_index))
    assert out.tolist() == [0.0, -2.0]
