"""Where the framework's own files are, and where it caches what it builds."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent

#: environment variable naming the cache directory (indexes, data, models, warm starts)
CACHE_ENV = "SEEKRL_CACHE"


def cache_root(value: str | None) -> Path:
    """The cache directory: ``value``, else ``$SEEKRL_CACHE``, else ``~/.cache/seekrl``."""
    return Path(value or os.environ.get(CACHE_ENV) or "~/.cache/seekrl").expanduser()


def package_dir(name: str) -> Path | None:
    """The folder of an installed package, found without importing it (None when not installed).

    The asset packages are read this way: importing them would run code (and CLIs) they ship.
    """
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def config_dir() -> Path:
    """The Hydra config directory: ``framework/conf`` in a wheel, ``<repo>/conf`` in a checkout."""
    for candidate in (_PACKAGE / "conf", _PACKAGE.parent / "conf"):
        if (candidate / "train.yaml").is_file():
            return candidate
    raise FileNotFoundError(
        f"[paths.config_dir] got no train.yaml in {_PACKAGE / 'conf'} or {_PACKAGE.parent / 'conf'}; "
        "expected the shipped Hydra configs. Fix: reinstall seekrl (pip install -e . from a checkout)."
    )
