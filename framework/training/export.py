"""A policy saved as a plain Hugging Face folder: LoRA adapters merged, weights in the exported dtype.

:func:`export_policy` writes the folder (``policy/`` of a train or SFT run, or what
``seekrl-export`` writes from a step checkpoint: :func:`export_checkpoint`). The folder appears
whole or not at all: it is written beside its place and renamed, so an export cut short (a Ctrl-C
while it saves) leaves the previous folder, not half of a new one. What it was exported from goes
into :data:`PROVENANCE` beside the weights.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypedDict

from omegaconf import MISSING

from framework.config import option
from framework.problems import Problem, check, check_choice
from framework.training.checkpoints import CHECKPOINT_GLOB, checkpoint_name, checkpoint_step
from framework.training.lora import is_peft

#: the dtypes a policy can be exported in (``export.dtype``)
EXPORT_DTYPES = ("bfloat16", "float16", "float32")
#: the file beside the weights that says what they were exported from
PROVENANCE = "seekrl_export.json"


class ExportError(RuntimeError):
    """A policy that cannot be exported as asked (a checkpoint that names none, weights that do
    not fit the dtype); the message is in the config-error format."""


class ExportRecord(TypedDict):
    """What an exported folder holds: its :data:`PROVENANCE` file, and ``policy`` in a train
    run's ``summary.json``."""

    path: str
    step: int  # the training step the weights are from
    dtype: str
    source: str  # where the weights came from: the run's memory at its end, or a checkpoint


@dataclass
class ExportConfig:
    """How a policy is saved as a Hugging Face folder (a train run's ``policy/``, seekrl-export)."""

    dtype: str = option(
        "bfloat16",
        "dtype of the saved weights: bfloat16 (half the size of fp32, what vLLM and "
        "transformers serve), float16 or float32 (the training precision of fp32 master weights)",
    )

    def problems(self) -> list[Problem]:
        return check_choice(self.dtype, "dtype", EXPORT_DTYPES)


def merged_policy(model: Any) -> Any:
    """``model`` as a plain causal LM: a copy with its LoRA adapters merged, or ``model`` itself."""
    return copy.deepcopy(model).merge_and_unload() if is_peft(model) else model


def export_policy(
    model: Any,
    tokenizer: Any,
    folder: str | Path,
    dtype: str | None = None,
    provenance: Mapping[str, object] | None = None,
    state_dict: Mapping[str, Any] | None = None,
) -> Path:
    """Save ``model`` (adapters merged into a copy) with its tokenizer as a Hugging Face folder.

    The folder loads with ``rollout.policy.source=path rollout.policy.path=<folder>`` and with
    ``AutoModelForCausalLM.from_pretrained``; its ``config.json`` names the weights' dtype.

    Args:
        dtype: one of :data:`EXPORT_DTYPES` (the weights are rounded to it on the CPU; the model
            itself is not changed), or None to keep the model's own.
        provenance: what the weights are (step, source), written to :data:`PROVENANCE`.
        state_dict: the weights to save instead of ``model``'s own (a sharded policy's, gathered
            whole: :func:`~framework.training.sharding.full_state_dict`).

    Raises:
        ExportError: a weight that is finite in the model but not in ``dtype`` (float16's range
            ends at 65504).
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # left by an export that was cut short
    plain = merged_policy(model)
    if dtype is None:
        given = None if state_dict is None else dict(state_dict)
        plain.save_pretrained(tmp, safe_serialization=True, state_dict=given)
    else:
        weights = cast_weights(plain, dtype, state_dict)
        plain.save_pretrained(tmp, state_dict=weights, safe_serialization=True)
        config = copy.deepcopy(plain.config)  # save_pretrained wrote the model's own dtype
        config.dtype = dtype
        config.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if provenance is not None:
        (tmp / PROVENANCE).write_text(json.dumps(dict(provenance), indent=2) + "\n")
    _replace_folder(tmp, folder)
    return folder


def cast_weights(
    model: Any, dtype: str, state_dict: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``model``'s state dict (or ``state_dict``) on the CPU, its floating-point tensors in
    ``dtype`` (a tensor that is there already is not copied).

    Raises:
        ExportError: a tensor that is finite in the model but not once cast.
    """
    import torch

    target = getattr(torch, dtype)
    out = {}
    done: dict[tuple[Any, ...], Any] = {}  # tied weights stay one tensor (saved once)
    source = model.state_dict() if state_dict is None else state_dict
    for name, value in source.items():
        key = (value.device, value.data_ptr(), value.shape, value.stride())
        cast = done.get(key)
        if cast is None:
            # integer buffers (index tables) keep their dtype
            kind = target if value.is_floating_point() else value.dtype
            cast = done[key] = value.detach().to(device="cpu", dtype=kind)
        overflow = cast.is_floating_point() and not bool(torch.isfinite(cast).all())
        if overflow and bool(torch.isfinite(value).all()):
            raise ExportError(
                f"[export.dtype] got {dtype!r}; expected a dtype that holds every weight: "
                f"{name} has values up to {value.abs().max().item():.4g}, beyond {dtype}'s "
                f"range. Fix: export in bfloat16 (export.dtype=bfloat16) or float32."
            )
        out[name] = cast
    return out


def _replace_folder(new: Path, folder: Path) -> None:
    """Put the folder ``new`` in place of ``folder`` (which may exist)."""
    old = folder.with_name(folder.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        os.replace(folder, old)
    os.replace(new, folder)
    shutil.rmtree(old, ignore_errors=True)


# -- seekrl-export: a step checkpoint of a run as a Hugging Face folder ------------------------------


@dataclass
class ExportAppConfig:
    """The ``export`` app: write a Hugging Face folder from a train run's step checkpoint."""

    checkpoint: str = option(
        MISSING, "a seekrl-train run directory (its newest checkpoint) or a step-*.ckpt file in one"
    )
    out: str | None = option(
        None, "the folder to write; None: <run dir>/export/step-NNNNNN (the checkpoint's step)"
    )
    export: ExportConfig = field(default_factory=ExportConfig)

    def problems(self) -> list[Problem]:
        where = checkpoint_of(self.checkpoint)
        if isinstance(where, Problem):
            return [where]
        return check(
            (run_of(where) / "config.yaml").is_file(),
            "checkpoint",
            self.checkpoint,
            f"a checkpoint in a run directory's checkpoints/ (its config.yaml names the policy "
            f"the weights belong to; none at {run_of(where) / 'config.yaml'})",
            "export a checkpoint where seekrl-train wrote it, in <run dir>/checkpoints/",
        )


def checkpoint_of(value: str) -> Path | Problem:
    """The step checkpoint a ``checkpoint`` value names (a ``.ckpt`` file, or the newest of a run
    directory's ``checkpoints/`` or of a checkpoints folder), or the problem with it."""
    p = Path(value).expanduser()
    if p.is_file():
        if p.suffix == ".ckpt":
            return p
        return Problem("checkpoint", value, "a step-*.ckpt file", "name a checkpoint file")
    for folder in (p / "checkpoints", p):
        found = sorted(folder.glob(CHECKPOINT_GLOB)) if folder.is_dir() else []
        if found:
            return found[-1]
    has_policy = (p / "policy" / "config.json").is_file() or (p / "config.json").is_file()
    fix = (
        "it holds a Hugging Face folder already (policy/): use it as it is, or point checkpoint "
        "at a run that kept its step checkpoints"
        if has_policy
        else "point checkpoint at a seekrl-train run directory or one of its "
        "checkpoints/step-*.ckpt files"
    )
    what = "no such file or directory" if not p.exists() else f"no {CHECKPOINT_GLOB} in it"
    return Problem(
        "checkpoint",
        value,
        f"a .ckpt file or a run directory with checkpoints/{CHECKPOINT_GLOB} ({what})",
        fix,
    )


def run_of(ckpt: Path) -> Path:
    """The run directory a step checkpoint belongs to (``<run>/checkpoints/step-N.ckpt``)."""
    return ckpt.parent.parent if ckpt.parent.name == "checkpoints" else ckpt.parent


def default_out(ckpt: Path) -> Path:
    """Where seekrl-export writes by default: ``<run>/export/step-NNNNNN`` (named like the
    checkpoint it is exported from, so two steps do not overwrite each other)."""
    return run_of(ckpt) / "export" / checkpoint_name(checkpoint_step(ckpt)).removesuffix(".ckpt")


def run_policy_configs(run: Path) -> tuple[Any, Any]:
    """``(rollout.policy, lora)`` of the run in ``run``, typed from its saved ``config.yaml``:
    the model its checkpoints' weights belong to (after a warm start: the warm start's folder)."""
    from omegaconf import OmegaConf

    from framework.rollout.policy import PolicyConfig
    from framework.training.lora import LoraConfig

    saved = OmegaConf.to_container(OmegaConf.load(run / "config.yaml"), resolve=False)
    assert isinstance(saved, dict)
    policy = (saved.get("rollout") or {}).get("policy") or {}
    return _typed(PolicyConfig, policy), _typed(LoraConfig, saved.get("lora") or {})


def _typed(schema: Any, values: Mapping[str, Any]) -> Any:
    """``schema`` from the saved ``values`` it knows (a field added or dropped since is skipped)."""
    names = {f.name for f in fields(schema)}
    return schema(**{k: v for k, v in values.items() if k in names})


def export_checkpoint(cfg: ExportAppConfig) -> ExportRecord:
    """Write the weights of the step checkpoint ``cfg.checkpoint`` names as a Hugging Face folder
    in ``cfg.export.dtype`` (to ``cfg.out``, or :func:`default_out`); returns what it wrote.

    The model is the run's own (its ``config.yaml``: ``rollout.policy`` and ``lora``), so a LoRA
    run's adapters are merged as its ``policy/`` has them.

    Raises:
        ExportError: a checkpoint that holds no seekrl policy weights, or weights the run's model
            does not take; PolicyError: the run's model cannot be loaded.
    """
    from framework.training.checkpoints import CheckpointLoadError, load_checkpoint_policy

    found = checkpoint_of(cfg.checkpoint)
    if isinstance(found, Problem):  # config validation reports it; a direct call raises it
        raise ExportError(str(found))
    base, lora = run_policy_configs(run_of(found))
    try:
        model, tok, _ = load_checkpoint_policy(str(found), base, lora=lora)
    except CheckpointLoadError as exc:
        raise ExportError(str(exc)) from None
    out = Path(cfg.out).expanduser() if cfg.out else default_out(found)
    record = ExportRecord(
        path=str(out),
        step=checkpoint_step(found),
        dtype=cfg.export.dtype,
        source=f"checkpoint {found}",
    )
    export_policy(model, tok, out, cfg.export.dtype, record)
    return record
