"""``seekrl <command> [args]``: one entry point for every app."""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "train": "framework.cli.train",
    "eval": "framework.cli.evaluate",
    "index": "framework.cli.index",
    "synth": "framework.cli.synth",
    "serve": "framework.cli.serve",
    "components": "framework.cli.components",
    "rollout": "framework.cli.rollout",
    "sft": "framework.cli.sft",
    "study": "framework.cli.study",
    "export": "framework.cli.export",
}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        got = sys.argv[1] if len(sys.argv) > 1 else None
        print(
            f"[seekrl] got command {got!r}; expected one of {list(COMMANDS)}. "
            "Fix: run e.g. 'seekrl train' or 'seekrl components'.",
            file=sys.stderr,
        )
        raise SystemExit(2)
    command = sys.argv.pop(1)
    sys.argv[0] = f"seekrl-{command}"
    result = importlib.import_module(COMMANDS[command]).main()
    if isinstance(result, int):
        raise SystemExit(result)


if __name__ == "__main__":
    main()
