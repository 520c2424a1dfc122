"""``seekrl-components``: every registered component, its source package and config fields."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from framework.registry import ALL
from framework.registry.listing import describe, render


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="seekrl-components", description=__doc__)
    parser.add_argument("kinds", nargs="*", help=f"kinds to list (default all): {', '.join(ALL)}")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)
    unknown = [k for k in args.kinds if k not in ALL]
    if unknown:
        print(
            f"[components.kinds] got {unknown}; expected kinds among {list(ALL)}. "
            "Fix: name registry kinds, or none to list all.",
            file=sys.stderr,
        )
        return 2
    data = describe(args.kinds)
    print(json.dumps(data, indent=2) if args.json else render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
