"""From a composed DictConfig to a validated dataclass tree, reporting every problem at once."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from framework.problems import ConfigError, Problem
from framework.registry import ALL
from framework.registry.core import failed_plugins_note, suggest_fix
from framework.registry.plugins import failures

S = TypeVar("S")

#: ``${required:}``: a value a config file requires, reported as a missing one. A config file cannot
#: say ``???`` over a schema default: OmegaConf's merge keeps the default where the merged-in value is
#: MISSING (an experiment's ``dataset.train: ???`` composes to the schema's None), while an
#: interpolation replaces it, and a command-line value then replaces the interpolation.
REQUIRED = "${required:}"
_REQUIRED = re.compile(r"^\$\{required:\s*\}$")


def validate(cfg: DictConfig, schema: type[S]) -> S:
    """Check ``cfg`` and convert it into ``schema`` (the app's dataclass); nothing heavy runs.

    Checks, all collected before raising: missing mandatory values; every component section names a
    registered component; every dataclass in the tree passes its own ``problems()``; the app-level
    ``problems()`` (cross-section rules).

    Raises:
        ConfigError: one line per problem. When a component name is unknown and a plugin failed to
            load, the plugin's exception is chained as the cause.
    """
    problems: list[Problem] = []
    unknown_names = False
    typed: dict[str, Any] = {}
    for key in cfg:
        key = str(key)
        missing = _missing_keys(cfg, key)
        problems += [
            Problem(
                m, "???", "a value", f"pass {m}=<value> on the command line or set it in a config"
            )
            for m in missing
        ]
        if missing:
            continue
        node = cfg[key]
        if key in ALL and isinstance(node, DictConfig):
            name = node.get("name")
            if name not in ALL[key]:
                unknown_names = True
                problems.append(_unknown_problem(ALL[key], key, name))
                continue
        try:
            typed[key] = _to_python(node)
        except OmegaConfBaseException as exc:
            problems.append(
                Problem(key, "(unresolvable)", "a resolvable value", str(exc).split("\n")[0])
            )
            continue
        problems += [p.under(key) for p in _collect(typed[key])]
    if not problems:
        obj = OmegaConf.to_object(cfg)
        problems += _collect(obj, top_level=True)
        if not problems:
            return obj  # type: ignore[return-value]
    error = ConfigError(problems)
    if unknown_names:
        failed = failures()
        if failed:
            raise error from failed[0].exception
    raise error


def _missing_keys(cfg: DictConfig, key: str) -> list[str]:
    node = cfg._get_node(key)
    if OmegaConf.is_missing(cfg, key) or _is_required(node):
        return [key]
    if isinstance(node, DictConfig):
        missing = {f"{key}.{k}" for k in OmegaConf.missing_keys(node)}
        return sorted(missing | set(required_keys(node, key)))
    return []


def _is_required(node: Any) -> bool:
    raw = node._value() if node is not None and not isinstance(node, DictConfig) else None
    return isinstance(raw, str) and _REQUIRED.match(raw) is not None


def required_keys(node: DictConfig, prefix: str = "") -> list[str]:
    """Dotted paths below ``node`` whose value is still :data:`REQUIRED` (none passed)."""
    out: list[str] = []
    if node._is_none() or node._is_missing() or node._is_interpolation():
        return out  # no children (yet)
    for k in node:
        child = node._get_node(k)
        name = str(k)
        path = f"{prefix}.{name}" if prefix else name
        if isinstance(child, DictConfig):
            out += required_keys(child, path)
        elif _is_required(child):
            out.append(path)
    return out


def _required(*_: Any) -> str:
    # "???", not an error: OmegaConf.missing_keys resolves every interpolation it walks past
    return "???"


def register_required_resolver() -> None:
    """Register ``${required:}`` (idempotent). Validation reports it before anything resolves it;
    resolved, it reads ``"???"``."""
    if not OmegaConf.has_resolver("required"):
        OmegaConf.register_new_resolver("required", _required)


def _unknown_problem(registry: Any, section: str, name: Any) -> Problem:
    names = registry.names()
    _, fix = suggest_fix(section, name, names)
    note = failed_plugins_note()
    return Problem(f"{section}.name", name, f"one of {names}", f"{fix} ({note})" if note else fix)


def _to_python(node: Any) -> Any:
    if OmegaConf.is_config(node):
        return OmegaConf.to_object(node)
    return node


def _collect(obj: Any, *, top_level: bool = False) -> list[Problem]:
    """Problems of every dataclass below ``obj`` (paths relative to ``obj``)."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return []
    out: list[Problem] = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if not top_level:  # nested dataclasses; top-level sections were checked one by one
            out += [p.under(f.name) for p in _collect(value)]
    if hasattr(obj, "problems"):
        out += obj.problems()
    return out
