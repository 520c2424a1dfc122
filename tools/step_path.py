"""Follow one RL step's data through the code: which framework files it passes, in order.

Runs one :func:`~framework.rl.step.rl_step` of the tiny LM on scripted rollouts (the unit
tests' plugin-free setting: ``tests/unit/training/test_step.py``), records every call into a
``framework/`` function made within ``--depth`` calls below ``rl_step`` (comprehensions count as
part of the function they are written in), and collapses consecutive calls in one file into a
*stop*. A *return* is a stop in a file the path had already left: the
count a reader pays in jumping back and forth. Run from the repository root:

    python3 tools/step_path.py --depth 2 --out docs/dev/step_path.json

Compare two commits by running it in a second checkout of the other commit
(``PYTHONPATH=<checkout> python3 <checkout>/tools/step_path.py``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: code objects that are part of the function they are written in, not calls a reader follows
INLINE = {"<listcomp>", "<genexpr>", "<dictcomp>", "<setcomp>"}
sys.path.insert(0, str(REPO))


def trace_step(depth: int, algorithm: str) -> list[str]:
    """Framework files of the calls within ``depth`` levels below ``rl_step``, in call order."""
    try:
        import framework.rl.step as step_module
    except ImportError:  # commits before framework/rl/ (issue 37)
        import framework.training.step as step_module  # type: ignore[no-redef]
    from framework.types import GroupRequest
    from tests.unit.training.test_step import ANSWER, SEARCH, run_step

    root = str(REPO / "framework") + "/"
    calls: list[str] = []
    stack: list[tuple[bool, bool]] = []  # per active frame: (under rl_step, counts as a level)
    level = [0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            if code is step_module.rl_step.__code__:
                level[0] = 0
                stack.append((True, False))
                return
            inside = bool(stack) and stack[-1][0]
            # a comprehension or generator expression is part of the function it is written in
            counts = inside and code.co_name not in INLINE
            stack.append((inside, counts))
            if counts:
                level[0] += 1
                if level[0] <= depth and code.co_filename.startswith(root):
                    calls.append(code.co_filename[len(root) :])
        elif event == "return" and stack:
            _, counts = stack.pop()
            if counts:
                level[0] -= 1

    scripts = [[SEARCH, ANSWER.format("Steven Spielberg")], [ANSWER.format("Boston")]] * 2
    groups = [GroupRequest(0, 2), GroupRequest(1, 2)]
    sys.setprofile(profile)
    try:
        run_step(scripts, groups, f"algorithm={algorithm}")
    finally:
        sys.setprofile(None)
    return calls


def stops(calls: list[str]) -> list[str]:
    """Consecutive calls in one file as one stop."""
    out: list[str] = []
    for f in calls:
        if not out or out[-1] != f:
            out.append(f)
    return out


def returns(path: list[str]) -> int:
    """Stops in a file the path had already left."""
    seen: set[str] = set()
    count = 0
    for k, f in enumerate(path):
        if f in seen and path[k - 1] != f:
            count += 1
        seen.add(f)
    return count


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--algorithm", default="grpo")
    ap.add_argument("--out", type=Path, default=None, help="write the figures here as JSON")
    args = ap.parse_args(argv)
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    rows = []
    for d in args.depth:
        path = stops(trace_step(d, args.algorithm))
        row = {
            "depth": d,
            "stops": len(path),
            "files": len(set(path)),
            "returns": returns(path),
            "path": path,
        }
        rows.append(row)
        print(f"depth {d}: {row['stops']} stops in {row['files']} files, {row['returns']} returns")
        print("  " + " -> ".join(path))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        data = {"commit": commit, "algorithm": args.algorithm, "rows": rows}
        args.out.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
