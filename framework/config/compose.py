"""The one place that drives Hydra: load components, check choices, compose, validate, run.

Each function takes the table of app schemas (app name -> its dataclass) it may compose; the apps'
table is :data:`framework.cli.app.APPS`, and a library function that composes one app's config (the
train job's final comparison composes the ``eval`` app's) passes just that app's schema.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.search_path_plugin import SearchPathPlugin

from framework.config.validate import validate
from framework.paths import config_dir, package_dir
from framework.problems import ConfigError
from framework.registry import ALL, load_components
from framework.registry.core import UnknownComponentError, unknown_component_error
from framework.registry.plugins import config_search_path, failures, loaded

# `group=value`, `+group=value`, `++group=value` or `~group`; values may be sweeps `a,b`.
_CHOICE = re.compile(r"^\+{0,2}(?P<group>[a-z_]+)=(?P<value>[A-Za-z0-9_.,/-]*)$")

#: the config nodes :func:`store_schemas` put in Hydra's store, by name
_STORED: dict[str, Any] = {}


class PluginConfigDirs(SearchPathPlugin):
    """Appends each loaded plugin's config directory after the framework's own ``conf/``."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        dirs = set(config_search_path())
        for plugin in loaded():
            if plugin.config_dir in dirs:
                search_path.append(provider=f"seekrl-plugin:{plugin.name}", path=plugin.config_dir)


def store_schemas(schemas: Mapping[str, type]) -> None:
    """Store each app schema as ``<app>_schema`` (primary configs list it first in defaults).

    Once per process: the schemas are fixed dataclasses, and building their nodes took about half
    of every ``load_config`` (0.24 s of each of its four ``prepare`` calls on 2 Zen 3 cores). A
    store whose nodes are no longer the ones put there (cleared, or overwritten) is stored again.
    """
    cs = ConfigStore.instance()
    names = {app: f"{app}_schema.yaml" for app in schemas}
    if all(n in _STORED and cs.repo.get(n) is _STORED[n] for n in names.values()):
        return
    for app, schema in schemas.items():
        cs.store(name=f"{app}_schema", node=schema)
    _STORED.update({n: cs.repo.get(n) for n in names.values()})


def prepare(schemas: Mapping[str, type] | None = None) -> None:
    """Register built-ins, load plugins, store the app schemas and put the plugins' config
    directories on Hydra's search path (idempotent)."""
    load_components()
    store_schemas(schemas or {})
    Plugins.instance().register(PluginConfigDirs)


def group_options(group: str) -> list[str]:
    """Every option of a config group: registry names, files in conf/ and plugin config dirs."""
    prepare()
    names = set(ALL[group].names()) if group in ALL else set()
    dirs: list[Path | None] = [config_dir()]
    dirs += [
        Path(p.removeprefix("file://")) for p in config_search_path() if p.startswith("file://")
    ]
    for p in config_search_path():
        if p.startswith("pkg://"):
            dirs.append(_package_dir(p.removeprefix("pkg://")))
    for d in dirs:
        if d is not None and (d / group).is_dir():
            names |= {f.stem for f in (d / group).glob("*.yaml")}
    return sorted(names)


def file_groups() -> set[str]:
    """The config groups that are not registries but have option files in conf/ (``algorithm``,
    ``trainer``, ``scale``, ...): its folders that hold YAML files, Hydra's own settings aside."""
    root = config_dir()
    return {
        d.name for d in root.iterdir() if d.is_dir() and d.name != "hydra" and any(d.glob("*.yaml"))
    }


def _package_dir(dotted: str) -> Path | None:
    """The folder a ``pkg://package/sub/dir`` search-path entry names."""
    parts = dotted.strip("/").replace("/", ".").split(".")
    root = package_dir(parts[0])
    return None if root is None else root.joinpath(*parts[1:])


def check_choices(args: Sequence[str]) -> list[UnknownComponentError]:
    """Errors for command-line group choices that name no option (with the closest match)."""
    errors = []
    for arg in args:
        m = _CHOICE.match(arg)
        if not m or (m["group"] not in ALL and m["group"] not in file_groups()):
            continue
        options = group_options(m["group"])
        errors += [
            unknown_component_error(m["group"], value, options)
            for value in m["value"].split(",")
            if value not in ("", "null") and value not in options
        ]
    return errors


def run_app(
    app: str,
    task: Callable[[Any], Any],
    schemas: Mapping[str, type],
    argv: Sequence[str] | None = None,
) -> Any:
    """Compose ``conf/<app>.yaml`` with the command-line overrides, validate it against
    ``schemas[app]``, call ``task``.

    Exit status 2 with one line per problem on a configuration error.
    """
    import hydra
    from omegaconf import DictConfig

    prepare(schemas)
    args = list(sys.argv[1:] if argv is None else argv)
    errors = check_choices(args)
    if errors:
        failed = failures()
        if failed:  # the missing component may live in a plugin that failed: chain its error
            raise errors[0] from failed[0].exception
        print("invalid configuration:\n  " + "\n  ".join(map(str, errors)), file=sys.stderr)
        raise SystemExit(2)
    schema = schemas[app]
    result: dict[str, Any] = {}

    def _main(cfg: DictConfig) -> Any:
        try:
            typed: Any = validate(cfg, schema)
        except ConfigError as exc:
            if exc.__cause__ is not None:
                raise
            print(exc, file=sys.stderr)
            raise SystemExit(2) from None
        result["value"] = task(typed)
        return result["value"]

    main = hydra.main(config_path=str(config_dir()), config_name=app, version_base="1.3")(_main)
    saved = sys.argv
    sys.argv = [saved[0] if saved else app, *args]
    try:
        main()
    finally:
        sys.argv = saved
    return result.get("value")


def compose(app: str, overrides: Sequence[str], schemas: Mapping[str, type]) -> Any:
    """The composed (untyped) config of ``app`` with ``overrides``, as the command line would build it.

    ``run_dir`` (where the app has one) defaults to ``runs/<app>/compose`` since no Hydra run
    directory exists here.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    prepare(schemas)
    args = list(overrides)
    has_run_dir = "run_dir" in getattr(schemas.get(app), "__dataclass_fields__", {})
    if has_run_dir and not any(a.startswith("run_dir=") for a in args):
        args.append(f"run_dir=runs/{app}/compose")
    if GlobalHydra.instance().is_initialized():  # inside an app (seekrl-study composes train)
        return hydra_compose(app, overrides=args)
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return hydra_compose(app, overrides=args)


def load_config(app: str, overrides: Sequence[str], schemas: Mapping[str, type]) -> Any:
    """The validated, typed config of ``app`` (raises ConfigError or UnknownComponentError)."""
    prepare(schemas)
    errors = check_choices(overrides)
    if errors:
        failed = failures()
        raise errors[0] from (failed[0].exception if failed else None)
    return validate(compose(app, overrides, schemas), schemas[app])
