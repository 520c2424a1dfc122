"""The imports of ``framework/`` run one way: down the layers, with no cycle across packages.

Layers, bottom to top; a module imports from its own layer and the layers below it, never above:

    0. shared leaves  ``framework/__init__.py``, ``types.py`` (the component config base, the
                      batches, trajectories and retrieved text every layer passes around),
                      ``problems.py`` (config problems and their error), ``paths.py`` (files and
                      the cache directory), ``progress.py``, ``accelerators.py`` (keeps JAX off the
                      GPU), ``interrupt.py`` (SIGTERM as Ctrl-C, a study's children stopped with it)
    1. config and     ``config/`` (the checks app schemas share, validation, Hydra composition) and
       registries     ``registry/`` (the registries, each kind's protocol, plugin loading and the
                      components listing; ``plugins.py`` is the old name of
                      ``registry/plugins.py``). One layer: validation looks component names up in
                      the registries; the registries import nothing from ``config/`` (they check
                      configs against ``types.ComponentConfig``). Nothing in ``config/`` imports
                      ``rollout/``, ``sft/``, ``training/``, ``lightning/`` or ``cli/``.
    2. algorithms     ``algorithms/``: pure tensor functions
    3. components     ``retrieval/``, ``rewards/``, ``data/``, ``samplers/``, ``rollout/``,
                      ``training/`` (what SFT and RL share to train a policy: token layout and
                      log-probs, precision, LoRA, checkpoints and loading a policy from one,
                      schedule), ``eval/`` (evaluation runs and the eval app's schema),
                      ``health/``; the index, serve, synth and rollout apps' schemas sit with the
                      code they configure
    4. glue           ``lightning/``: the callbacks, trainer settings and run housekeeping both
                      training stages share
    5. stages         ``sft/``: expert trajectories, the SFT module, the SFT run and RL's warm start;
                      ``rl/``: the train job's recipe, top to bottom (its dry-run plan, its rollout
                      batch, step, update, input providers, Lightning module and data module, the
                      run that fits them, the summary), which the train app calls as a library.
                      ``rl/`` may import ``sft/``, never the reverse
    6. apps           ``cli/`` and ``__main__.py``: parse and compose the config, call one entry
                      point of the layers below; the table of app schemas (``cli/app.py``) lives
                      here because it names every layer's
                      schemas. ``study/``: the study and the screen (its schema, runs, checks,
                      archive, statistics, Markdown, runner), the library the study app calls. It
                      composes the train and eval apps' configs (``cli/app.py``) and runs them, and
                      their evaluation, in child processes, so it sits beside ``cli/``, which
                      imports its schema and its entry point; no module cycle joins the two

Packages of one layer may import each other (the vLLM backend loads training's LoRA adapters), but
no modules may form an import cycle, whether they sit in two packages or in one.

Every import counts, module-level and function-level (a deferred import still runs when the function
does, and is still a dependency), and so does the package ``__init__`` that Python runs before a
submodule. The graph is read from the sources (AST), so nothing is imported to build it.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from pathlib import Path

import framework

FRAMEWORK_DIR = Path(framework.__file__).resolve().parent

#: bottom to top; a package is the first name under ``framework`` ("" for framework/__init__.py)
LAYERS: tuple[frozenset[str], ...] = (
    frozenset(
        {"", "types", "problems", "paths", "progress", "accelerators", "memory", "interrupt"}
    ),
    frozenset({"config", "registry", "plugins"}),
    frozenset({"algorithms"}),
    frozenset(
        {"retrieval", "rewards", "data", "samplers", "rollout", "training", "eval", "health"}
    ),
    frozenset({"lightning"}),
    frozenset({"sft", "rl"}),
    frozenset({"cli", "study", "__main__"}),
)

#: what ``config/`` may not import: it is imported by every component
ABOVE_CONFIG = ("rollout", "sft", "rl", "training", "lightning", "cli")


@dataclass(frozen=True)
class Import:
    """One arrow of the graph: ``source`` imports ``target`` at ``where`` (path:line)."""

    source: str
    target: str
    where: str


def package_of(module: str) -> str:
    """``framework.rollout.engine`` -> ``rollout``; ``framework.paths`` -> ``paths``; root -> ''."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_of(package: str) -> int | None:
    return next((i for i, layer in enumerate(LAYERS) if package in layer), None)


def _module_name(path: Path, root: Path, top: str) -> str:
    parts = [top, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.AST, module: str, is_package: bool, modules: set[str], top: str):
    """The modules of ``top`` that an import statement runs (those it names, or whose
    ``__init__`` defines the names it takes)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name == top or alias.name.startswith(top + "."):
                yield alias.name
    elif isinstance(node, ast.ImportFrom):
        if node.level:  # relative: from the module's own package, one level up per extra dot
            package = module if is_package else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{node.module}" if node.module else package
        else:
            base = node.module or ""
        if base != top and not base.startswith(top + "."):
            return
        for alias in node.names:
            yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base


def import_graph(root: Path = FRAMEWORK_DIR, top: str = "framework") -> list[Import]:
    """Every arrow between the modules under ``root`` (the package ``top``), read with ``ast``."""
    paths = {_module_name(p, root, top): p for p in sorted(root.rglob("*.py"))}
    names = set(paths)
    arrows: dict[Import, None] = {}  # ordered, one arrow per statement and target
    for module, path in paths.items():
        where = path.relative_to(root.parent).as_posix()
        parent = module.rpartition(".")[0]
        if parent:  # importing a submodule runs its package's __init__ first
            arrows[Import(module, parent, f"{where} (its package)")] = None
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            for target in _imported(node, module, path.name == "__init__.py", names, top):
                if target in names and target != module:
                    arrows[Import(module, target, f"{where}:{node.lineno}")] = None
    return list(arrows)


def cycles(arrows: list[Import]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for a in arrows:
        graph.setdefault(a.source, set()).add(a.target)
        graph.setdefault(a.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def cross_package_cycles(arrows: list[Import]) -> list[list[Import]]:
    """For each import cycle that spans packages, its arrows from one package into another."""
    out = []
    for component in cycles(arrows):
        members = set(component)
        if len({package_of(m) for m in members}) > 1:
            out.append(
                [
                    a
                    for a in arrows
                    if a.source in members
                    and a.target in members
                    and package_of(a.source) != package_of(a.target)
                ]
            )
    return out


def module_cycles(arrows: list[Import]) -> list[list[Import]]:
    """For each import cycle between modules, wherever they sit, the arrows that form it.

    The implicit arrow from a submodule to its package's ``__init__`` is left out: a package
    whose ``__init__`` imports its own submodules is the usual layout, not a cycle. An explicit
    import of the package (``from framework.registry import X`` in a registry module) counts.
    """
    explicit = [a for a in arrows if not a.where.endswith("(its package)")]
    out = []
    for component in cycles(explicit):
        members = set(component)
        out.append([a for a in explicit if a.source in members and a.target in members])
    return out


def upward_from_config(arrows: list[Import]) -> list[Import]:
    return [
        a
        for a in arrows
        if package_of(a.source) == "config" and package_of(a.target) in ABOVE_CONFIG
    ]


def upward(arrows: list[Import]) -> list[Import]:
    """Arrows from a layer into a higher one."""
    return [
        a
        for a in arrows
        if (layer_of(package_of(a.target)) or 0) > (layer_of(package_of(a.source)) or 0)
    ]


def _lines(arrows: list[Import]) -> str:
    return "\n".join(f"  {a.where}: {a.source} -> {a.target}" for a in arrows)


# -- the framework's own graph -------------------------------------------------------------------


def test_every_package_has_a_layer():
    packages = {package_of(a.source) for a in import_graph()}
    unplaced = sorted(p for p in packages if layer_of(p) is None)
    assert not unplaced, (
        f"[import graph] got packages with no layer: {unplaced}; expected each in LAYERS of "
        "tests/unit/test_import_graph.py. Fix: add it to the layer its imports allow, and to the "
        "layer list in the docstring."
    )


def test_no_import_cycle_across_packages():
    found = cross_package_cycles(import_graph())
    assert not found, (
        "[import graph] got import cycles across packages:\n"
        + "\n".join(_lines(c) for c in found)
        + (
            "\nexpected none. Fix: move the shared piece down to a package both may import "
            "(see the layers in tests/unit/test_import_graph.py)."
        )
    )


def test_no_import_cycle_inside_a_package():
    found = module_cycles(import_graph())
    assert not found, (
        "[import graph] got import cycles between modules:\n"
        + "\n".join(_lines(c) for c in found)
        + (
            "\nexpected none, also inside one package. Fix: move what both modules need into a "
            "module that imports neither (framework/registry/state.py, framework/rollout/config.py)."
        )
    )


def test_registry_imports_nothing_from_config():
    found = [
        a
        for a in import_graph()
        if package_of(a.source) == "registry" and package_of(a.target) == "config"
    ]
    assert not found, (
        f"[import graph] got imports from framework/registry/ into framework/config/:\n"
        f"{_lines(found)}\nexpected none: config validates against the registries. Fix: move the "
        "piece the registry needs below both (framework/types.py, framework/problems.py)."
    )


def test_config_imports_nothing_above_it():
    found = upward_from_config(import_graph())
    assert not found, (
        f"[import graph] got imports from framework/config/ into {', '.join(ABOVE_CONFIG)}:\n"
        f"{_lines(found)}\nexpected none: every component imports config. Fix: move the schema "
        "that needs them up to the layer that runs it (framework/eval/config.py, "
        "framework/sft/config.py)."
    )


def test_imports_run_down_the_layers():
    found = upward(import_graph())
    assert not found, (
        f"[import graph] got imports into a higher layer:\n{_lines(found)}\nexpected imports "
        "from the same layer or below (layers in tests/unit/test_import_graph.py). Fix: move the "
        "imported piece down, or the importing code up."
    )


def test_cli_apps_do_not_import_each_other_for_shared_helpers():
    # the train and sft apps once imported each other; what both need lives below them now
    apps = {"framework.cli.train", "framework.cli.sft"}
    found = [a for a in import_graph() if a.source in apps and a.target in apps]
    assert not found, f"[import graph] got\n{_lines(found)}\nexpected no import between them."


# -- the checks themselves can fail ---------------------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "framework"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def test_a_function_level_cycle_and_an_upward_config_import_are_found(tmp_path):
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "config/__init__.py": "from framework.config.problems import Problem\n",
            "config/problems.py": "class Problem: ...\n",
            "config/schema.py": """\
                def problems():
                    from ..training import lora  # function-level, relative
                    return lora
            """,
            "training/__init__.py": "",
            "training/lora.py": "from framework.config import schema\n",
        },
    )
    arrows = import_graph(root)
    assert Import("framework.config.schema", "framework.training.lora", "") in [
        Import(a.source, a.target, "") for a in arrows
    ]
    assert [a.where for a in upward_from_config(arrows)] == ["framework/config/schema.py:2"]
    assert [a.source for a in upward(arrows)] == ["framework.config.schema"]
    (cycle,) = cross_package_cycles(arrows)
    assert {(a.source, a.target) for a in cycle} == {
        ("framework.config.schema", "framework.training.lora"),
        ("framework.training.lora", "framework.config.schema"),
    }


def test_a_cycle_inside_one_package_is_not_a_cross_package_cycle(tmp_path):
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "rollout/__init__.py": "",
            "rollout/engine.py": "from framework.rollout import tools\n",
            "rollout/tools.py": "def f():\n    from framework.rollout.engine import X\n",
        },
    )
    arrows = import_graph(root)
    assert cycles(arrows) == [["framework.rollout.engine", "framework.rollout.tools"]]
    assert cross_package_cycles(arrows) == []
    (cycle,) = module_cycles(arrows)
    assert {(a.source, a.target) for a in cycle} == {
        ("framework.rollout.engine", "framework.rollout.tools"),
        ("framework.rollout.tools", "framework.rollout.engine"),
    }


def test_a_package_init_importing_its_submodules_is_no_cycle(tmp_path):
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "registry/__init__.py": "from framework.registry.core import Registry\n",
            "registry/core.py": "class Registry: ...\n",
            "registry/sources.py": "def f():\n    from framework.registry import Registry\n",
        },
    )
    assert module_cycles(import_graph(root)) == []
