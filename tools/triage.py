"""Draw an error-analysis set from trajectory records, Signals-style: each record with probability
proportional to ``1 + its triage score`` (the number of signals it fired; framework/rollout/
signals.py), without replacement, seeded.

    python3 tools/triage.py runs/<run>/trajectories --n 20 --seed 0 [--out picked.jsonl]

Reads every ``*.jsonl`` under the given files or folders (the trainer's trajectory dumps,
``logging.dump_trajectories``); records that predate the signals are scored from nothing (0). Prints
each picked record's signals and question, and writes the picked records as JSONL with ``--out``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def read_records(paths: list[Path]) -> list[dict[str, Any]]:
    files: list[Path] = []
    for p in paths:
        files += sorted(p.rglob("*.jsonl")) if p.is_dir() else [p]
    out = []
    for f in files:
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                msg = f"[triage] {f}:{n} is not JSON ({exc}). Fix: pass JSONL files."
                raise SystemExit(msg) from None
    return out


def score(record: dict[str, Any]) -> int:
    return sum(bool(v) for v in (record.get("signals") or {}).values())


def draw(records: list[dict[str, Any]], n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` records (all when fewer), each draw proportional to ``1 + score``, no replacement."""
    rng = random.Random(seed)
    pool = list(records)
    picked = []
    while pool and len(picked) < n:
        weights = [1 + score(r) for r in pool]
        k = rng.choices(range(len(pool)), weights=weights)[0]
        picked.append(pool.pop(k))
    return picked


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    missing = [p for p in args.paths if not p.exists()]
    if missing:
        raise SystemExit(f"[triage] got {missing}, which do not exist. Fix: pass record files.")
    records = read_records(args.paths)
    picked = draw(records, args.n, args.seed)
    fired = sum(score(r) > 0 for r in records)
    print(f"{len(records)} records, {fired} with a signal; picked {len(picked)}:")
    for r in picked:
        names = [k for k, v in (r.get("signals") or {}).items() if v]
        print(f"  [{', '.join(names) or 'clean'}] {r.get('question_id')}: {r.get('question')}")
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in picked))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
