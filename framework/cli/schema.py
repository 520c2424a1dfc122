"""Typed top-level configs of the apps (train, eval, index, synth, serve, rollouts), and the table of
every app's schema.

Component sections (``advantage``, ``loss``, ``kl``, ``reward``, ``sampler``, ...) are typed ``Any``
here: Hydra fills them with the config dataclass that the chosen registry entry declared, so each is
typed by its own schema. Third-party objects (loggers) use ``_target_``.

The app schemas compose sections from every layer (the agent loop's budgets, LoRA, the Lightning
trainer, the SFT stage), so they live here in the app layer, which may import them all, and not in
:mod:`framework.config`, the bottom layer that the components themselves import. The SFT stage's own
schemas (``SFTConfig``, ``WarmStartConfig``) live with it in :mod:`framework.sft.config`, because the
train app's warm start runs that stage as a library; the trainer settings both stages share
(``TrainerConfig``) live in :mod:`framework.lightning.trainer`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from framework.algorithms.rollout_correction import rollout_source_problems
from framework.config.app import RUN_DIR, schedule_problems, target_problems
from framework.config.problems import Problem, check, check_choice, check_range
from framework.config.study import StudyConfig
from framework.health.config import HealthConfig
from framework.lightning.trainer import TrainerConfig
from framework.rollout.engine import AgentConfig
from framework.sft.config import SFTConfig, WarmStartConfig
from framework.training.lora import LoraConfig


@dataclass
class OptimConfig:
    """AdamW and its schedule (paper: lr 2e-6, one update per batch)."""

    lr: float = field(default=2e-6, metadata={"help": "peak learning rate"})
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    warmup_steps: int = 0
    schedule: str = field(default="constant", metadata={"help": "constant, linear or cosine"})
    grad_clip: float = field(default=1.0, metadata={"help": "max gradient norm; 0 disables"})
    policy_epochs: int = field(default=1, metadata={"help": "optimisation passes per batch"})
    micro_batch_size: int = field(default=8, metadata={"help": "rollouts per forward/backward"})
    micro_batch_tokens: int = field(
        default=4096,
        metadata={"help": "padded tokens per forward/backward (memory bound); 0 = no limit"},
    )
    skip_zero_advantage: bool = field(
        default=True,
        metadata={"help": "no forward/backward for rollouts whose loss terms are 0 (exact)"},
    )
    fused: bool = field(
        default=True,
        metadata={"help": "torch's fused AdamW kernel on CPU/CUDA parameters (false = foreach)"},
    )

    def problems(self) -> list[Problem]:
        out = schedule_problems(self)
        out += check_range(self.beta1, "beta1", low=0.0, high=1.0, high_inclusive=False)
        out += check_range(self.beta2, "beta2", low=0.0, high=1.0, high_inclusive=False)
        out += check_range(self.policy_epochs, "policy_epochs", low=1)
        out += check_range(self.micro_batch_size, "micro_batch_size", low=1)
        out += check_range(self.micro_batch_tokens, "micro_batch_tokens", low=0)
        return out


@dataclass
class LoggingConfig:
    """What the train app writes besides scalars."""

    dump_trajectories: bool = field(
        default=True, metadata={"help": "trajectories/step-NNNNNN.jsonl every step"}
    )
    text_every_n_steps: int = field(
        default=1, metadata={"help": "trajectory text samples to TensorBoard; 0 disables"}
    )
    text_samples: int = field(default=2, metadata={"help": "trajectories per text sample"})

    def problems(self) -> list[Problem]:
        out = check_range(self.text_every_n_steps, "text_every_n_steps", low=0)
        out += check_range(self.text_samples, "text_samples", low=0)
        return out


@dataclass
class FinalEvalConfig:
    """The comparison a run ends with: its warm start and its trained policy evaluated on the same
    validation questions with the same sampling (common random numbers), paired by question."""

    enabled: bool = field(
        default=True, metadata={"help": "evaluate the warm start and the trained policy at the end"}
    )
    questions: int = field(default=32, metadata={"help": "validation questions (0 = all)"})
    samples_per_question: int = field(default=2, metadata={"help": "samples of each question"})
    seed: int = field(default=0, metadata={"help": "question subset and sampling seed"})
    batch_questions: int = field(
        default=16,
        metadata={
            "help": "questions in flight: batch_questions x samples rollouts advance together, "
            "a finished one replaced at once by the next (continuous batching)"
        },
    )
    bootstrap: int = field(default=2000, metadata={"help": "resamples of the paired interval"})

    def problems(self) -> list[Problem]:
        out = check_range(self.questions, "questions", low=0)
        out += check_range(self.samples_per_question, "samples_per_question", low=1)
        out += check_range(self.batch_questions, "batch_questions", low=1)
        out += check_range(self.bootstrap, "bootstrap", low=100)
        return out

    def settings(self) -> dict[str, Any]:
        """The eval app's settings of both evaluations."""
        return {
            "split": "validation",
            "questions": self.questions,
            "samples_per_question": self.samples_per_question,
            "seed": self.seed,
            "batch_questions": self.batch_questions,
        }


@dataclass
class TrainConfig:
    """The ``train`` app."""

    algorithm: str = field(default=MISSING, metadata={"help": "bundle name, set by algorithm/"})
    seed: int = field(default=0, metadata={"help": "one seed for data, rollouts and torch"})
    run_dir: str = RUN_DIR
    advantage: Any = MISSING
    loss: Any = MISSING
    kl: Any = MISSING
    reward: Any = MISSING
    sampler: Any = MISSING
    dataset: Any = MISSING
    rollout: Any = MISSING
    retriever: Any = MISSING
    agent: AgentConfig = field(default_factory=AgentConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: Any = None
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    resume: str | None = field(
        default=None,
        metadata={"help": "a .ckpt file, or a run directory whose newest checkpoint is resumed"},
    )
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    final_eval: FinalEvalConfig = field(default_factory=FinalEvalConfig)
    dry_run: bool = field(
        default=False,
        metadata={"help": "validate, bind every component and load the data, then stop"},
    )
    optimized_metric: str = field(
        default="val/accuracy", metadata={"help": "metric returned to Hydra sweepers"}
    )

    def problems(self) -> list[Problem]:
        from framework.training.checkpoints import latest_checkpoint
        from framework.training.inputs import missing_providers

        out = target_problems(self.logger, "logger")
        out += missing_providers({"advantage": self.advantage})  # what the estimator requires
        correction = getattr(self.loss, "rollout_correction", "none")
        out += rollout_source_problems(correction, self.rollout)
        if self.resume is not None:
            try:
                latest_checkpoint(self.resume)
            except FileNotFoundError:
                out.append(
                    Problem(
                        "resume",
                        self.resume,
                        "a .ckpt file or a run directory with checkpoints/step-*.ckpt",
                        "point resume at an existing checkpoint, or drop it to start fresh",
                    )
                )
        return out


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
            "a finished one replaced at once by the next (continuous batching)"
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
        if self.retriever is not None and getattr(self.retriever, "name", None) == "http":
            out += [
                Problem(
                    "retriever.name",
                    "http",
                    "a local backend (faiss, bm25, hybrid)",
                    "serve a local index; the http backend is the client of this server",
                )
            ]
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


def store_schemas() -> None:
    """Store every app schema as ``<app>_schema`` (primary configs list it first in defaults)."""
    cs = ConfigStore.instance()
    for app, schema in APPS.items():
        cs.store(name=f"{app}_schema", node=schema)
