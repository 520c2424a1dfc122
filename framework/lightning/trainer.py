"""The Lightning trainer as both training stages (RL and SFT) run it: its settings, and what every
run does around ``trainer.fit`` (one precision line, plain progress lines in logs, quiet Lightning
notices, the exit status of an interrupted run).

Heavy imports (Lightning itself) stay inside the functions: every app imports this module.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from framework.config import option
from framework.lightning.strategy import DDPConfig, FSDPConfig, build_strategy, strategy_problems
from framework.problems import Problem, check, check_choice, check_range
from framework.training.precision import PrecisionChoice, choose_precision

if TYPE_CHECKING:
    from lightning.pytorch.callbacks import Callback

#: exit status after SIGINT / SIGTERM once the checkpoint is saved (128 + SIGINT, as shells do)
INTERRUPTED = 130


@dataclass
class TrainerConfig:
    """Arguments of ``lightning.Trainer`` that the presets in ``conf/trainer/`` set."""

    accelerator: str = "cpu"
    devices: Any = 1
    num_nodes: int = 1
    strategy: str = option(
        "auto",
        "auto, ddp (settings: trainer.ddp), fsdp (FSDP2; settings: trainer.fsdp) or another "
        "Lightning strategy name",
    )
    ddp: DDPConfig = field(default_factory=DDPConfig)
    fsdp: FSDPConfig = field(default_factory=FSDPConfig)
    precision: str = option(
        "auto", "auto (bf16-mixed only on hardware with native bf16), or a Lightning value"
    )
    max_steps: int = option(80, "training steps (paper: ~80)")
    log_every_n_steps: int = 1
    device_kind: str = option(
        "auto",
        "the GPU model the dry run plans a GPU run for, matched by name against the recorded "
        "GPU figures (framework/rl/gpu_plan.py), e.g. H200; auto: this machine's first GPU, "
        "else unknown (no GPU figures)",
    )
    checkpoint_every_n_steps: int = option(
        10, "a checkpoint every N steps; 0: no periodic checkpoints"
    )
    checkpoint_at_end: bool = option(
        True,
        "also a checkpoint after the last step (what resume= continues from to train "
        "further); interrupted and health-stopped runs always save one",
    )
    checkpoint_weights_only: bool = option(
        False,
        "periodic and final checkpoints hold the weights only (no optimiser or "
        "scheduler state: a third of the size with AdamW), for export and evaluation; they cannot "
        "resume training (the checkpoint of an interruption is always full)",
    )
    val_every_n_steps: int = option(0, "0: no validation during training")
    val_at_end: bool = option(True, "validate once after training")
    val_questions: int = option(16, "validation subset size (0 = all)")
    val_samples: int = option(1, "rollouts per validation question")
    keep_checkpoints: int = option(2, "newest step checkpoints kept")
    export_policy: bool = option(
        True,
        "save the policy as a HF checkpoint (policy/, in export.dtype) however the run ends: "
        "finished, interrupted or stopped by a health monitor",
    )
    gradient_checkpointing: bool = option(
        True,
        "recompute each decoder layer's activations in the backward pass instead of "
        "keeping them (SFT and RL updates; same numbers, a fraction of the memory)",
    )
    threads: int = option(
        0,
        "torch CPU threads per process; 0 = as found (torch's default, or "
        "OMP_NUM_THREADS, which Hydra's joblib launcher sets to cores // n_jobs)",
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
        out += check_range(self.threads, "threads", low=0)
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
        out += strategy_problems(
            str(self.strategy), self.accelerator, self.precision, self.ddp, self.fsdp
        )
        return out

    def precision_choice(self) -> PrecisionChoice:
        """The precision this machine runs (``auto`` resolved) and why."""
        return choose_precision(self.precision, self.accelerator)


def build_trainer(
    t: TrainerConfig,
    logger: Any,
    run_dir: Any,
    *,
    max_steps: int,
    callbacks: list[Callback],
    val_check_interval: int,
    limit_val_batches: float,
    gradient_clip_val: float | None = None,
) -> Any:
    """The Lightning ``Trainer`` of a training stage (RL and SFT alike), from the ``trainer``
    section: accelerator, devices, strategy and the precision this machine runs; one pass over
    the stage's step stream (``max_steps`` optimiser steps); checkpoints owned by the stage's
    :class:`~framework.lightning.callbacks.StepCheckpoint` (among ``callbacks``); validation every
    ``val_check_interval`` steps over ``limit_val_batches``.

    Args:
        logger: the ``logger`` config section (instantiated here), or None for no logger.
        gradient_clip_val: Lightning's clipping (SFT); RL clips inside its own update.
    """
    import lightning as L
    from hydra.utils import instantiate

    precision: Any = t.precision_choice().precision  # one of Lightning's precision names
    return L.Trainer(
        accelerator=t.accelerator,
        devices=t.devices,
        num_nodes=t.num_nodes,
        strategy=build_strategy(t.strategy, t.ddp, t.fsdp),
        precision=precision,
        max_epochs=1,  # one pass over the stage's step stream, whose length is max_steps
        max_steps=max_steps,
        gradient_clip_val=gradient_clip_val,
        logger=instantiate(logger) if logger is not None else False,
        callbacks=callbacks,
        log_every_n_steps=t.log_every_n_steps,
        val_check_interval=val_check_interval,
        check_val_every_n_epoch=None,
        limit_val_batches=limit_val_batches,
        num_sanity_val_steps=0,
        enable_checkpointing=False,  # StepCheckpoint owns checkpoints
        enable_model_summary=False,
        use_distributed_sampler=False,
        default_root_dir=str(run_dir),
    )


def announce_precision(trainer: Any) -> None:
    """One start-up line: the precision this run trains (and rolls out) in, and why."""
    choice = trainer.precision_choice()
    print(f"seekrl: precision {choice.precision} ({choice.reason})", flush=True)


def apply_gradient_checkpointing(policy: Any, trainer: Any) -> bool:
    """Switch on the policy's activation recomputation when ``trainer.gradient_checkpointing`` is
    set and the model supports it (Hugging Face models; peft wrappers are looked through). It acts
    only in train mode, so rollouts (eval mode, KV cache) are unaffected. Returns whether it is on.

    Measured (``tools/bench/memory.py``, docs/benchmarks/memory.md): one bf16-mixed SmolLM2-135M
    step on 4 sequences of 2,048 tokens peaked at 14.0 GB without it and 6.6 GB with it, in 47.0
    and 49.5 s.
    """
    base = policy.get_base_model() if hasattr(policy, "get_base_model") else policy
    if not trainer.gradient_checkpointing or not getattr(
        base, "supports_gradient_checkpointing", False
    ):
        return False
    kwargs = {"use_reentrant": False}
    if hasattr(base, "activation_checkpointing_enable"):  # transformers >= 5.2 names it so
        base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    return True


def apply_threads(trainer: Any) -> int:
    """Set torch's CPU threads to ``trainer.threads`` (0 leaves them as found); returns the count
    this process runs with, for the run's summary."""

    if trainer.threads:
        torch.set_num_threads(trainer.threads)
    return torch.get_num_threads()


def log_progress(
    label: str, total: int, keys: tuple[str, ...], every_s: float = 0.0
) -> list[Callback]:
    """A plain-line progress callback when stdout is not a terminal (a log file or a pipe)."""
    from framework.lightning.callbacks import LogProgress  # imports Lightning: seconds, on use only

    return [] if sys.stdout.isatty() else [LogProgress(label, total, keys, every_s=every_s)]


def quiet_lightning() -> None:
    """One copy of each Lightning log line (through Hydra's handlers), without notices that do
    not apply to this loop (it keeps the policy in eval mode on purpose, its step stream has a
    length, its batches are plain question indices)."""
    import logging
    import warnings

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        log = logging.getLogger(name)
        for handler in list(log.handlers):
            if isinstance(handler, logging.StreamHandler):
                log.removeHandler(handler)
        log.propagate = True
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(
        lambda record: "litlogger" not in record.getMessage()
    )
    for name in ("lightning.pytorch.trainer.connectors.checkpoint_connector", "faiss.loader"):
        logging.getLogger(name).setLevel(logging.WARNING)
    for pattern in (
        r".*module\(s\) in eval mode.*",
        r".*`IterableDataset` has `__len__` defined.*",
        r".*overridden `transfer_batch_to_device`.*",
        r".*LeafSpec.*",
        r".*litlogger.*",
        # the data module restores the sampler position itself (see framework/rl/data.py)
        r".*resuming from a checkpoint that ended before the epoch ended.*",
    ):
        warnings.filterwarnings("ignore", message=pattern)
