"""Where the framework's own files are."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def config_dir() -> Path:
    """The Hydra config directory: ``framework/conf`` in a wheel, ``<repo>/conf`` in a checkout."""
    for candidate in (_PACKAGE / "conf", _PACKAGE.parent / "conf"):
        if (candidate / "train.yaml").is_file():
            return candidate
    raise FileNotFoundError(
        f"[paths.config_dir] got no train.yaml in {_PACKAGE / 'conf'} or {_PACKAGE.parent / 'conf'}; "
        "expected the shipped Hydra configs. Fix: reinstall seekrl (pip install -e . from a checkout)."
    )
