"""Where step checkpoints live, which one a ``resume`` value names, and the policy a checkpoint
value names, loaded (:func:`load_checkpoint_policy`: a run's exported ``policy/``, a Hugging Face
folder, or the weights of a Lightning step checkpoint)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from framework.rollout.policy import load_policy
from framework.training.lora import LoraConfig, apply_lora

CHECKPOINT_GLOB = "step-*.ckpt"


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, a quota); the older ones are intact."""


class CheckpointLoadError(RuntimeError):
    """A checkpoint value that names no policy, or weights that do not fit the configured one."""


def checkpoint_name(step: int) -> str:
    return f"step-{step:06d}.ckpt"


def checkpoint_step(path: Path) -> int:
    """The step a checkpoint was saved after, from its name (``step-000012.ckpt`` -> 12)."""
    return int(path.stem.split("-")[-1])


def newest_checkpoint(folder: Path) -> Path | None:
    """The newest complete checkpoint in ``folder`` (a ``.tmp`` left by a kill is not one), or None."""
    found = sorted(folder.glob(CHECKPOINT_GLOB)) if folder.is_dir() else []
    return found[-1] if found else None


def latest_checkpoint(path: str | Path) -> Path:
    """The checkpoint a ``resume`` value names: a ``.ckpt`` file, or the newest one of a run
    directory (its ``checkpoints/``) or of a checkpoints directory.

    Raises:
        FileNotFoundError: with a message in the config-error format.
    """
    p = Path(path).expanduser()
    if p.is_file():
        return p
    for folder in (p / "checkpoints", p):
        found = sorted(folder.glob(CHECKPOINT_GLOB)) if folder.is_dir() else []
        if found:
            return found[-1]
    raise FileNotFoundError(
        f"[resume] got {str(path)!r}; expected a .ckpt file or a run directory with "
        f"checkpoints/{CHECKPOINT_GLOB}. Fix: point resume at an existing checkpoint."
    )


def policy_folder(path: str | Path) -> Path | None:
    """The Hugging Face checkpoint folder a path names: a run directory's ``policy/`` (train and SFT
    runs export one), or the path itself when it holds ``config.json``; None otherwise."""
    p = Path(path).expanduser()
    for folder in (p / "policy", p):
        if (folder / "config.json").is_file():
            return folder
    return None


def holds_training_state(path: str | Path) -> bool:
    """Whether a step checkpoint can resume training: it has optimiser state (one written with
    ``trainer.checkpoint_weights_only`` has the weights alone). Read memory-mapped, so a checkpoint
    of many GB costs milliseconds."""
    import torch

    state = torch.load(Path(path), map_location="cpu", weights_only=True, mmap=True)
    return "optimizer_states" in state


def weights_only_error(path: str | Path, option: str = "resume") -> str:
    """The message for a weights-only checkpoint named where training must resume."""
    return (
        f"[{option}] {path} holds the weights only (written with "
        "trainer.checkpoint_weights_only=true) and cannot resume training. Fix: resume from a full "
        "checkpoint (an interrupted run always writes one), or evaluate these weights with "
        f"seekrl-eval checkpoint={path}."
    )


def policy_weights(path: str | Path) -> dict[str, Any]:
    """The policy's weights in a step checkpoint (its ``policy.*`` entries, prefix removed), read
    memory-mapped: the optimiser state beside them is not read.

    Raises:
        CheckpointLoadError: a file that is not a checkpoint, or one that holds no policy weights.
    """
    import pickle

    import torch

    try:
        state = torch.load(Path(path), map_location="cpu", weights_only=True, mmap=True)
    except (RuntimeError, OSError, pickle.UnpicklingError, EOFError) as exc:
        raise CheckpointLoadError(
            f"[checkpoint] got {str(path)!r}; expected a step checkpoint that torch can read "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}). Fix: name a "
            f"checkpoints/{CHECKPOINT_GLOB} file that seekrl-train wrote."
        ) from None
    weights = {
        k.removeprefix("policy."): v
        for k, v in ((state.get("state_dict") if isinstance(state, dict) else None) or {}).items()
        if k.startswith("policy.")
    }
    if not weights:
        raise CheckpointLoadError(
            f"[checkpoint] got {str(path)!r}; expected a checkpoint with policy weights "
            "(state_dict entries policy.*). Fix: name a step checkpoint of a seekrl-train or "
            "seekrl-sft run."
        )
    return weights


def load_checkpoint_policy(
    checkpoint: str | None, base: Any, lora: LoraConfig | None = None
) -> tuple[Any, Any, str]:
    """``(model, tokenizer, description)`` of the policy ``checkpoint`` names: ``base`` (a
    ``rollout.policy`` config) itself for None, a run's ``policy/`` or a Hugging Face checkpoint
    folder, or the weights of a step checkpoint (a ``.ckpt`` file, or a run's newest) loaded into
    ``base``'s model (with LoRA adapters when the run trained some: ``lora``'s, by default
    :class:`~framework.training.lora.LoraConfig`'s rank and targets).

    Raises:
        CheckpointLoadError: a folder without a policy or checkpoints, or a ``.ckpt`` whose weights
            do not fit ``base``.
    """
    if checkpoint is None:
        model, tok = load_policy(base)
        return model, tok, f"base policy ({base.source}{': ' + base.path if base.path else ''})"
    p = Path(checkpoint).expanduser()
    if p.is_dir():
        folder = policy_folder(p)
        if folder is not None:
            model, tok = load_policy(replace(base, source="path", path=str(folder)))
            return model, tok, str(folder)
        try:
            p = latest_checkpoint(p)
        except FileNotFoundError:
            raise CheckpointLoadError(
                f"[checkpoint] {p} has neither policy/ nor checkpoints/step-*.ckpt. "
                "Fix: point checkpoint at a finished run."
            ) from None
    weights = policy_weights(p)
    model, tok = load_policy(base)
    if any("lora_" in k for k in weights):
        model = apply_lora(model, replace(lora, enabled=True) if lora else LoraConfig(enabled=True))
    try:
        model.load_state_dict(weights, strict=True)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
        raise CheckpointLoadError(
            f"[checkpoint] {p} does not match the configured rollout.policy "
            f"(source={base.source}): {first[:300]}. Fix: set rollout.policy to the model the "
            "run trained (e.g. rollout.policy.source=tiny), or evaluate its policy/ folder."
        ) from None
    return model.eval(), tok, str(p)
