"""fp32 against bf16 on this CPU: the figures behind ``trainer.precision=auto``.

    python3 tools/bench/precision.py [--out docs/benchmarks/precision.json]

Times a 512x576 @ 576x1536 matmul (SmolLM2-135M's MLP shape) and a Linear forward+backward of that
shape, in fp32 and in bf16 (plain bf16 tensors, and fp32 weights under bf16 autocast, as
``bf16-mixed`` trains), and writes the medians, the bf16/fp32 ratios, the CPU and what ``auto``
chooses on it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from framework.training.precision import choose_precision, cpu_name, native_bf16


def median_ms(fn, repeats: int = 7) -> float:
    fn()  # warm-up (kernel selection)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def measure() -> dict:
    torch.manual_seed(0)
    a, b = torch.randn(512, 576), torch.randn(576, 1536)
    ab, bb = a.bfloat16(), b.bfloat16()
    lin = torch.nn.Linear(576, 1536)
    x = torch.randn(512, 576, requires_grad=True)

    def fwd_bwd(autocast: bool) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            y = lin(x)
        y.float().sum().backward()

    mm32, mm16 = median_ms(lambda: a @ b), median_ms(lambda: ab @ bb)
    lin32, lin16 = median_ms(lambda: fwd_bwd(False)), median_ms(lambda: fwd_bwd(True))
    choice = choose_precision("auto", "cpu")
    return {
        "cpu": cpu_name(),
        "native_bf16_flag": native_bf16(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "matmul_ms": {
            "fp32": round(mm32, 2),
            "bf16": round(mm16, 2),
            "ratio": round(mm16 / mm32, 2),
        },
        "linear_fwd_bwd_ms": {
            "fp32": round(lin32, 2),
            "bf16_autocast": round(lin16, 2),
            "ratio": round(lin16 / lin32, 2),
        },
        "auto_chooses": choice.precision,
        "reason": choice.reason,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="docs/benchmarks/precision.json")
    args = parser.parse_args()
    result = measure()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
