"""The ``train`` app's schema: the RL recipe's config (:class:`TrainConfig`) and its own sections.

Component sections (``advantage``, ``loss``, ``kl``, ``reward``, ``sampler``, ...) are typed ``Any``:
Hydra fills them with the config dataclass that the chosen registry entry declared, so each is typed
by its own schema. It composes sections of every layer below the recipe (the agent loop's budgets,
LoRA, the Lightning trainer, the SFT warm start), which :mod:`framework.rl` may import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omegaconf import MISSING

from framework.algorithms.losses.rollout_correction import rollout_source_problems
from framework.config import check_choice, option
from framework.config.app import RUN_DIR, schedule_problems, target_problems
from framework.health.config import HealthConfig
from framework.lightning.strategy import FSDP
from framework.lightning.trainer import TrainerConfig
from framework.problems import Problem, check_range
from framework.rl.inputs import REQUIRING_SECTIONS, missing_providers
from framework.rollout.config import AgentConfig
from framework.sft.config import WarmStartConfig
from framework.sft.expert import expert_protocol_problems
from framework.training.checkpoints import latest_checkpoint
from framework.training.export import ExportConfig
from framework.training.lora import LoraConfig

if TYPE_CHECKING:
    from framework.algorithms.losses.base import PolicyLossConfig
    from framework.algorithms.losses.kl import KLConfig
    from framework.config import ComponentConfig
    from framework.retrieval.types import RetrieverConfigBase
    from framework.rl.augment import AugmenterConfig
    from framework.rollout.hf_backend import TransformersBackendConfig
    from framework.rollout.vllm_backend import VLLMBackendConfig


def _section() -> Any:
    """A component section's default for the type checker (Hydra's is MISSING)."""
    return MISSING


#: what the loss does with over-budget rollouts (``optim.over_budget``)
OVER_BUDGET = ("drop", "train")


@dataclass
class OptimConfig:
    """AdamW and its schedule (paper: lr 2e-6, one update per batch)."""

    lr: float = option(2e-6, "peak learning rate")
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    warmup_steps: int = 0
    schedule: str = option("constant", "constant, linear or cosine")
    grad_clip: float = option(1.0, "max gradient norm; 0 disables")
    policy_epochs: int = option(1, "optimisation passes per batch")
    micro_batch_size: int = option(8, "rollouts per forward/backward")
    mini_batch_size: int = option(
        0,
        "rollouts per optimiser step (PPO mini-batch, whole groups in batch order); "
        "0 = the whole batch, one step per policy epoch",
    )
    micro_batch_tokens: int = option(
        4096, "padded tokens per forward/backward (memory bound); 0 = no limit"
    )
    skip_zero_advantage: bool = option(
        True, "no forward/backward for rollouts whose loss terms are 0 (exact)"
    )
    fused: bool = option(
        True, "torch's fused AdamW kernel on CPU/CUDA parameters (false = foreach)"
    )
    over_budget: str = option(
        "train",
        "rollouts that spent a budget (tool calls, turns or tokens): train = in the loss like any "
        "other rollout, with their reward; drop = left out of the loss, their reward still "
        "counting in their group's advantage (every run before 2026-12-08; docs/rl.md, "
        "'Over-budget rollouts')",
    )

    def problems(self) -> list[Problem]:
        out = schedule_problems(self)
        out += check_range(self.beta1, "beta1", low=0.0, high=1.0, high_inclusive=False)
        out += check_range(self.beta2, "beta2", low=0.0, high=1.0, high_inclusive=False)
        out += check_range(self.policy_epochs, "policy_epochs", low=1)
        out += check_range(self.micro_batch_size, "micro_batch_size", low=1)
        out += check_range(self.mini_batch_size, "mini_batch_size", low=0)
        out += check_range(self.micro_batch_tokens, "micro_batch_tokens", low=0)
        out += check_choice(self.over_budget, "over_budget", OVER_BUDGET)
        return out


@dataclass
class LoggingConfig:
    """What the train app writes besides scalars."""

    dump_trajectories: bool = option(True, "trajectories/step-NNNNNN.jsonl every step")
    text_every_n_steps: int = option(1, "trajectory text samples to TensorBoard; 0 disables")
    text_samples: int = option(2, "trajectories per text sample")

    def problems(self) -> list[Problem]:
        out = check_range(self.text_every_n_steps, "text_every_n_steps", low=0)
        out += check_range(self.text_samples, "text_samples", low=0)
        return out


@dataclass
class FinalEvalConfig:
    """The comparison a run ends with: its warm start and its trained policy evaluated on the same
    validation questions with the same sampling (common random numbers), paired by question."""

    enabled: bool = option(True, "evaluate the warm start and the trained policy at the end")
    questions: int = option(32, "validation questions (0 = all)")
    samples_per_question: int = option(2, "samples of each question")
    seed: int = option(0, "question subset and sampling seed")
    batch_questions: int = option(
        16,
        "questions in flight: batch_questions x samples rollouts advance together, "
        "a finished one replaced at once by the next (continuous batching)",
    )
    bootstrap: int = option(2000, "resamples of the paired interval")

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

    algorithm: str = option(MISSING, "bundle name, set by algorithm/")
    seed: int = option(0, "one seed for data, rollouts and torch")
    run_dir: str = RUN_DIR
    # Component sections: Hydra fills each with the config dataclass its registry entry declared,
    # so the schema leaves them untyped; the type checker sees each kind's config base.
    if TYPE_CHECKING:
        advantage: ComponentConfig = _section()
        loss: PolicyLossConfig = _section()
        kl: KLConfig = _section()
        reward: ComponentConfig = _section()
        sampler: ComponentConfig = _section()
        augment: AugmenterConfig = _section()
        dataset: ComponentConfig = _section()
        rollout: TransformersBackendConfig | VLLMBackendConfig = _section()  # the built-in ones
        retriever: RetrieverConfigBase = _section()
    else:
        advantage: Any = MISSING
        loss: Any = MISSING
        kl: Any = MISSING
        reward: Any = MISSING
        sampler: Any = MISSING
        augment: Any = MISSING
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
    resume: str | None = option(
        None, "a .ckpt file, or a run directory whose newest checkpoint is resumed"
    )
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    final_eval: FinalEvalConfig = field(default_factory=FinalEvalConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    dry_run: bool = option(False, "validate, bind every component and load the data, then stop")
    optimized_metric: str = option("val/accuracy", "metric returned to Hydra sweepers")

    def problems(self) -> list[Problem]:
        out = target_problems(self.logger, "logger")
        # what the estimator and the loss require: a registered provider, or the augmenter
        sections = {s: getattr(self, s) for s in REQUIRING_SECTIONS}
        out += missing_providers(sections, augment=getattr(self, "augment", None))
        if getattr(self.loss, "acts_off_policy_only", False) and self.optim.policy_epochs < 2:
            out.append(
                Problem(
                    "optim.policy_epochs",
                    self.optim.policy_epochs,
                    f"at least 2 with loss={self.loss.name}: its added term compares the policy "
                    "with the one that generated the batch, so it is 0 on the first pass",
                    "set optim.policy_epochs=2 (the loss's algorithm bundle does)",
                )
            )
        if getattr(self.loss, "stages_per_turn", False) and self.optim.mini_batch_size != 0:
            out.append(
                Problem(
                    "optim.mini_batch_size",
                    self.optim.mini_batch_size,
                    f"0 with loss={self.loss.name}: it makes one optimisation pass per model turn "
                    "over the whole batch itself",
                    "set optim.mini_batch_size=0",
                )
            )
        if getattr(self.loss, "stages_per_turn", False) and self.optim.policy_epochs != 1:
            out.append(
                Problem(
                    "optim.policy_epochs",
                    self.optim.policy_epochs,
                    f"1 with loss={self.loss.name}: it makes one optimisation pass per model turn "
                    "of the step's rollouts itself",
                    "set optim.policy_epochs=1 (the loss's algorithm bundle does)",
                )
            )
        if self.trainer.strategy == FSDP and self.lora.enabled:
            out.append(
                Problem(
                    "lora.enabled",
                    True,
                    "false with trainer.strategy=fsdp (a LoRA policy is not sharded: its "
                    "adapters are a fraction of the weights, and the merge for export and "
                    "rollouts reads the whole model)",
                    "use trainer=ddp with LoRA, or set lora.enabled=false",
                )
            )
        if self.warm_start.sft:
            out += expert_protocol_problems(
                self.agent,
                "warm_start.sft=true",
                "set warm_start.sft=false to start RL from rollout.policy as it is",
            )
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
