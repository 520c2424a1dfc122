"""Share of type annotations that mention ``Any``, per package of ``framework/``.

An annotation is a parameter's, a return's or an annotated assignment's (class fields included);
it mentions ``Any`` when the name ``Any`` (or ``typing.Any``) appears anywhere inside it, so
``dict[str, Any]`` counts. CI prints the table; ``--max-share`` makes the run fail when one of the
``--packages`` goes over the given share (the architecture's target is 5% for eval, rl, rollout
and study).

    python3 tools/any_share.py                      # every package, and the whole framework
    python3 tools/any_share.py --packages eval rl rollout study --max-share 0.05
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "framework"
TARGETS = ("eval", "rl", "rollout", "study")


def mentions_any(node: ast.expr) -> bool:
    """Whether the annotation names ``Any`` (bare, ``typing.Any`` or inside a string)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == "Any":
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "Any":
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            try:
                inner = ast.parse(sub.value, mode="eval").body
            except SyntaxError:
                continue
            if mentions_any(inner):
                return True
    return False


def annotations(tree: ast.AST) -> list[ast.expr]:
    """Every parameter, return and annotated-assignment annotation in a module."""
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
            params += [p for p in (a.vararg, a.kwarg) if p is not None]
            found += [p.annotation for p in params if p.annotation is not None]
            if node.returns is not None:
                found.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
    return found


@dataclass
class Share:
    package: str
    total: int = 0
    with_any: int = 0

    @property
    def share(self) -> float:
        return self.with_any / self.total if self.total else 0.0


def measure(root: Path = ROOT) -> dict[str, Share]:
    """Per top-level package (a module directly in framework/ counts as ``(top)``)."""
    shares: dict[str, Share] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        package = rel.parts[0] if len(rel.parts) > 1 else "(top)"
        share = shares.setdefault(package, Share(package))
        for ann in annotations(ast.parse(path.read_text(), filename=str(path))):
            share.total += 1
            share.with_any += mentions_any(ann)
    return shares


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", nargs="*", default=None, help="packages to check")
    parser.add_argument("--max-share", type=float, default=None, help="fail above this share")
    args = parser.parse_args(argv)
    shares = measure()
    print(f"{'package':<12} {'annotations':>11} {'with Any':>9} {'share':>7}")
    for s in sorted(shares.values(), key=lambda s: s.package):
        print(f"{s.package:<12} {s.total:>11} {s.with_any:>9} {s.share:>7.1%}")
    total = Share("framework", sum(s.total for s in shares.values()))
    total.with_any = sum(s.with_any for s in shares.values())
    print(f"{total.package:<12} {total.total:>11} {total.with_any:>9} {total.share:>7.1%}")
    targets = [p for p in (args.packages or TARGETS) if p in shares]
    tgt = Share("targets", sum(shares[p].total for p in targets))
    tgt.with_any = sum(shares[p].with_any for p in targets)
    print(f"{'+'.join(targets):<12} {tgt.total:>11} {tgt.with_any:>9} {tgt.share:>7.1%}")
    if args.max_share is not None:
        over = [p for p in targets if shares[p].share > args.max_share]
        if over:
            print(f"over {args.max_share:.1%}: {', '.join(over)}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
