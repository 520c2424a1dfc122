"""Apps whose config is defined and validated while their body is still being built."""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Any

EXIT_NOT_AVAILABLE = 3


def report_pending(app: str, cfg: Any, what: str) -> None:
    """Print the validated config and exit with status 3: ``what`` is not available yet."""
    print(f"seekrl-{app}: configuration valid: {asdict(cfg)}")
    print(f"seekrl-{app}: {what} is not available in this version yet.", file=sys.stderr)
    raise SystemExit(EXIT_NOT_AVAILABLE)
