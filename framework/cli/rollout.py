"""``seekrl-rollout``: run the policy as a search agent on a few questions and show its trajectories.

seekrl-rollout                                  # 4 validation questions x 2 rollouts, SmolLM2, FAISS
seekrl-rollout num_questions=8 group_size=4 split=validation agent.max_turns=6
seekrl-rollout rollout.policy.source=path rollout.policy.path=runs/.../checkpoint
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from framework.cli.app import run_app
from framework.cli.schema import RolloutsConfig
from framework.types import STATUSES


def rollouts(cfg: RolloutsConfig) -> dict[str, Any]:
    """Sample questions, roll them out, score, print and dump the trajectories."""
    from framework.data.schema import DatasetError
    from framework.registry import DATASETS, RETRIEVERS, ROLLOUT_BACKENDS
    from framework.retrieval.types import RetrievalError
    from framework.rollout.engine import AgentLoop
    from framework.rollout.policy import PolicyError
    from framework.rollout.records import render_record, trajectory_records
    from framework.rollout.scoring import score

    try:
        items = DATASETS.bind(cfg.dataset)(cfg.split)
        retriever = RETRIEVERS.bind(cfg.retriever)()
        backend = ROLLOUT_BACKENDS.bind(cfg.rollout)()
    except (DatasetError, RetrievalError, PolicyError) as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(1) from None
    chosen = random.Random(cfg.seed).sample(items, min(cfg.num_questions, len(items)))
    loop = AgentLoop(backend, retriever, cfg.agent)
    clock = time.perf_counter()
    trajectories = loop.run([it.question for it in chosen], cfg.group_size)
    seconds = time.perf_counter() - clock
    scores = score(trajectories, chosen, cfg.reward)
    records = trajectory_records(trajectories, chosen, scores)
    out = Path(cfg.run_dir) / "trajectories.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    for r in records[: cfg.show]:
        print(render_record(r))
    tokens = sum(t.stats["generated_tokens"] for t in trajectories)
    statuses = {s: sum(t.status == s for t in trajectories) for s in STATUSES}
    summary = {
        "rollouts": len(trajectories),
        "mean_reward": float(scores.total.mean()),
        "statuses": statuses,
        "generated_tokens": tokens,
        "seconds": round(seconds, 1),
        "trajectories": str(out),
    }
    print(json.dumps(summary, indent=2))
    retriever.close()
    return summary


def main() -> None:
    run_app("rollouts", rollouts)


if __name__ == "__main__":
    main()
