"""Where the framework's own files are."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


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
