"""``trainer.precision=auto``: bf16 only where the hardware computes it natively.

On a CPU without native bf16 instructions (no AVX512-BF16, no AMX, no Arm BF16) oneDNN emulates a
bf16 matrix product, which is slower than fp32: 2.2x on an AVX512 Xeon (Cascade Lake) and about 55x
on an AVX2-only AMD EPYC (measured, docs/training.md). Since the rollouts of a training step run
inside the trainer's autocast, the choice also sets the rollouts' compute dtype.

``auto`` resolves to:

- CPU: ``bf16-mixed`` where the CPU reports a native bf16 instruction set, else ``32-true``;
- GPU: ``bf16-mixed`` where the device supports bf16, else ``32-true``.

An explicit ``trainer.precision`` is always kept as given.
"""

from __future__ import annotations

import functools
import platform
from dataclasses import dataclass
from pathlib import Path

#: x86 ``/proc/cpuinfo`` flags and Arm ``Features`` names of native bf16 arithmetic
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


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
    """The native bf16 flag this CPU reports (``flags`` injects a CPU in tests), or None."""
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
    on_gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and _cuda_available())
    if on_gpu:
        if gpu_bf16 is None:
            gpu_bf16 = _cuda_bf16()
        if gpu_bf16:
            return PrecisionChoice("bf16-mixed", "auto: the GPU supports bf16")
        return PrecisionChoice("32-true", "auto: the GPU has no bf16 support")
    cpu = cpu_name() if cpu is None else cpu
    flag = native_bf16(flags)
    if flag is not None:
        return PrecisionChoice("bf16-mixed", f"auto: this CPU ({cpu}) has native bf16 ({flag})")
    return PrecisionChoice(
        "32-true",
        f"auto: this CPU ({cpu}) has no native bf16 instructions, where bf16 runs emulated and "
        "slower than fp32; set trainer.precision=bf16-mixed to override",
    )


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def _cuda_bf16() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
