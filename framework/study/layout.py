"""Where a study keeps what it makes: its directory's files and folders, and its archive's.

``<out_dir>/`` (``runs/study/<name>`` by default) holds ``runs/<arm>/seed<S>/`` (each run's
directory: its config, checkpoints, policy, logs), ``eval/start/`` and ``eval/<arm>/seed<S>/``
(the evaluations), ``archive/`` (what the report is computed from, :mod:`framework.study.archive`)
and the report itself; a screen's published page keeps its records in the folder of its name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from framework.study.types import JSON

ARCHIVE = "archive"


#: the archive's folder of run records (not ``runs/``, which .gitignore keeps out of commits)
TRAINING = "training"


TEST_COUNTS = "test_evaluations.json"


#: the study's basis (what its runs and evaluations were made on), in the study and its archive
BASIS = "basis.json"


def run_dir_of(root: Path, arm: str, seed: int) -> Path:
    return root / "runs" / arm / f"seed{seed}"


def eval_dir(root: Path, arm: str | None, seed: int | None = None) -> Path:
    """The study's evaluation directory of the warm start (``arm`` None) or of one run."""
    return root / "eval" / "start" if arm is None else root / "eval" / arm / f"seed{seed}"


def read_json_object(path: Path) -> dict[str, JSON] | None:
    """The JSON object in ``path``; None when it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def saved_config(run: Path) -> dict[str, Any] | None:
    """A run's resolved config as it saved it (``config.yaml``), as plain data; None when it is
    missing or unreadable."""
    import yaml

    try:
        data = yaml.safe_load((run / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def published_records(publish: str | Path) -> Path:
    """The folder beside a screen's page (``publish``) that holds its records and report:
    ``docs/benchmarks/screen.md`` -> ``docs/benchmarks/screen``."""
    return Path(publish).with_suffix("")
