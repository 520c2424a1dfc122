"""``trainer.precision=auto``: bf16 only where the hardware computes it natively.

On a CPU without native bf16 instructions (no AVX512-BF16, no AMX, no Arm BF16) oneDNN emulates a
bf16 matrix product, which is slower than fp32: 2.2x on an AVX512 Xeon (Cascade Lake) and about 55x
on an AVX2-only AMD EPYC (measured, docs/training.md). Since the rollouts of a training step run
inside the trainer's autocast, the choice also sets the rollouts' compute dtype.

``auto`` resolves to:

- CPU: ``bf16-mixed`` where the CPU reports a native bf16 instruction set, else ``32-true``;
- GPU: ``bf16-mixed`` where the device supports bf16, else ``32-true``.

An explicit ``trainer.precision`` is always kept as given.

``SEEKRL_NATIVE_BF16=0`` makes this machine count as a CPU without native bf16 (``1``: as one with
it), so what a run does on such a CPU (its precision, the encoder's and rollouts' dtypes, the
demo's sizes) can be reproduced on any CPU.

The config resolver ``${bf16_or_fp32:A,B}`` (:func:`register_resolvers`) is ``A`` for a run that
trains in bf16 or on a GPU and ``B`` for one that trains in fp32 on a CPU: ``scale=demo`` sizes its
stages with it, so the main job fits the same time on a CPU without native bf16.
"""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: x86 ``/proc/cpuinfo`` flags and Arm ``Features`` names of native bf16 arithmetic
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
#: the environment variable that overrides this machine's native-bf16 detection (``0`` or ``1``)
NATIVE_BF16_ENV = "SEEKRL_NATIVE_BF16"


def forced_native_bf16() -> bool | None:
    """What ``SEEKRL_NATIVE_BF16`` says about this machine (None: unset, detect it).

    Raises:
        ValueError: a value other than ``0``, ``1`` or empty.
    """
    value = os.environ.get(NATIVE_BF16_ENV, "").strip()
    if value == "":
        return None
    if value not in ("0", "1"):
        raise ValueError(
            f"[{NATIVE_BF16_ENV}] got {value!r}; expected 0 or 1. Fix: unset it to detect the "
            "CPU's bf16 support, or set 0 (count it as a CPU without native bf16) or 1 (with)."
        )
    return value == "1"


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision a run uses and why (printed at start-up, saved in ``versions.json``)."""

    precision: str
    reason: str


@functools.lru_cache(maxsize=1)
def _cpuinfo_fields() -> dict[str, str]:
    """The ``key: value`` lines of the first CPU in ``/proc/cpuinfo`` (empty where unreadable)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor's block ends here
        key, _, value = line.partition(":")
        out.setdefault(key.strip(), value.strip())
    return out


def cpu_flags() -> frozenset[str]:
    """The instruction-set flags of this machine's first CPU (empty where they cannot be read)."""
    info = _cpuinfo_fields()
    return frozenset((info.get("flags") or info.get("Features") or "").split())


@functools.lru_cache(maxsize=1)
def cpu_name() -> str:
    """A short description of this CPU: model name (or architecture), its family and model numbers
    where /proc/cpuinfo gives them (a virtual machine's name is often just "AMD EPYC", which
    covers CPUs as different as Zen 4 and Zen 5), and torch's kernel level."""
    info = _cpuinfo_fields()
    name = info.get("model name") or platform.processor() or platform.machine()
    if info.get("cpu family") and info.get("model"):
        name = f"{name} (family {info['cpu family']}, model {info['model']})"
    try:
        import torch

        return f"{name}, torch kernels {torch.backends.cpu.get_cpu_capability()}"
    except (ImportError, AttributeError):
        return name


def native_bf16(flags: frozenset[str] | set[str] | None = None) -> str | None:
    """The native bf16 flag this CPU reports (``flags`` injects a CPU in tests), or None.

    Without ``flags``, ``SEEKRL_NATIVE_BF16`` overrides what the CPU reports: ``0`` gives None and
    ``1`` the variable's own setting as the flag.
    """
    if flags is None:
        forced = forced_native_bf16()
        if forced is not None:
            return f"{NATIVE_BF16_ENV}=1" if forced else None
    have = cpu_flags() if flags is None else flags
    return next((f for f in BF16_FLAGS if f in have), None)


def native_bf16_on(device: str = "cpu") -> tuple[bool, str]:
    """Whether ``device`` (``cpu`` or ``cuda[:n]``) computes bf16 natively, and why: what a
    setting's ``auto`` (rollout weights, the encoder) follows."""
    if str(device).startswith("cuda"):
        ok = _cuda_bf16()
        return ok, "the GPU supports bf16" if ok else "the GPU has no bf16 support"
    flag = native_bf16()
    if flag is not None:
        return True, f"this CPU has native bf16 ({flag})"
    if forced_native_bf16() is False:
        return False, f"this CPU counts as one without native bf16 ({NATIVE_BF16_ENV}=0)"
    return False, "this CPU has no native bf16 (emulated bf16 is slower than fp32)"


def choose_precision(
    requested: str,
    accelerator: str,
    *,
    flags: frozenset[str] | set[str] | None = None,
    cpu: str | None = None,
    gpu_bf16: bool | None = None,
) -> PrecisionChoice:
    """What ``trainer.precision=requested`` means on this machine.

    Args:
        requested: the configured precision; anything but ``auto`` is returned unchanged.
        accelerator: the trainer's accelerator (``cpu``, ``gpu``, ``cuda``, ``mps``, ``auto``).
        flags: CPU flags to decide with instead of this machine's (tests).
        cpu: CPU description for the reason instead of this machine's (tests).
        gpu_bf16: whether the GPU supports bf16, instead of asking torch (tests).
    """
    if requested != "auto":
        return PrecisionChoice(requested, "set explicitly (trainer.precision)")
    if on_gpu(accelerator):
        if gpu_bf16 is None:
            gpu_bf16 = _cuda_bf16()
        if gpu_bf16:
            return PrecisionChoice("bf16-mixed", "auto: the GPU supports bf16")
        return PrecisionChoice("32-true", "auto: the GPU has no bf16 support")
    cpu = cpu_name() if cpu is None else cpu
    flag = native_bf16(flags)
    if flag is not None:
        return PrecisionChoice("bf16-mixed", f"auto: this CPU ({cpu}) has native bf16 ({flag})")
    forced = f" ({NATIVE_BF16_ENV}=0)" if flags is None and forced_native_bf16() is False else ""
    return PrecisionChoice(
        "32-true",
        f"auto: this CPU ({cpu}) has no native bf16 instructions{forced}, where bf16 runs emulated "
        "and slower than fp32; set trainer.precision=bf16-mixed to override",
    )


def trains_fp32_on_cpu(precision: str, accelerator: str) -> bool:
    """Whether a trainer with ``precision`` (``auto`` resolved on this machine) and ``accelerator``
    trains in fp32 on a CPU: the slow path that ``${bf16_or_fp32:A,B}`` sizes for."""
    if on_gpu(accelerator):
        return False
    return choose_precision(precision, accelerator).precision in ("32-true", "32", "64-true", "64")


def _bf16_or_fp32(bf16_value: Any, fp32_value: Any, *, _root_: Any) -> Any:
    """``${bf16_or_fp32:A,B}``: ``A`` unless the composed config's trainer trains in fp32 on a CPU."""
    trainer = _root_.get("trainer") if _root_ is not None else None
    precision = str(trainer.get("precision", "auto")) if trainer is not None else "auto"
    accelerator = str(trainer.get("accelerator", "cpu")) if trainer is not None else "cpu"
    return fp32_value if trains_fp32_on_cpu(precision, accelerator) else bf16_value


def register_resolvers() -> None:
    """Register ``${bf16_or_fp32:A,B}`` with OmegaConf (idempotent; every app composes after it)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("bf16_or_fp32"):
        OmegaConf.register_new_resolver("bf16_or_fp32", _bf16_or_fp32)


def on_gpu(accelerator: str) -> bool:
    """Whether a trainer with ``accelerator`` runs on a GPU (``auto``: where CUDA is available)."""
    return accelerator in ("gpu", "cuda") or (accelerator == "auto" and _cuda_available())


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def _cuda_bf16() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
