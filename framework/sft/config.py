"""Typed configs of the SFT stage: the ``sft`` app's schema, its optimiser, and the train app's
``warm_start`` section (which runs this stage before RL)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from framework.config import option
from framework.config.app import RUN_DIR, schedule_problems, target_problems
from framework.lightning.strategy import FSDP
from framework.lightning.trainer import TrainerConfig
from framework.problems import Problem, check, check_range
from framework.rollout.config import AgentConfig
from framework.sft.expert import ExpertConfig, expert_protocol_problems
from framework.training.checkpoints import policy_folder
from framework.training.lora import LoraConfig


@dataclass
class SFTOptimConfig:
    """AdamW for the supervised warm start."""

    lr: float = option(1e-4, "peak learning rate")
    weight_decay: float = 0.0
    warmup_steps: int = 5
    schedule: str = option("cosine", "constant, linear or cosine")
    grad_clip: float = option(1.0, "max gradient norm; 0 disables")
    batch_size: int = option(4, "trajectories per optimiser step")
    epochs: int = option(2, "passes over the expert trajectories")
    micro_batch_tokens: int = option(
        4096,
        "padded tokens per forward/backward (memory bound; a batch is split into "
        "micro-batches whose gradients add up to the batch's); 0 = the whole batch at once",
    )

    def problems(self) -> list[Problem]:
        out = schedule_problems(self)
        out += check_range(self.batch_size, "batch_size", low=1)
        out += check_range(self.micro_batch_tokens, "micro_batch_tokens", low=0)
        out += check_range(self.epochs, "epochs", low=1)
        return out


@dataclass
class WarmStartConfig:
    """Where RL starts: the configured policy, an SFT run's policy, or an SFT stage run first."""

    sft: bool = option(False, "run (or reuse the cached) cold-start SFT first, then RL from it")
    path: str | None = option(None, "an seekrl-sft run directory (or its policy/) to start from")
    expert: ExpertConfig = field(default_factory=ExpertConfig)
    optim: SFTOptimConfig = field(default_factory=SFTOptimConfig)
    eval_questions: int = option(16, "validation questions for the before/after check; 0 skips it")
    rl_questions: str = option(
        "all",
        "the train questions RL draws from: all, or unseen (those the cold-start SFT's expert "
        "was not handed, so RL's rewards are not earned on questions the start was trained on; "
        "needs warm_start.sft=true)",
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.eval_questions, "eval_questions", low=0)
        out += check(
            self.rl_questions in ("all", "unseen"),
            "rl_questions",
            self.rl_questions,
            "all or unseen",
            "set warm_start.rl_questions=all (every train question) or unseen",
        )
        out += check(
            self.rl_questions == "all" or (self.sft and self.path is None),
            "rl_questions",
            self.rl_questions,
            "all unless the run makes its cold-start SFT (warm_start.sft=true, no path)",
            "set warm_start.rl_questions=all: the questions an outside SFT run saw are not known",
        )
        if self.path is not None:
            out += check(
                policy_folder(self.path) is not None,
                "path",
                self.path,
                "an seekrl-sft run directory with policy/, or a checkpoint folder",
                "point warm_start.path at a finished SFT run, or use warm_start.sft=true",
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
    val_fraction: float = option(0.05, "expert trajectories held out for the validation loss")
    eval_questions: int = option(16, "validation questions rolled out before and after; 0 skips")

    def problems(self) -> list[Problem]:
        out = target_problems(self.logger, "logger")
        out += check_range(self.val_fraction, "val_fraction", low=0.0, high=0.5)
        out += check_range(self.eval_questions, "eval_questions", low=0)
        out += expert_protocol_problems(self.agent, "the sft app")
        if self.trainer.strategy == FSDP:
            out.append(
                Problem(
                    "trainer.strategy",
                    FSDP,
                    "auto or ddp for the sft app (its module does not shard the policy; "
                    "trainer=fsdp is for seekrl-train's RL stage)",
                    "use trainer=ddp, or trainer.strategy=auto on one device",
                )
            )
        return out
