"""Where components are registered, read from the sources without importing anything.

A module registers a component with ``@REWARDS.register("name", config=...)`` or
``REWARDS.add("name", target, config=...)``. Reading the sources finds those calls cheaply and with
no side effects (no torch, no vLLM). Two things use it: the unknown-name error, to tell a component
that is defined but was not imported from one that is not installed, and the test that every
built-in module that registers components is listed in ``BUILTIN_MODULES``.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from framework.registry import state

#: The directory of the ``framework`` package.
FRAMEWORK_DIR = Path(__file__).resolve().parents[1]
#: The directory of this package, whose kinds.py and __init__.py are read (not imported).
_REGISTRY_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Registration:
    """One ``<REGISTRY>.register(name, ...)`` or ``<REGISTRY>.add(name, ...)`` call in a source file.

    Attributes:
        module: dotted name of the module that makes the call.
        path: its file.
        line: line of the call.
        group: the registry's group, e.g. ``advantage``.
        name: the registered name; None when it is neither a literal nor a module-level constant.
    """

    module: str
    path: Path
    line: int
    group: str
    name: str | None

    @property
    def where(self) -> str:
        """``path:line``, relative to the checkout for the framework's own modules."""
        try:
            path = self.path.relative_to(FRAMEWORK_DIR.parent)
        except ValueError:
            path = self.path
        return f"{path}:{self.line}"


def _registry_groups() -> dict[str, str]:
    """Variable name -> group of every registry in :mod:`framework.registry.kinds`, read from its
    source (``NAME: Registry[...] = Registry("kind", group=...)``; the group defaults to the kind),
    so this module imports none of the registries it describes."""
    path = _REGISTRY_DIR / "kinds.py"
    out: dict[str, str] = {}
    for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
        target: ast.expr | None = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        call = getattr(node, "value", None)
        if not (
            isinstance(target, ast.Name)
            and isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "Registry"
            and call.args
            and isinstance(call.args[0], ast.Constant)
        ):
            continue
        group = next((k.value for k in call.keywords if k.arg == "group"), call.args[0])
        if isinstance(group, ast.Constant) and isinstance(group.value, str):
            out[target.id] = group.value
    return out


def builtin_modules() -> tuple[str, ...]:
    """``BUILTIN_MODULES`` of ``framework/registry/__init__.py``, as it is now. The package is
    always loaded before this, its submodule, is (Python runs a package's ``__init__`` first);
    this module does not import it, as the package imports this module through the registries."""
    return tuple(sys.modules[__package__ or "framework.registry"].BUILTIN_MODULES)


def registrations_in(path: Path, module: str, text: str | None = None) -> list[Registration]:
    """Every registration in the source file ``path`` (dotted name ``module``).

    Recognises the registries by their names in :mod:`framework.registry.kinds`, also when imported
    under another name (``from framework.registry import REWARDS as R``) or reached as an attribute
    (``kinds.REWARDS.register``).

    Raises:
        SyntaxError: the file does not parse.
    """
    groups = _registry_groups()
    tree = ast.parse(path.read_text(encoding="utf-8") if text is None else text, str(path))
    aliases = {var: var for var in groups}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            aliases.update({a.asname: a.name for a in node.names if a.asname and a.name in groups})
    constants: dict[str, str] = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            constants[node.targets[0].id] = node.value.value
    out = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("register", "add")
        ):
            continue
        owner = node.func.value
        var = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", None)
        if var not in aliases:
            continue
        first = node.args[0] if node.args else None
        name = None
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            name = first.value
        elif isinstance(first, ast.Name):
            name = constants.get(first.id)
        out.append(Registration(module, path, node.lineno, groups[aliases[var]], name))
    return sorted(out, key=lambda r: r.line)


def package_registrations(
    root: Path, package: str, name: str | None = None
) -> Iterator[Registration]:
    """Registrations in every module of ``package``, whose directory (or single file) is ``root``.

    Args:
        root: the package directory, or the file of a single-module package.
        package: its dotted name.
        name: parse only files that mention this name (a cheap filter for lookups).
    """
    files = [root] if root.is_file() else sorted(root.rglob("*.py"))
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if ".register(" not in text and ".add(" not in text:
            continue
        if name is not None and name not in text:
            continue
        try:
            yield from registrations_in(path, _module_name(root, package, path), text)
        except SyntaxError:
            continue


def _module_name(root: Path, package: str, path: Path) -> str:
    if root.is_file():
        return package
    parts = [package, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unimported_fix(group: str, name: str) -> str | None:
    """What to do when ``group=name`` is registered by a module that was not imported.

    Looks in the framework's modules, then in the packages of the plugins of the entry-point group
    (loaded, failed or not loaded).

    Returns:
        The fix, naming the module and what keeps it from being imported (a module missing from
        ``BUILTIN_MODULES``, a plugin that failed to import, plugins turned off); None when no
        module registers the name (it is not installed) or the module that does was imported.
    """
    if group not in _registry_groups().values():
        return None
    for reg in package_registrations(FRAMEWORK_DIR, "framework", name):
        if (reg.group, reg.name) == (group, name):
            fix = _framework_fix(reg)
            if fix:
                return fix
    for plugin, root, package in _plugin_packages():
        for reg in package_registrations(root, package, name):
            if (reg.group, reg.name) == (group, name):
                fix = _plugin_fix(plugin, reg)
                if fix:
                    return fix
    return None


def _framework_fix(reg: Registration) -> str | None:
    if reg.module not in builtin_modules():
        return (
            f"add '{reg.module}' to BUILTIN_MODULES in framework/registry/__init__.py: "
            f"'{reg.name}' is registered at {reg.where}, but nothing imports that module"
        )
    if reg.module not in sys.modules:
        return (
            f"call framework.registry.load_components() first: it imports {reg.module}, which "
            f"registers '{reg.name}' at {reg.where}"
        )
    return None


@dataclass(frozen=True)
class _Plugin:
    name: str
    distribution: str
    value: str


def _plugin_fix(plugin: _Plugin, reg: Registration) -> str | None:
    failed = {f.name: f for f in state.failures()}
    loaded = {p.name for p in state.loaded()}
    at = f"'{reg.name}' at {reg.where}"
    if plugin.name in failed:
        f = failed[plugin.name]
        return (
            f"fix the import error of plugin '{f.name}' ({f.error_type}: {f.message}), "
            f"which registers {at}"
        )
    if plugin.name not in loaded:
        if state.autoload_disabled():
            return (
                f"unset {state.DISABLE_ENV}: plugin '{plugin.name}' ({plugin.distribution}) "
                f"registers {at}, but plugin autoloading is off"
            )
        return (
            f"load the plugins first (framework.registry.load_components()): plugin "
            f"'{plugin.name}' ({plugin.distribution}) registers {at}"
        )
    if reg.module not in sys.modules:
        return (
            f"import {reg.module} from the entry point of plugin '{plugin.name}' ({plugin.value}): "
            f"it registers {at}, but loading the plugin does not import it"
        )
    return None


def _plugin_packages() -> Iterator[tuple[_Plugin, Path, str]]:
    """Each plugin with the directory (or file) and name of its top-level package."""
    found = {p.name: _Plugin(p.name, p.distribution, p.value) for p in state.loaded()}
    found.update({f.name: _Plugin(f.name, f.distribution, f.value) for f in state.failures()})
    for ep in importlib.metadata.entry_points(group=state.ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist is not None else "?"
        found.setdefault(ep.name, _Plugin(ep.name, dist, ep.value))
    for plugin in found.values():
        package = plugin.value.split(":")[0].strip().split(".")[0]
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        if spec.submodule_search_locations:
            for location in spec.submodule_search_locations:
                yield plugin, Path(location), package
        elif spec.origin and spec.origin.endswith(".py"):
            yield plugin, Path(spec.origin), package
