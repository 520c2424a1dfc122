"""One generic registry class for every component kind.

A registry maps a name to a target (a pure function or a class) and its config dataclass. Every
target takes its config as the keyword argument ``cfg``; :meth:`Registry.bind` returns the target with
``cfg`` bound, so call sites look the same for every kind. Registering also stores the config
dataclass in Hydra's ConfigStore under the registry's group, so ``advantage=rloo`` selects code and
typed schema together.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import importlib.metadata
import inspect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from framework import DISTRIBUTION
from framework.registry.sources import unimported_fix
from framework.registry.state import PluginFailure, current_source, failures
from framework.types import ComponentConfig

#: what is registered: a function or a class taking ``cfg`` (the kind's protocol)
T = TypeVar("T", bound=Callable[..., Any])
#: what :meth:`Registry.bind` returns: the target with ``cfg`` bound (the kind's bound protocol)
B = TypeVar("B", bound=Callable[..., Any])
#: the callable an :class:`Entry` holds
F = TypeVar("F", bound=Callable[..., Any], covariant=True)

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_DEFAULT_STORE = object()


class RegistryError(Exception):
    """Base class of registry errors."""


class DuplicateComponentError(RegistryError):
    """A name was registered twice in one registry."""


class UnknownComponentError(RegistryError, LookupError):
    """A name that no registered component has."""

    def __str__(self) -> str:  # LookupError would quote the message like a dict key
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class FieldInfo:
    """One field of a component config, for listings."""

    name: str
    type: str
    default: str
    help: str


#: how closely a component follows its paper (``ComponentConfig.fidelity``): unstated, the paper's
#: text or its authors' code, its core exact and named pieces chosen here, or reconstructed from the
#: abstract
FIDELITIES = ("", "exact", "partial", "reconstructed")


@dataclass(frozen=True)
class Entry(Generic[F]):
    """A registered component."""

    kind: str
    name: str
    target: F
    config_cls: type[ComponentConfig]
    origin: str  # "module:qualname" of the target
    source: str  # distribution that registered it

    def fields(self) -> list[FieldInfo]:
        """The config fields other than ``name``, with type, default and help text."""
        out = []
        for f in dataclasses.fields(self.config_cls):
            if f.name == "name":
                continue
            if f.default is not dataclasses.MISSING:
                default = repr(f.default)
            elif f.default_factory is not dataclasses.MISSING:
                default = repr(f.default_factory())
            else:
                default = "(required)"
            if default == "'???'":
                default = "(required)"
            typ = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
            out.append(FieldInfo(f.name, str(typ), default, f.metadata.get("help", "")))
        return out


def _distribution_of(module: str) -> str:
    top = module.split(".")[0]
    if top == "framework":  # editable installs record no top-level names
        return DISTRIBUTION
    dists = _packages_distributions().get(top)
    return dists[0] if dists else top


@functools.lru_cache(maxsize=1)
def _packages_distributions() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


def _origin(target: Callable[..., Any]) -> str:
    module = getattr(target, "__module__", "?")
    return f"{module}:{getattr(target, '__qualname__', repr(target))}"


class Registry(Generic[T, B]):
    """Name -> component table for one kind: targets of type ``T``, bound (``cfg`` given) to ``B``.

    Args:
        kind: human name used in messages, e.g. ``advantage``.
        group: Hydra config group the config dataclasses are stored under (default: ``kind``).
        config_store: where to store config nodes; the global Hydra ConfigStore by default, ``None``
            for an isolated registry (tests).
        signature: how the framework calls a target, e.g. ``fn(inputs: AdvantageInputs, *, cfg)
            -> Tensor[N]`` or ``cls(*, cfg)`` (documentation; checked against the built-ins by test).
        methods: what the object a class target builds offers, e.g. ``("close()",)``.
        config_base: the class every config of this kind subclasses (checked when a component
            registers: the framework reads the base's fields). A base defined above the
            registries is declared by its own package with :meth:`declare_config_base`.
    """

    def __init__(
        self,
        kind: str,
        *,
        group: str | None = None,
        config_store: Any = _DEFAULT_STORE,
        signature: str = "",
        methods: tuple[str, ...] = (),
        config_base: type[ComponentConfig] = ComponentConfig,
    ):
        self.kind = kind
        self.group = group or kind
        self.signature = signature
        self.methods = methods
        self._config_base = config_base
        if config_store is _DEFAULT_STORE:
            from hydra.core.config_store import ConfigStore

            config_store = ConfigStore.instance()
        self._store = config_store
        self._entries: dict[str, Entry[T]] = {}

    # -- registration -------------------------------------------------------------------------
    def register(self, name: str, *, config: type[ComponentConfig]) -> Callable[[T], T]:
        """Decorator: register ``target`` under ``name`` with config dataclass ``config``."""

        def decorator(target: T) -> T:
            self.add(name, target, config=config)
            return target

        return decorator

    def add(self, name: str, target: T, *, config: type[ComponentConfig]) -> Entry[T]:
        """Register ``target`` under ``name``; see :meth:`register`.

        Raises:
            DuplicateComponentError: ``name`` is taken; the message names both definitions.
            TypeError: the name, config class or target signature is malformed.
        """
        if not isinstance(name, str) or not _NAME.match(name):
            raise TypeError(
                f"[{self.kind} registry] got name {name!r}; expected lower_snake_case "
                f"(letters, digits, '_', starting with a letter). Fix: rename the component."
            )
        if not (isinstance(config, type) and dataclasses.is_dataclass(config)) or not issubclass(
            config, ComponentConfig
        ):
            raise TypeError(
                f"[{self.kind}.{name}] got config {config!r}; expected a dataclass subclassing "
                "framework.config.ComponentConfig. Fix: declare "
                "'@dataclass class MyConfig(ComponentConfig): ...' and pass config=MyConfig."
            )
        if config.fidelity not in FIDELITIES:
            raise TypeError(
                f"[{self.kind}.{name}] got fidelity {config.fidelity!r}; expected one of "
                f"{list(FIDELITIES)}. Fix: set the config's fidelity ClassVar to one of them."
            )
        base = self._config_base
        if not issubclass(config, base):
            raise TypeError(
                f"[{self.kind}.{name}] got config {config.__name__}; expected a subclass of "
                f"{base.__name__} ({self.config_base}), the base of every {self.kind} config, "
                f"whose fields the framework reads. Fix: declare 'class {config.__name__}"
                f"({base.__name__})'."
            )
        if not callable(target) or not _accepts_cfg(target):
            raise TypeError(
                f"[{self.kind}.{name}] got target {_origin(target)}; expected a callable with a "
                "'cfg' parameter. Fix: add a 'cfg' keyword parameter that receives the config."
            )
        origin = _origin(target)
        if name in self._entries:
            first = self._entries[name]
            raise DuplicateComponentError(
                f"[{self.kind}] got a second definition of '{name}' at {origin} "
                f"(from {current_source.get() or _distribution_of(target.__module__)}); expected "
                f"unique names, and '{name}' is already defined at {first.origin} "
                f"(from {first.source}). Fix: rename one of them."
            )
        source = current_source.get() or _distribution_of(getattr(target, "__module__", "?"))
        entry = Entry(self.kind, name, target, config, origin, source)
        self._entries[name] = entry
        if self._store is not None:
            self._store.store(group=self.group, name=name, node=config(name=name), provider=source)
        return entry

    def declare_config_base(self, base: type[ComponentConfig]) -> None:
        """Declare ``base`` the class every config of this kind subclasses: the package that defines
        it calls this right after the class, before it registers a component, so the registry
        never names a higher layer.

        Raises:
            TypeError: ``base`` is no ComponentConfig, or a component registered already has a
                config that does not subclass it.
        """
        if not (isinstance(base, type) and issubclass(base, ComponentConfig)):
            raise TypeError(
                f"[{self.kind} registry] got config base {base!r}; expected a subclass of "
                "framework.config.ComponentConfig. Fix: declare a ComponentConfig subclass."
            )
        stray = [e.name for e in self._entries.values() if not issubclass(e.config_cls, base)]
        if stray:
            raise TypeError(
                f"[{self.kind} registry] got config base {base.__name__} after {stray} registered "
                f"with configs that do not subclass it; expected the base declared first. Fix: "
                "declare the base right after its class, before any component registers."
            )
        self._config_base = base

    def config_base_class(self) -> type[ComponentConfig]:
        """The class every config of this kind subclasses."""
        return self._config_base

    @property
    def config_base(self) -> str:
        """``module:Class`` of :meth:`config_base_class` (for listings and the README table)."""
        return f"{self._config_base.__module__}:{self._config_base.__qualname__}"

    # -- lookup -------------------------------------------------------------------------------
    def get(self, name: str) -> Entry[T]:
        """The entry registered as ``name``.

        Raises:
            UnknownComponentError: listing the available names and the closest match; when a
                plugin failed to load, its error is chained as the cause.
        """
        try:
            return self._entries[name]
        except KeyError:
            raise self.unknown(name) from _plugin_failure_cause()

    def unknown(self, name: str) -> UnknownComponentError:
        """The error for an unregistered ``name`` (not raised)."""
        return unknown_component_error(self.group, name, self.names())

    def bind(self, cfg: ComponentConfig) -> B:
        """The target registered as ``cfg.name`` with ``cfg`` bound as its ``cfg`` argument."""
        # the registered signature minus its ``cfg`` keyword: what the kind's bound protocol says
        return cast(B, functools.partial(self.get(cfg.name).target, cfg=cfg))

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(sorted(self._entries.values(), key=lambda e: e.name))

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def remove(self, name: str) -> None:
        """Forget ``name`` (tests and plugin reloads); the ConfigStore node is left in place."""
        self._entries.pop(name, None)

    def __repr__(self) -> str:
        return f"Registry(kind={self.kind!r}, names={self.names()})"


def suggest_fix(group: str, name: object, options: list[str]) -> tuple[str, str]:
    """``(hint, fix)`` for an unknown choice: the closest option, if any, and what to type.

    The fix tells "not imported" from "not installed": when a module of the framework or of an
    installed plugin registers ``name`` (found by reading the sources) but was not imported, it says
    why (missing from ``BUILTIN_MODULES``, a plugin's import error, plugins turned off) and what to do;
    otherwise it suggests the closest option or installing the plugin that provides ``name``.
    """
    close = difflib.get_close_matches(str(name), options, n=1, cutoff=0.5)
    hint = f" (closest: '{close[0]}')" if close else ""
    if isinstance(name, str) and _NAME.match(name):
        fix = unimported_fix(group, name)
        if fix is not None:
            return hint, fix
    if close:
        return hint, f"use {group}={close[0]}, or install the plugin that provides '{name}'"
    return "", f"choose one of the options of {group}, or install the plugin that provides '{name}'"


def failed_plugins_note() -> str:
    """A line naming the plugins that failed to load ('' when none did)."""
    failed = _plugin_failures()
    if not failed:
        return ""
    listed = "; ".join(f"'{f.name}' ({f.error_type}: {f.message})" for f in failed)
    return f"Plugins that failed to load and may provide it: {listed}"


def unknown_component_error(group: str, name: object, options: list[str]) -> UnknownComponentError:
    """The error for a choice ``group=name`` that is not among ``options``.

    The message lists the options and the closest match, and names plugins that failed to load.
    """
    hint, fix = suggest_fix(group, name, options)
    msg = f"[{group}] got '{name}'; expected one of: {', '.join(options) or '(none registered)'}{hint}. Fix: {fix}."
    note = failed_plugins_note()
    return UnknownComponentError(f"{msg}\n{note}" if note else msg)


def _accepts_cfg(target: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return True  # builtins without signatures: trust the caller
    return "cfg" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _plugin_failures() -> list[PluginFailure]:
    return failures()


def _plugin_failure_cause() -> BaseException | None:
    failed = _plugin_failures()
    return failed[0].exception if failed else None
