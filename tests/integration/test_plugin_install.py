"""The plugin contract end to end: a real pip install of ``plugins/example_plugin`` into a venv.

One module-scoped virtual environment (``--system-site-packages``, so it sees torch, Hydra and the
installed seekrl) gets the example plugin installed as a wheel, exactly as a user would install a
third-party plugin; every check then runs the framework's CLI in a subprocess with that venv's Python.
A second, deliberately broken plugin is installed into the same venv for the failure checks.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# a venv, pip installs and subprocess apps: about 80 s on 2 cores in all
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PLUGIN_SRC = REPO / "plugins" / "example_plugin"
PLUGIN_DIST = "seekrl-example-plugin"
BROKEN_DIST = "seekrl-broken-plugin"
INSTALL_TIMEOUT_S = 300
RUN_TIMEOUT_S = 120


@dataclass(frozen=True)
class Venv:
    python: Path
    workdir: Path  # cwd of every command, so Hydra run directories never land in the checkout


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SEEKRL_NO_PLUGINS"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # keep __pycache__ out of the checkout's plugin tests
    env.update(extra)
    return env


def _run(
    cmd: list[Any], *, cwd: Path, timeout: float = RUN_TIMEOUT_S, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c) for c in cmd],
        cwd=cwd,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _report(proc: subprocess.CompletedProcess[str], limit: int = 4000) -> str:
    """The command, its exit status and the tails of its output, for assertion messages."""
    return (
        f"\n$ {' '.join(proc.args)}\nexit status {proc.returncode}\n"
        f"--- stdout (tail) ---\n{proc.stdout[-limit:]}\n--- stderr (tail) ---\n{proc.stderr[-limit:]}"
    )


def _check(proc: subprocess.CompletedProcess[str], what: str) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"{what} failed:{_report(proc)}"
    return proc


def _pip_install(venv: Venv, *args: Any) -> None:
    cmd = [venv.python, "-m", "pip", "install", "--disable-pip-version-check", "-q", *args]
    _check(_run(cmd, cwd=venv.workdir, timeout=INSTALL_TIMEOUT_S), "pip install")


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    root = tmp_path_factory.mktemp("plugin_venv")
    workdir = root / "work"
    workdir.mkdir()
    env_dir = root / "venv"
    _check(
        _run(
            [sys.executable, "-m", "venv", "--system-site-packages", env_dir],
            cwd=workdir,
            timeout=INSTALL_TIMEOUT_S,
        ),
        "python -m venv",
    )
    v = Venv(python=env_dir / "bin" / "python", workdir=workdir)
    if sys.prefix != sys.base_prefix:
        # Running inside a venv: --system-site-packages exposes the *base* interpreter's packages,
        # not this venv's, so chain this environment's site-packages (and their .pth files, e.g. an
        # editable seekrl) into the new one.
        probe = _run(
            [v.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            cwd=workdir,
        )
        purelib = Path(_check(probe, "locating the venv's site-packages").stdout.strip())
        dirs = ", ".join(repr(d) for d in site.getsitepackages())
        # map, not a list comprehension: before Python 3.12 a comprehension is its own scope, and
        # the name `site` that this .pth line imports is not visible inside it (NameError)
        (purelib / "_seekrl_outer_env.pth").write_text(
            f"import site; list(map(site.addsitedir, ({dirs},)))\n"
        )
    probe = _run([v.python, "-c", "import framework, torch, hydra"], cwd=workdir)
    _check(probe, "importing seekrl, torch and hydra in the venv")
    # --no-build-isolation builds with what the environment has: hatchling comes with the dev extra.
    _check(
        _run([v.python, "-c", "import hatchling"], cwd=workdir), "importing hatchling (dev extra)"
    )
    _pip_install(v, "--no-deps", "--no-build-isolation", PLUGIN_SRC)
    return v


@pytest.fixture(scope="module")
def broken_plugin(venv: Venv, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """A second plugin whose import registers a reward, then fails on a missing dependency."""
    src = tmp_path_factory.mktemp("broken_plugin")
    (src / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""\
            [build-system]
            requires = ["hatchling"]
            build-backend = "hatchling.build"

            [project]
            name = "{BROKEN_DIST}"
            version = "0.0.1"
            dependencies = ["seekrl"]

            [project.entry-points."seekrl.plugins"]
            broken = "seekrl_broken_plugin:register"

            [tool.hatch.build.targets.wheel]
            packages = ["seekrl_broken_plugin"]
            """
        )
    )
    (src / "seekrl_broken_plugin").mkdir()
    (src / "seekrl_broken_plugin" / "__init__.py").write_text(
        textwrap.dedent(
            """\
            from dataclasses import dataclass

            from framework.config import ComponentConfig
            from framework.registry.kinds import REWARDS


            @dataclass
            class BrokenRewardConfig(ComponentConfig):
                pass


            @REWARDS.register("broken_reward", config=BrokenRewardConfig)
            def broken_reward(inputs, *, cfg):
                raise AssertionError("never called")


            raise ImportError("missing dependency xyz")


            def register():
                return None
            """
        )
    )
    _pip_install(venv, "--no-deps", "--no-build-isolation", src)
    return venv


def _components(venv: Venv, **env: str) -> dict[str, Any]:
    proc = _check(
        _run([venv.python, "-m", "framework.cli.components", "--json"], cwd=venv.workdir, **env),
        "seekrl-components --json",
    )
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"components --json printed no JSON ({exc}):{_report(proc)}") from exc


def _names(data: dict[str, Any], kind: str) -> dict[str, str]:
    """``name -> source`` of the components of ``kind``."""
    return {e["name"]: e["source"] for e in data["components"][kind]}


def _train(venv: Venv, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return _run([venv.python, "-m", "framework", "train", *args], cwd=venv.workdir, **env)


# -- (a) / (b): the listing with and without plugins ----------------------------------------------


def test_listing_shows_the_plugin_and_its_components(venv: Venv):
    data = _components(venv)
    assert data["plugins"]["autoload"] is True
    loaded = {p["name"]: p for p in data["plugins"]["loaded"]}
    assert loaded.get("example") == {
        "name": "example",
        "distribution": PLUGIN_DIST,
        "value": "seekrl_example_plugin:register",
    }, data["plugins"]
    assert _names(data, "reward").get("length_penalized_outcome") == PLUGIN_DIST, data["components"]
    assert _names(data, "advantage").get("rank") == PLUGIN_DIST, data["components"]
    assert _names(data, "reward")["outcome"] == "seekrl"  # built-ins keep their own source
    fields = {
        f["name"]: f
        for e in data["components"]["reward"]
        if e["name"] == "length_penalized_outcome"
        for f in e["fields"]
    }
    assert fields["max_chars"]["default"] == "2000" and fields["max_chars"]["help"], fields


def test_listing_without_plugins_lacks_them(venv: Venv):
    data = _components(venv, SEEKRL_NO_PLUGINS="1")
    assert data["plugins"]["autoload"] is False
    assert data["plugins"]["loaded"] == [] and data["plugins"]["failed"] == [], data["plugins"]
    assert "length_penalized_outcome" not in _names(data, "reward")
    assert "rank" not in _names(data, "advantage")
    assert "outcome" in _names(data, "reward") and "grpo" in _names(data, "advantage")


def test_plugin_preset_is_unknown_without_plugins(venv: Venv):
    proc = _train(venv, "experiment=example_plugin", SEEKRL_NO_PLUGINS="1")
    assert proc.returncode == 2, _report(proc)
    assert "[experiment] got 'example_plugin'" in proc.stderr, _report(proc)


# -- (c): the plugin's preset through Hydra -------------------------------------------------------


def test_preset_composes_with_the_plugin_components(venv: Venv):
    proc = _check(_train(venv, "--cfg", "job", "experiment=example_plugin"), "train --cfg job")
    assert "reward:\n  name: length_penalized_outcome\n" in proc.stdout, _report(proc)
    assert "advantage:\n  name: rank\n" in proc.stdout, _report(proc)
    assert "  max_chars: 1500\n" in proc.stdout, _report(proc)  # the value the preset sets


def test_preset_composes_with_cfg_flag_after_the_overrides(venv: Venv):
    proc = _check(_train(venv, "experiment=example_plugin", "--cfg", "job"), "train ... --cfg job")
    assert "reward:\n  name: length_penalized_outcome\n" in proc.stdout, _report(proc)


def test_train_with_the_preset_validates(venv: Venv):
    # dataset=synth_small: the run loads data, and the default set would need the full index
    proc = _check(
        _train(venv, "experiment=example_plugin", "dataset=synth_small", "dry_run=true"),
        "train experiment=example_plugin",
    )
    assert "seekrl-train: configuration valid" in proc.stdout, _report(proc)
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.startswith("  ")}
    assert "length_penalized_outcome" in lines.get("reward", ""), _report(proc)
    assert f"[{PLUGIN_DIST}]" in lines["reward"], _report(proc)
    assert "'max_chars': 1500" in lines["reward"], _report(proc)
    assert " rank " in lines.get("advantage", ""), _report(proc)


def test_invalid_plugin_config_value_is_reported(venv: Venv):
    proc = _train(venv, "experiment=example_plugin", "reward.penalty=-1")
    assert proc.returncode == 2, _report(proc)
    assert "[reward.penalty] got -1.0; expected a number >= 0.0" in proc.stderr, _report(proc)


# -- (d): the plugin's own tests against the installed wheel --------------------------------------


def test_plugin_own_tests_pass(venv: Venv):
    proc = _run(
        [venv.python, "-m", "pytest", PLUGIN_SRC / "tests", "-q", "-p", "no:cacheprovider"],
        cwd=venv.workdir,
        timeout=300,
    )
    assert proc.returncode == 0, _report(proc)
    assert " passed" in proc.stdout and "skipped" not in proc.stdout, _report(proc)


# -- (e): a plugin that fails to import -----------------------------------------------------------


def test_broken_plugin_is_reported_and_skipped(broken_plugin: Venv):
    data = _components(broken_plugin)
    failed = {p["name"]: p for p in data["plugins"]["failed"]}
    assert failed.get("broken") == {
        "name": "broken",
        "distribution": BROKEN_DIST,
        "error": "ImportError: missing dependency xyz",
    }, data["plugins"]
    assert "example" in {p["name"] for p in data["plugins"]["loaded"]}, data["plugins"]
    # what it registered before failing was rolled back; the healthy plugin is unaffected
    assert "broken_reward" not in _names(data, "reward")
    assert _names(data, "reward").get("length_penalized_outcome") == PLUGIN_DIST


def test_broken_plugin_is_named_in_the_text_listing(broken_plugin: Venv):
    proc = _run([broken_plugin.python, "-m", "framework", "components"], cwd=broken_plugin.workdir)
    _check(proc, "seekrl components")
    assert "FAILED  broken (seekrl-broken-plugin)" in proc.stdout, _report(proc)
    assert "plugin 'broken'" in proc.stderr and "missing dependency xyz" in proc.stderr, _report(
        proc
    )


def test_unknown_component_chains_the_plugin_error(broken_plugin: Venv):
    proc = _train(broken_plugin, "reward=broken_reward")
    assert proc.returncode != 0, _report(proc)
    err = proc.stderr
    assert "[reward] got 'broken_reward'; expected one of:" in err, _report(proc)
    assert "'broken' (ImportError: missing dependency xyz)" in err, _report(proc)
    # the original exception, with its own traceback, as the cause of the registry error
    assert "ImportError: missing dependency xyz" in err, _report(proc)
    assert "seekrl_broken_plugin" in err, _report(proc)
    assert "The above exception was the direct cause of the following exception" in err, _report(
        proc
    )
    assert err.index("ImportError: missing dependency xyz") < err.rindex("UnknownComponentError")


def test_broken_plugin_is_silent_without_plugins(broken_plugin: Venv):
    data = _components(broken_plugin, SEEKRL_NO_PLUGINS="1")
    assert data["plugins"]["failed"] == [], data["plugins"]
    proc = _train(broken_plugin, "reward=broken_reward", SEEKRL_NO_PLUGINS="1")
    assert proc.returncode == 2, _report(proc)
    assert "[reward] got 'broken_reward'" in proc.stderr, _report(proc)
    assert "missing dependency xyz" not in proc.stderr + proc.stdout, _report(proc)
    assert "failed to load" not in proc.stderr, _report(proc)
