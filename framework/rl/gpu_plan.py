"""The dry run's plan for a GPU run: recorded GPU figures where they fit the run, else none.

A run is planned as a GPU run when its trainer or its rollouts are on a GPU
(``trainer.accelerator`` gpu or cuda, or auto on a machine with CUDA; ``rollout.policy.device``
cuda). Its model stages (warm start, RL, final comparison) are then never planned from the CPU
rates of :mod:`framework.rl.plan`: a figure of :data:`GPU_FIGURES` is used when it was measured on
the GPU kind the config names (``trainer.device_kind``), on a model of about the policy's size
(within :data:`SIZE_FACTOR` of its parameter count, read from its ``config.json``) and in the
setting the run uses (transformers rollouts on the GPU, bf16, full fine-tuning, data parallel or
one GPU); otherwise the plan says which of these it has no figures for and gives no time.

How a figure is scaled (one measurement, so a rough guide, not a promise): a step's generation
time grows with the token budget of a rollout (every rollout is planned at its budget, as the
benchmark's random model ran) and with the rollouts each GPU makes beyond the benchmark's batch
(fewer are not assumed faster: its decoder was launch-bound, docs/benchmarks.md); the update grows
with both. Data parallelism splits each step's groups over ``trainer.devices x trainer.num_nodes``
GPUs, and the validation's questions too; the final comparison runs on one. Peak GPU memory is the
benchmark's, per GPU, not scaled.

Light: reads config files only; imports torch (already loaded by the config) only to name this
machine's GPU when ``trainer.device_kind=auto``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from framework.rl.config import TrainConfig
from framework.rollout.policy import SHAPES, PolicyConfig, policy_source
from framework.training.precision import on_gpu

#: a figure is used for a policy within this factor of its model's parameter count, else none:
#: time does not follow size (the 135M shape, 30 layers, generated more slowly than the 1.7B
#: shape, 24 layers), so figures are not interpolated between sizes
SIZE_FACTOR = 1.25
#: SmolLM2's vocabulary (its tokenizer), that of the packaged policy and of random models
#: built with the default tokenizer
SMOLLM2_VOCAB = 49_152
#: where the figures below are written
BENCHMARK = (
    'docs/benchmarks.md "The TRL benchmark at two shapes" and '
    "docs/benchmarks/train_step_gpu_h200.json"
)


@dataclass(frozen=True)
class GpuFigure:
    """One recorded measurement of seekrl's RL step on a GPU (``tools/bench/train_step.py``).

    Attributes:
        device: the GPU as ``torch.cuda.get_device_name`` names it.
        shape: the model measured (a random model of this :data:`SHAPES` name).
        params: its parameter count.
        rollouts: rollouts per step (questions x group).
        tokens: generated tokens per rollout (a random model runs to its limit).
        generation_s: generation seconds of a step (median of the measured steps).
        update_s: backward and optimiser seconds of a step (median).
        samples_per_s: trained rollouts per second.
        rollout_tokens_per_s: generated tokens per second.
        peak_gpu_gb: ``torch.cuda.max_memory_allocated`` over the run.
        peak_rss_gb: the host's peak resident memory.
        setting: what the step did (and did not) include.
        source: where the figures are written.
        date: when they were measured.
        commit: the project's commit they were recorded at.
    """

    device: str
    shape: str
    params: int
    rollouts: int
    tokens: int
    generation_s: float
    update_s: float
    samples_per_s: float
    rollout_tokens_per_s: float
    peak_gpu_gb: float
    peak_rss_gb: float
    setting: str
    source: str
    date: str
    commit: str

    def describe(self) -> str:
        """One line naming the figure and its source."""
        return (
            f"{self.device}, {self.shape} shape ({size_text(self.params)}): {self.setting}, "
            f"{self.rollouts} rollouts x {self.tokens} tokens a step in "
            f"{self.generation_s + self.update_s:.2f} s ({BENCHMARK}, {self.date}, "
            f"commit {self.commit})"
        )


#: the setting of both figures: seekrl's side of the TRL benchmark (docs/benchmarks.md)
_BENCH = "random model, bf16, one turn without retrieval, one update"
#: every GPU figure there is, one entry per benchmark row
GPU_FIGURES: tuple[GpuFigure, ...] = (
    GpuFigure(
        device="NVIDIA H200",
        shape="smollm2-135m",
        params=134_515_008,
        rollouts=32,
        tokens=256,
        generation_s=9.58,
        update_s=1.01,
        samples_per_s=3.02,
        rollout_tokens_per_s=855.0,
        peak_gpu_gb=13.65,
        peak_rss_gb=2.69,
        setting=_BENCH,
        source=BENCHMARK,
        date="2026-11-26",
        commit="94648eb",
    ),
    GpuFigure(
        device="NVIDIA H200",
        shape="smollm2-1.7b",
        params=1_711_376_384,
        rollouts=32,
        tokens=256,
        generation_s=6.22,
        update_s=0.43,
        samples_per_s=4.80,
        rollout_tokens_per_s=1317.0,
        peak_gpu_gb=61.94,
        peak_rss_gb=7.65,
        setting=_BENCH,
        source=BENCHMARK,
        date="2026-11-26",
        commit="94648eb",
    ),
)


def size_text(params: int) -> str:
    """A parameter count as models are named: ``135M``, ``1.71B``."""
    return f"{params / 1e9:.2f}B" if params >= 1e9 else f"{round(params / 1e6)}M"


def device_key(name: str) -> str:
    """A GPU name as it is matched: lower case, alphanumerics only, without the vendor
    (``NVIDIA H200`` and ``h200`` match; ``NVIDIA H200 NVL`` is another kind)."""
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    return key.removeprefix("nvidia")


def device_kind(configured: str) -> str:
    """``trainer.device_kind`` resolved: ``auto`` is this machine's first GPU, else ``unknown``
    (a dry run on a machine without CUDA cannot see the GPU a run will get)."""
    if configured != "auto":
        return configured
    import torch

    if torch.cuda.is_available():
        return str(torch.cuda.get_device_name(0))
    return "unknown"


def decoder_params(dims: Mapping[str, Any]) -> int | None:
    """Parameters of a decoder-only transformer from its ``config.json`` fields.

    The Llama layout (Qwen2, Mistral and SmolLM2 share it): per layer the q, k, v and o
    projections, a gated MLP of three matrices and two norms; the embeddings, a final norm and
    the LM head unless ``tie_word_embeddings`` (absent: untied). Biases are not counted.

    Returns:
        The count, or None where a size field is missing or the model is a mixture of experts
        (whose parameters this layout does not count).
    """
    try:
        h, layers = int(dims["hidden_size"]), int(dims["num_hidden_layers"])
        vocab, inter = int(dims["vocab_size"]), int(dims["intermediate_size"])
        heads = int(dims.get("num_attention_heads") or 1)
        kv_heads = int(dims.get("num_key_value_heads") or heads)
        head_dim = int(dims.get("head_dim") or h // heads)
    except (KeyError, TypeError, ValueError):
        return None
    if any(k in dims for k in ("num_experts", "num_local_experts", "n_routed_experts")):
        return None
    attention = 2 * h * heads * head_dim + 2 * h * kv_heads * head_dim
    per_layer = attention + 3 * h * inter + 2 * h
    head = 0 if dims.get("tie_word_embeddings", False) else vocab * h
    return layers * per_layer + vocab * h + h + head


def policy_params(pcfg: PolicyConfig) -> tuple[int | None, str]:
    """The policy's parameter count, read without loading it, and where it was read (or why it
    could not be)."""
    src = policy_source(pcfg)
    if pcfg.source == "smollm2":  # the packaged SmolLM2-135M-Instruct is that shape
        dims: dict[str, Any] = {**SHAPES["smollm2-135m"], "vocab_size": SMOLLM2_VOCAB}
        return decoder_params({**dims, "tie_word_embeddings": True}), "SmolLM2-135M-Instruct"
    if src.random_dims is not None:
        if pcfg.tokenizer is not None:
            return None, f"a random model whose vocabulary is that of {pcfg.tokenizer}'s tokenizer"
        dims = {**src.random_dims(pcfg), "vocab_size": SMOLLM2_VOCAB, "tie_word_embeddings": True}
        return decoder_params(dims), f"source={pcfg.source}"
    folder = pcfg.checkpoint_dir()
    config = (folder or Path()) / "config.json"
    try:
        dims = json.loads(config.read_text())
    except (OSError, ValueError):
        return None, f"{config} (not readable)"
    params = decoder_params(dims) if isinstance(dims, dict) else None
    if params is None:
        return None, f"{config} (no hidden_size, num_hidden_layers, vocab_size, intermediate_size)"
    return params, str(config)


def _world(cfg: TrainConfig) -> tuple[int, list[str]]:
    """GPUs the run trains on (devices x nodes), and a note where the count is a guess."""
    devices = cfg.trainer.devices
    if isinstance(devices, int):
        count = devices
    elif not isinstance(devices, str):  # a list of device ids
        count = len(devices)
    else:  # "auto": every GPU of the machine, which only that machine knows
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if not count:
            return cfg.trainer.num_nodes, ["trainer.devices=auto planned as 1 GPU a node"]
    return count * cfg.trainer.num_nodes, []


def is_gpu_run(cfg: TrainConfig) -> bool:
    """Whether the run trains or rolls out on a GPU (then its model stages get GPU figures or
    none, never the CPU rates)."""
    return on_gpu(cfg.trainer.accelerator) or cfg.rollout.policy.device.startswith("cuda")


def setting_problems(cfg: TrainConfig) -> list[str]:
    """What in the run differs from the setting every figure was measured in."""
    out = []
    if not on_gpu(cfg.trainer.accelerator):
        out.append(f"training on trainer.accelerator={cfg.trainer.accelerator}")
    if not cfg.rollout.policy.device.startswith("cuda"):
        out.append(
            f"rollouts on rollout.policy.device={cfg.rollout.policy.device} while training on "
            "the GPU (set rollout.policy.device=cuda)"
        )
    if cfg.rollout.name != "transformers" or getattr(cfg.rollout, "decoder", "loop") != "loop":
        out.append(f"rollout={cfg.rollout.name} (figures: the transformers decoding loop)")
    if cfg.lora.enabled:
        out.append("LoRA (figures: full fine-tuning)")
    strategy = str(cfg.trainer.strategy)
    if strategy != "auto" and not strategy.startswith("ddp"):
        out.append(f"strategy={strategy} (figures: one GPU, planned as data parallel over more)")
    precision = cfg.trainer.precision  # auto: bf16 on a GPU that has it, as the recorded ones do
    if precision != "auto" and not precision.startswith("bf16"):
        out.append(f"precision={precision} (figures: bf16)")
    return out


@dataclass(frozen=True)
class GpuPlan:
    """What a GPU run's plan has to go on.

    Attributes:
        device: the GPU kind planned for (``trainer.device_kind`` resolved).
        figure: the figure that fits the run, or None.
        params: the policy's parameter count (None: not read).
        problems: why no figure fits (empty when ``figure`` is set).
        world: GPUs each step's groups are split over.
        notes: guesses the plan made (e.g. a device count).
    """

    device: str
    figure: GpuFigure | None
    params: int | None
    problems: tuple[str, ...]
    world: int
    notes: tuple[str, ...] = ()


def gpu_plan(cfg: TrainConfig, figures: tuple[GpuFigure, ...] = GPU_FIGURES) -> GpuPlan | None:
    """The figure the GPU run ``cfg`` is planned from, or why there is none; None for a CPU run."""
    if not is_gpu_run(cfg):
        return None
    device = device_kind(cfg.trainer.device_kind)
    world, notes = _world(cfg)
    params, read_from = policy_params(cfg.rollout.policy)
    problems = setting_problems(cfg)
    on_device = [f for f in figures if device_key(f.device) == device_key(device)]
    if not on_device:
        recorded = ", ".join(sorted({f.device for f in figures}))
        if device == "unknown":
            problems.append(
                "a GPU not named (trainer.device_kind=auto on a machine without CUDA; name the "
                f"run's GPU, e.g. trainer.device_kind=H200; recorded: {recorded})"
            )
        else:
            problems.append(f"the {device} (recorded: {recorded})")
    figure = None
    if params is None:
        problems.append(f"a model of unknown size ({read_from})")
    else:  # sizes are checked on every device's figures when none is of this device
        candidates = on_device or list(figures)
        nearest = min(candidates, key=lambda f: abs(math.log(f.params / params)))
        if max(nearest.params / params, params / nearest.params) <= SIZE_FACTOR:
            figure = nearest
        else:
            sizes = ", ".join(size_text(n) for n in sorted({f.params for f in candidates}))
            problems.append(
                f"a {size_text(params)}-parameter model (recorded: {sizes}; a figure is used "
                f"within {SIZE_FACTOR}x of its size, not scaled across sizes)"
            )
    if problems:  # a fitting size on another device, or in another setting, is no figure
        figure = None
    return GpuPlan(device, figure, params, tuple(problems), world, tuple(notes))


def generated_tokens(cfg: TrainConfig) -> int:
    """A rollout's generated-token budget: its turns at their limit, within the total budget."""
    a = cfg.agent
    return min(a.max_turns * a.max_new_tokens_per_turn, a.max_total_tokens)


def rollout_seconds(fig: GpuFigure, rollouts: int, tokens: int, *, updates: int = 0) -> float:
    """Seconds of one batch of ``rollouts`` rollouts of ``tokens`` generated tokens on one GPU
    and ``updates`` passes of training over them, scaled from ``fig``."""
    if rollouts <= 0:
        return 0.0
    scale = tokens / fig.tokens
    generation = fig.generation_s * scale * max(1.0, rollouts / fig.rollouts)
    return generation + updates * fig.update_s * scale * rollouts / fig.rollouts


def questions_of(cfg: TrainConfig, configured: int) -> int:
    """Validation questions asked for (0: all; 100 where the split's size is not in the config),
    as :func:`framework.rl.plan.final_seconds` counts them."""
    return configured or getattr(cfg.dataset, "validation_size", 0) or 100


def rl_rollouts_per_gpu(cfg: TrainConfig, world: int) -> int:
    """The largest share of a step's rollouts one GPU makes (groups dealt round the ranks)."""
    questions = getattr(cfg.sampler, "questions_per_step", 0)
    return math.ceil(questions / max(world, 1)) * getattr(cfg.sampler, "group_size", 0)


def gpu_rl_seconds(cfg: TrainConfig, plan: GpuPlan) -> float | None:
    """The RL stage on ``plan``'s figure: every step's rollouts and update on the busiest GPU,
    and the validations (their questions split over the GPUs); None without a figure."""
    fig = plan.figure
    if fig is None:
        return None
    tokens, t = generated_tokens(cfg), cfg.trainer
    rollouts = rl_rollouts_per_gpu(cfg, plan.world)
    per_step = rollout_seconds(fig, rollouts, tokens, updates=cfg.optim.policy_epochs)
    validations = (t.max_steps // t.val_every_n_steps if t.val_every_n_steps else 0) + int(
        t.val_at_end
    )
    val_rollouts = math.ceil(questions_of(cfg, t.val_questions) / plan.world) * t.val_samples
    val = rollout_seconds(fig, val_rollouts, tokens)
    return t.max_steps * per_step + validations * val


def gpu_final_seconds(cfg: TrainConfig, plan: GpuPlan) -> float | None:
    """The final comparison on ``plan``'s figure (two evaluations on one GPU); 0 when off."""
    f = cfg.final_eval
    if not f.enabled:
        return 0.0
    if plan.figure is None:
        return None
    rollouts = questions_of(cfg, f.questions) * f.samples_per_question
    return 2 * rollout_seconds(plan.figure, rollouts, generated_tokens(cfg))


def describe_plan(cfg: TrainConfig, plan: GpuPlan) -> str:
    """What the GPU stages of the estimate come from (or why they have none), as one paragraph."""
    notes = "".join(f"; {n}" for n in plan.notes)
    fig = plan.figure
    if fig is None:
        return (
            "GPU stages: no GPU figures for "
            + "; ".join(plan.problems)
            + f"{notes}. Recorded GPU figures: {BENCHMARK}."
        )
    size = f"this model {size_text(plan.params)}" if plan.params else "this model's size unknown"
    per_gpu = rl_rollouts_per_gpu(cfg, plan.world)
    split = (
        f"{plan.world} data-parallel GPUs, each rolling out and training its share of a step's "
        "groups (the final comparison on one)"
        if plan.world > 1
        else "one GPU"
    )
    return (
        f"GPU stages: {fig.describe()}; {size}; scaled to {generated_tokens(cfg)} generated "
        f"tokens a rollout (its budget) and {per_gpu} rollouts a GPU a step on {split}; peak GPU "
        f"memory per GPU as measured, not scaled{notes}"
    )


__all__ = [
    "GPU_FIGURES",
    "SIZE_FACTOR",
    "GpuFigure",
    "GpuPlan",
    "decoder_params",
    "describe_plan",
    "device_key",
    "device_kind",
    "gpu_final_seconds",
    "gpu_plan",
    "gpu_rl_seconds",
    "is_gpu_run",
    "policy_params",
]
