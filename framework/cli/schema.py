"""Typed top-level configs of the apps (train, eval, index, synth, serve, rollouts), and the table of
every app's schema.

Component sections (``advantage``, ``loss``, ``kl``, ``reward``, ``sampler``, ...) are typed ``Any``
here: Hydra fills them with the config dataclass that the chosen registry entry declared, so each is
typed by its own schema. Third-party objects (loggers) use ``_target_``.

The app schemas compose sections from every layer (the agent loop's budgets, LoRA, the Lightning
trainer, the SFT stage), so they live here in the app layer, which may import them all, and not in
:mod:`framework.config`, the bottom layer that the components themselves import. The two training
stages keep theirs with their recipes: ``TrainConfig`` (the train app) in :mod:`framework.rl.config`,
``SFTConfig`` and ``WarmStartConfig`` in :mod:`framework.sft.config`; the trainer settings both share
(``TrainerConfig``) live in :mod:`framework.lightning.trainer`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from framework.config.app import RUN_DIR
from framework.config.problems import Problem, check, check_choice, check_range
from framework.retrieval.types import remote_problem
from framework.rl.config import TrainConfig
from framework.rollout.engine import AgentConfig
from framework.sft.config import SFTConfig
from framework.study.schema import StudyConfig


@dataclass
class EvalConfig:
    """The ``eval`` app: k rollouts per question, sampling metrics, tool use, entity analysis."""

    seed: int = field(default=0, metadata={"help": "question subset and sampling seed"})
    run_dir: str = RUN_DIR
    checkpoint: str | None = field(
        default=None,
        metadata={
            "help": "None: the base rollout.policy; a seekrl-train/seekrl-sft run directory, "
            "a policy folder, or a step-*.ckpt file"
        },
    )
    dataset: Any = MISSING
    split: str = field(
        default="validation",
        metadata={
            "help": "split of the configured dataset: validation for choices; test only for a "
            "pre-registered study (docs/study.md, Protocol)"
        },
    )
    files: list[str] = field(
        default_factory=list,
        metadata={"help": "more datasets (Search-R1 JSONL or parquet), reported separately"},
    )
    questions: int = field(default=64, metadata={"help": "questions per dataset (0 = all)"})
    samples_per_question: int = field(default=3, metadata={"help": "k for Pass@k and pass^k"})
    batch_questions: int = field(
        default=16,
        metadata={
            "help": "questions in flight: batch_questions x samples rollouts advance together, "
            "a finished one replaced at once by the next of its wave (continuous batching)"
        },
    )
    wave_questions: int = field(
        default=0,
        metadata={
            "help": "questions per wave (0 = batch_questions): waves run one after another, each "
            "from an empty decoder state, and each is journaled when it ends, so a resumed "
            "evaluation gives the rows of an uninterrupted one byte for byte; a rollout's logits "
            "carry the rounding of the batch it decodes in, so this and batch_questions are "
            "settings of the evaluation, like seed (larger waves: fewer part-empty batches at "
            "their ends, more lost to an interruption)"
        },
    )
    judge: Any = MISSING
    rollout: Any = MISSING
    retriever: Any = MISSING
    agent: AgentConfig = field(default_factory=AgentConfig)
    # Any, not list[str]: compare=<dir> (one directory, e.g. a sweep's) is taken as a list of one
    compare: Any = field(
        default_factory=list,
        metadata={
            "help": "evaluation run directories, or sweep directories (seekrl-eval -m or "
            "seekrl-train -m), to put side by side (no new rollouts); one or a list"
        },
    )
    labels: list[str] = field(
        default_factory=list, metadata={"help": "one label per compare entry; equal labels pool"}
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
        out += check_choice(self.split, "split", ("train", "validation", "test"))
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


@dataclass
class IndexConfig:
    """The ``index`` app: build (or reuse) the configured retriever's corpus store and index."""

    seed: int = 0
    run_dir: str = RUN_DIR
    retriever: Any = MISSING
    smoke_query: str | None = field(
        default="2001: A Space Odyssey",
        metadata={"help": "query run once after building; null skips"},
    )


@dataclass
class SynthConfig:
    """The ``synth`` app: write the synthesized train / validation / test splits."""

    run_dir: str = RUN_DIR
    dataset: Any = MISSING

    def problems(self) -> list[Problem]:
        name = getattr(self.dataset, "name", None)
        return check(
            name == "synth",
            "dataset.name",
            name,
            "synth (the synthesized dataset)",
            "run seekrl-synth with dataset=synth; other datasets are read, not written",
        )


@dataclass
class ServeConfig:
    """The ``serve`` app: the configured retriever behind Search-R1's ``/retrieve`` contract."""

    run_dir: str = RUN_DIR
    retriever: Any = MISSING
    host: str = field(default="127.0.0.1", metadata={"help": "bind address (loopback by default)"})
    port: int = 8000
    allow_remote: bool = field(
        default=False, metadata={"help": "allow a non-loopback host (exposes the index)"}
    )
    default_topk: int = field(default=3, metadata={"help": "topk when a request gives none"})
    max_body_bytes: int = field(default=1_000_000, metadata={"help": "largest request body"})

    def problems(self) -> list[Problem]:
        out = check_range(self.port, "port", low=1, high=65535)
        out += check_range(self.default_topk, "default_topk", low=1)
        out += check_range(self.max_body_bytes, "max_body_bytes", low=1024)
        loopback = self.host in ("127.0.0.1", "localhost", "::1") or self.host.startswith("127.")
        out += check(
            loopback or self.allow_remote,
            "host",
            self.host,
            "a loopback address unless allow_remote=true",
            "keep host=127.0.0.1, or set allow_remote=true to expose the server on purpose",
        )
        remote = remote_problem(
            self.retriever,
            "the server serves an index on this machine",
            f"serve a local index; the {getattr(self.retriever, 'name', '')} backend is a client "
            "of a server",
        )
        out += [remote] if remote is not None else []
        return out


@dataclass
class RolloutsConfig:
    """The ``rollout`` app: the policy as a search agent on a few questions, trajectories shown."""

    run_dir: str = RUN_DIR
    seed: int = field(default=0, metadata={"help": "which questions are drawn"})
    dataset: Any = MISSING
    split: str = field(default="validation", metadata={"help": "train, validation or test"})
    num_questions: int = field(default=4, metadata={"help": "questions drawn from the split"})
    group_size: int = field(default=2, metadata={"help": "rollouts per question"})
    rollout: Any = MISSING
    retriever: Any = MISSING
    agent: AgentConfig = field(default_factory=AgentConfig)
    reward: Any = MISSING
    show: int = field(default=4, metadata={"help": "trajectories printed in full"})

    def problems(self) -> list[Problem]:
        out = check_choice(self.split, "split", ("train", "validation", "test"))
        out += check_range(self.num_questions, "num_questions", low=1)
        out += check_range(self.group_size, "group_size", low=1)
        out += check_range(self.show, "show", low=0)
        return out


#: app name -> (schema class, ConfigStore name the primary config extends)
APPS: dict[str, type] = {
    "train": TrainConfig,
    "eval": EvalConfig,
    "index": IndexConfig,
    "synth": SynthConfig,
    "serve": ServeConfig,
    "rollouts": RolloutsConfig,
    "sft": SFTConfig,
    "study": StudyConfig,
}


#: the config nodes :func:`store_schemas` put in Hydra's store, by name
_STORED: dict[str, Any] = {}


def store_schemas() -> None:
    """Store every app schema as ``<app>_schema`` (primary configs list it first in defaults).

    Once per process: the schemas are fixed dataclasses, and building their nodes took about half
    of every ``load_config`` (0.24 s of each of its four ``prepare`` calls on 2 Zen 3 cores). A
    store whose nodes are no longer the ones put there (cleared, or overwritten) is stored again.
    """
    cs = ConfigStore.instance()
    names = [f"{app}_schema.yaml" for app in APPS]
    if _STORED and all(cs.repo.get(n) is _STORED.get(n) for n in names):
        return
    for app, schema in APPS.items():
        cs.store(name=f"{app}_schema", node=schema)
    _STORED.clear()
    _STORED.update({n: cs.repo.get(n) for n in names})
