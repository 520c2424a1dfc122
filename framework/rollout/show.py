"""``seekrl-rollout``'s run: the policy as a search agent on a few questions, its trajectories shown
and written to ``<run_dir>/trajectories.jsonl``."""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from omegaconf import MISSING

from framework.config import option
from framework.config.app import RUN_DIR
from framework.data.schema import DatasetError
from framework.data.synthesis import ALL_SPLITS
from framework.problems import Problem, check_choice, check_range
from framework.registry import DATASETS, RETRIEVERS
from framework.retrieval.types import RetrievalError
from framework.rollout.backend import build_backend
from framework.rollout.config import AgentConfig
from framework.rollout.engine import AgentLoop
from framework.rollout.policy import PolicyError
from framework.rollout.records import render_record, trajectory_records
from framework.rollout.scoring import score
from framework.types import STATUSES, Status


@dataclass
class RolloutsConfig:
    """The ``rollout`` app (:func:`show_rollouts`): the policy as a search agent on a few questions, trajectories shown."""

    run_dir: str = RUN_DIR
    seed: int = option(0, "which questions are drawn")
    dataset: Any = MISSING
    split: str = option("validation", "train, validation, test or validation2")
    num_questions: int = option(4, "questions drawn from the split")
    group_size: int = option(2, "rollouts per question")
    rollout: Any = MISSING
    retriever: Any = MISSING
    agent: AgentConfig = field(default_factory=AgentConfig)
    reward: Any = MISSING
    show: int = option(4, "trajectories printed in full")

    def problems(self) -> list[Problem]:
        out = check_choice(self.split, "split", ALL_SPLITS)
        out += check_range(self.num_questions, "num_questions", low=1)
        out += check_range(self.group_size, "group_size", low=1)
        out += check_range(self.show, "show", low=0)
        return out


class RolloutsSummary(TypedDict):
    """What :func:`show_rollouts` prints and returns."""

    rollouts: int
    mean_reward: float
    statuses: dict[Status, int]
    generated_tokens: int
    seconds: float
    trajectories: str


def show_rollouts(cfg: RolloutsConfig) -> RolloutsSummary:
    """Sample questions, roll them out, score, print and dump the trajectories."""
    try:
        items = DATASETS.bind(cfg.dataset)(cfg.split)
        retriever = RETRIEVERS.bind(cfg.retriever)()
        backend = build_backend(cfg.rollout)
    except (DatasetError, RetrievalError, PolicyError) as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(1) from None
    chosen = random.Random(cfg.seed).sample(items, min(cfg.num_questions, len(items)))
    loop = AgentLoop(backend, retriever, cfg.agent)
    clock = time.perf_counter()
    trajectories = loop.run(
        [it.question for it in chosen], cfg.group_size, prompts=[it.messages() for it in chosen]
    )
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
    summary: RolloutsSummary = {
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
