"""The ``eval`` app's schema (:class:`EvalConfig`), and the eval config of a train run's policy
(:func:`eval_config_for`: the final comparison's and a study's evaluations)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from omegaconf import MISSING

from framework.config import option
from framework.config.app import RUN_DIR
from framework.data.synthesis import ALL_SPLITS
from framework.problems import Problem, check, check_choice, check_range
from framework.rollout.config import AgentConfig


@dataclass
class EvalConfig:
    """The ``eval`` app: k rollouts per question, sampling metrics, tool use, entity analysis."""

    seed: int = option(0, "question subset and sampling seed")
    run_dir: str = RUN_DIR
    checkpoint: str | None = option(
        None,
        "None: the base rollout.policy; a seekrl-train/seekrl-sft run directory, "
        "a policy folder, or a step-*.ckpt file",
    )
    dataset: Any = MISSING
    split: str = option(
        "validation",
        "split of the configured dataset: validation for choices (validation2: a second "
        "one, on a dataset with validation2_size > 0); test only for a pre-registered study "
        "(docs/study.md, Protocol); not evaluated when files= names any",
    )
    files: list[str] = option(
        default_factory=list,
        help="datasets (Search-R1 JSONL or parquet) to evaluate instead of the configured "
        "dataset's split, each reported separately and per data_source",
    )
    questions: int = option(
        64, "questions per dataset, per data_source in a file with several (0 = all)"
    )
    samples_per_question: int = option(3, "k for Pass@k and pass^k")
    batch_questions: int = option(
        16,
        "questions in flight: batch_questions x samples rollouts advance together, "
        "a finished one replaced at once by the next of its wave (continuous batching)",
    )
    wave_questions: int = option(
        0,
        "questions per wave (0 = batch_questions): waves run one after another, each "
        "from an empty decoder state, and each is journaled when it ends, so a resumed "
        "evaluation gives the rows of an uninterrupted one byte for byte; a rollout's logits "
        "carry the rounding of the batch it decodes in, so this and batch_questions are "
        "settings of the evaluation, like seed (larger waves: fewer part-empty batches at "
        "their ends, more lost to an interruption)",
    )
    judge: Any = MISSING
    rollout: Any = MISSING
    retriever: Any = MISSING
    agent: AgentConfig = field(default_factory=AgentConfig)
    # Any, not list[str]: compare=<dir> (one directory, e.g. a sweep's) is taken as a list of one
    compare: Any = option(
        default_factory=list,
        help="evaluation run directories, or sweep directories (seekrl-eval -m or "
        "seekrl-train -m), to put side by side (no new rollouts); one or a list",
    )
    labels: list[str] = option(
        default_factory=list, help="one label per compare entry; equal labels pool"
    )

    def __post_init__(self) -> None:
        if isinstance(self.compare, str | Path):
            self.compare = [str(self.compare)]

    def problems(self) -> list[Problem]:
        out = check(
            isinstance(self.compare, list) and all(isinstance(c, str) for c in self.compare),
            "compare",
            self.compare,
            "a directory or a list of directories",
            "pass compare=<dir> or compare=[<dir>,<dir>]",
        )
        out += check_range(self.samples_per_question, "samples_per_question", low=1)
        out += check_range(self.questions, "questions", low=0)
        out += check_range(self.batch_questions, "batch_questions", low=1)
        out += check_range(self.wave_questions, "wave_questions", low=0)
        # validation2 is read only from a dataset that has it (synth_dataset says so otherwise)
        out += check_choice(self.split, "split", ALL_SPLITS)
        if self.labels and len(self.labels) != len(self.compare):
            out.append(
                Problem(
                    "labels",
                    self.labels,
                    f"one label per compare entry ({len(self.compare)})",
                    "give as many labels as compare directories, or none",
                )
            )
        for i, f in enumerate(self.files):
            out += check(
                Path(f).expanduser().is_file(),
                f"files.{i}",
                f,
                "an existing JSONL or parquet file",
                "check the path",
            )
        if self.checkpoint is not None:
            from framework.training.checkpoints import policy_folder

            p = Path(self.checkpoint).expanduser()
            ok = p.is_file() or policy_folder(p) is not None or (p / "checkpoints").is_dir()
            out += check(
                ok,
                "checkpoint",
                self.checkpoint,
                "a run directory with policy/, a checkpoint folder with config.json, or a .ckpt",
                "point checkpoint at a finished seekrl-train or seekrl-sft run",
            )
        return out


def eval_config_for(
    train_cfg: Any, checkpoint: Path | None, out: Path, settings: Mapping[str, Any]
) -> EvalConfig:
    """The eval app's config for a policy of a train run: the run's dataset, retriever, rollout
    settings and agent budgets, the rule judge, and ``settings`` (``split``, ``questions``,
    ``samples_per_question``, ``seed``, ``batch_questions``); ``checkpoint`` None evaluates
    ``train_cfg.rollout.policy`` itself (the warm start)."""
    from framework.config.compose import load_config

    keys = ("split", "questions", "samples_per_question", "seed", "batch_questions")
    overrides = [f"run_dir={out}", *(f"{k}={settings[k]}" for k in keys)]
    base = load_config("eval", overrides, {"eval": EvalConfig})
    return replace(
        base,
        checkpoint=None if checkpoint is None else str(checkpoint),
        dataset=train_cfg.dataset,
        retriever=train_cfg.retriever,
        rollout=train_cfg.rollout,
        agent=train_cfg.agent,
    )
