"""Delete the training checkpoints of a study's runs that are trained and evaluated.

A SmolLM2-135M run keeps two checkpoints of about 1.6 GB each (weights, AdamW state) until its
study ends; a study of 25 runs would hold some 80 GB of them. ``seekrl-study`` deletes them itself
once a run is evaluated (``prune_checkpoints=true``, the default); this tool does the same for a
study directory made by a version without that setting, or for one whose runs are already done::

    python3 tools/prune_checkpoints.py ~/.cache/seekrl/studies/<study>              # once
    python3 tools/prune_checkpoints.py ~/.cache/seekrl/studies/<study> --watch 300  # every 5 min

A run's exported ``policy/`` (its final weights), its records and logs stay; only
``runs/<arm>/seed<S>/checkpoints/*.ckpt`` go, and only when the run is finished and its
``eval/<arm>/seed<S>/results.json`` is written (:func:`framework.study.runs.prune_checkpoints`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from framework.study.runs import prune_checkpoints  # noqa: E402


def prune_study(root: Path) -> int:
    """Prune every (arm, seed) under ``root/runs``; returns the bytes freed."""
    freed = 0
    for run in sorted((root / "runs").glob("*/seed*")):
        if run.is_dir() and run.name[4:].isdigit():
            got = prune_checkpoints(root, run.parent.name, int(run.name[4:]))
            if got:
                print(f"prune_checkpoints: {run.parent.name} {run.name}: {got / 1e9:.1f} GB freed")
            freed += got
    return freed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path, help="the study directory (holds runs/ and eval/)")
    parser.add_argument(
        "--watch", type=float, default=0, help="repeat every this many seconds (0: once)"
    )
    args = parser.parse_args(argv)
    root = args.study.expanduser()
    if not (root / "runs").is_dir():
        print(
            f"[study] got {root}; expected a study directory with runs/. Fix: pass the study's "
            "out_dir.",
            file=sys.stderr,
        )
        return 2
    while True:
        prune_study(root)
        if args.watch <= 0:
            return 0
        time.sleep(args.watch)


if __name__ == "__main__":
    raise SystemExit(main())
