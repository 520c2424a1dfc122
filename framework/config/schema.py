"""Typed top-level configs of the apps (train, eval, index, synth, serve).

Component sections (``advantage``, ``loss``, ``kl``, ``reward``, ``sampler``, ...) are typed ``Any``
here: Hydra fills them with the config dataclass that the chosen registry entry declared, so each is
typed by its own schema. Third-party objects (loggers) use ``_target_``.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from framework.config.problems import Problem, check, check_choice, check_range
from framework.config.study import StudyConfig
from framework.rollout.engine import AgentConfig
from framework.sft.expert import ExpertConfig
from framework.training.lora import LoraConfig
from framework.training.precision import PrecisionChoice, choose_precision

RUN_DIR = "${hydra:runtime.output_dir}"


def schedule_problems(optim: Any) -> list[Problem]:
    """Checks shared by the optimiser sections: lr, weight decay, warm-up, schedule, clipping."""
    out = check_range(optim.lr, "lr", low=0.0, low_inclusive=False)
    out += check_range(optim.weight_decay, "weight_decay", low=0.0)
    out += check_range(optim.warmup_steps, "warmup_steps", low=0)
    out += check_choice(optim.schedule, "schedule", ("constant", "linear", "cosine"))
    out += check_range(optim.grad_clip, "grad_clip", low=0.0)
    return out


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
class TrainerConfig:
    """Arguments of ``lightning.Trainer`` that the presets in ``conf/trainer/`` set."""

    accelerator: str = "cpu"
    devices: Any = 1
    num_nodes: int = 1
    strategy: str = "auto"
    precision: str = field(
        default="auto",
        metadata={
            "help": "auto (bf16-mixed only on hardware with native bf16), or a Lightning value"
        },
    )
    max_steps: int = field(default=80, metadata={"help": "training steps (paper: ~80)"})
    log_every_n_steps: int = 1
    checkpoint_every_n_steps: int = field(default=10, metadata={"help": "0 disables"})
    val_every_n_steps: int = field(default=0, metadata={"help": "0: no validation during training"})
    val_at_end: bool = field(default=True, metadata={"help": "validate once after training"})
    val_questions: int = field(default=16, metadata={"help": "validation subset size (0 = all)"})
    val_samples: int = field(default=1, metadata={"help": "rollouts per validation question"})
    keep_checkpoints: int = field(default=2, metadata={"help": "newest step checkpoints kept"})
    export_policy: bool = field(
        default=True, metadata={"help": "save the trained policy as a HF checkpoint (policy/)"}
    )

    def problems(self) -> list[Problem]:
        out = check_choice(self.accelerator, "accelerator", ("cpu", "gpu", "cuda", "mps", "auto"))
        out += check_choice(
            self.precision,
            "precision",
            ("auto", "32-true", "32", "bf16-mixed", "bf16-true", "16-mixed", "16-true", "64-true"),
        )
        out += check_range(self.num_nodes, "num_nodes", low=1)
        out += check_range(self.max_steps, "max_steps", low=1)
        out += check_range(self.log_every_n_steps, "log_every_n_steps", low=1)
        out += check_range(self.checkpoint_every_n_steps, "checkpoint_every_n_steps", low=0)
        out += check_range(self.val_every_n_steps, "val_every_n_steps", low=0)
        out += check_range(self.val_questions, "val_questions", low=0)
        out += check_range(self.val_samples, "val_samples", low=1)
        out += check_range(self.keep_checkpoints, "keep_checkpoints", low=1)
        ok = (
            self.devices == "auto"
            or (isinstance(self.devices, int) and self.devices >= 1)
            or (isinstance(self.devices, list) and all(isinstance(d, int) for d in self.devices))
        )
        out += check(ok, "devices", self.devices, "'auto', a count >= 1 or a list of ids", "fix it")
        if self.accelerator == "cpu" and self.precision in ("16-mixed", "16-true"):
            out += [
                Problem(
                    "precision",
                    self.precision,
                    "32-true or bf16 on CPU",
                    "use trainer.precision=auto, bf16-mixed or 32-true (fp16 needs a GPU)",
                )
            ]
        return out

    def precision_choice(self) -> PrecisionChoice:
        """The precision this machine runs (``auto`` resolved) and why."""
        return choose_precision(self.precision, self.accelerator)


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


def target_problems(section: Any, path: str) -> list[Problem]:
    """Problems of a ``_target_`` section: the target's module must be importable."""
    if section is None:
        return []
    target = section.get("_target_") if isinstance(section, dict) else None
    if not isinstance(target, str) or "." not in target:
        return [
            Problem(
                f"{path}._target_",
                target,
                "a dotted class path",
                f"set {path}._target_ to e.g. lightning.pytorch.loggers.TensorBoardLogger",
            )
        ]
    module = target.rsplit(".", 1)[0]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    return check(found, f"{path}._target_", target, "an importable module path", "install it")


@dataclass
class SFTOptimConfig:
    """AdamW for the supervised warm start."""

    lr: float = field(default=1e-4, metadata={"help": "peak learning rate"})
    weight_decay: float = 0.0
    warmup_steps: int = 5
    schedule: str = field(default="cosine", metadata={"help": "constant, linear or cosine"})
    grad_clip: float = field(default=1.0, metadata={"help": "max gradient norm; 0 disables"})
    batch_size: int = field(default=4, metadata={"help": "trajectories per optimiser step"})
    epochs: int = field(default=2, metadata={"help": "passes over the expert trajectories"})

    def problems(self) -> list[Problem]:
        out = schedule_problems(self)
        out += check_range(self.batch_size, "batch_size", low=1)
        out += check_range(self.epochs, "epochs", low=1)
        return out


@dataclass
class WarmStartConfig:
    """Where RL starts: the configured policy, an SFT run's policy, or an SFT stage run first."""

    sft: bool = field(
        default=False,
        metadata={"help": "run (or reuse the cached) cold-start SFT first, then RL from it"},
    )
    path: str | None = field(
        default=None,
        metadata={"help": "an seekrl-sft run directory (or its policy/) to start from"},
    )
    expert: ExpertConfig = field(default_factory=ExpertConfig)
    optim: SFTOptimConfig = field(default_factory=SFTOptimConfig)
    eval_questions: int = field(
        default=16, metadata={"help": "test questions for the before/after check; 0 skips it"}
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.eval_questions, "eval_questions", low=0)
        if self.path is not None:
            from framework.training.checkpoints import policy_folder

            out += check(
                policy_folder(self.path) is not None,
                "path",
                self.path,
                "an seekrl-sft run directory with policy/, or a checkpoint folder",
                "point warm_start.path at a finished SFT run, or use warm_start.sft=true",
            )
        return out


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
    resume: str | None = field(
        default=None,
        metadata={"help": "a .ckpt file, or a run directory whose newest checkpoint is resumed"},
    )
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    dry_run: bool = field(
        default=False,
        metadata={"help": "validate, bind every component and load the data, then stop"},
    )
    optimized_metric: str = field(
        default="val/accuracy", metadata={"help": "metric returned to Hydra sweepers"}
    )

    def problems(self) -> list[Problem]:
        from framework.training.checkpoints import latest_checkpoint

        out = target_problems(self.logger, "logger")
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
class SFTConfig:
    """The ``sft`` app: expert trajectories from the synthesis chains, then supervised training.

    ``trainer`` supplies the accelerator, devices, strategy, precision and logging interval; the
    length of the run is ``optim.epochs`` over the kept trajectories.
    """

    seed: int = 0
    run_dir: str = RUN_DIR
    dataset: Any = MISSING
    retriever: Any = MISSING
    rollout: Any = MISSING
    agent: AgentConfig = field(default_factory=AgentConfig)
    expert: ExpertConfig = field(default_factory=ExpertConfig)
    optim: SFTOptimConfig = field(default_factory=SFTOptimConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: Any = None
    val_fraction: float = field(
        default=0.05, metadata={"help": "expert trajectories held out for the validation loss"}
    )
    eval_questions: int = field(
        default=16, metadata={"help": "test questions rolled out before and after; 0 skips"}
    )

    def problems(self) -> list[Problem]:
        out = target_problems(self.logger, "logger")
        out += check_range(self.val_fraction, "val_fraction", low=0.0, high=0.5)
        out += check_range(self.eval_questions, "eval_questions", low=0)
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
    split: str = field(default="test", metadata={"help": "split of the configured dataset"})
    files: list[str] = field(
        default_factory=list,
        metadata={"help": "more datasets (Search-R1 JSONL or parquet), reported separately"},
    )
    questions: int = field(default=64, metadata={"help": "questions per dataset (0 = all)"})
    samples_per_question: int = field(default=3, metadata={"help": "k for Pass@k and pass^k"})
    batch_questions: int = field(default=16, metadata={"help": "questions rolled out together"})
    judge: Any = MISSING
    rollout: Any = MISSING
    retriever: Any = MISSING
    agent: AgentConfig = field(default_factory=AgentConfig)
    compare: list[str] = field(
        default_factory=list,
        metadata={"help": "evaluation run directories to put side by side (no new rollouts)"},
    )
    labels: list[str] = field(
        default_factory=list, metadata={"help": "one label per compare entry; equal labels pool"}
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.samples_per_question, "samples_per_question", low=1)
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
    split: str = field(default="test", metadata={"help": "train, validation or test"})
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
