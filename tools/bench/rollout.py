"""Rollout benchmark: agent-loop tokens/s at 8, 32 and 64 concurrent rollouts against raw generate.

    python3 tools/bench/rollout.py                       # default policy (SmolLM2-135M), FAISS index
    python3 tools/bench/rollout.py --sizes 8 32 --max-new-tokens 64

For each number of concurrent rollouts, the agent loop runs on synthesized test questions with the
default policy and index; its wall time is split into generation (backend calls), retrieval (tool
calls and observation tokenisation) and loop overhead (the rest: parsing, segments, bookkeeping).
In the same run, the raw batched ``generate`` of the same model on the same prompts and the same
per-turn token budget is the ceiling. Figures go to ``docs/benchmarks/rollout.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from framework.data.datasets import SynthDatasetConfig, synth_dataset  # noqa: E402
from framework.retrieval.dense import FaissRetriever, FaissRetrieverConfig  # noqa: E402
from framework.rollout.config import AgentConfig  # noqa: E402
from framework.rollout.engine import AgentLoop  # noqa: E402
from framework.rollout.hf_backend import (  # noqa: E402
    SamplingConfig,
    TransformersBackend,
    TransformersBackendConfig,
)


def bench_size(
    loop: AgentLoop, backend: TransformersBackend, questions: list[str], n: int, max_new: int
) -> dict[str, Any]:
    qs = (questions * n)[:n]  # n distinct-ish prompts, one rollout each
    trajectories = loop.run(qs, 1)
    t = dict(loop.timings)
    tokens = sum(tr.stats["generated_tokens"] for tr in trajectories)
    turns = sum(tr.stats["turns"] for tr in trajectories)
    prompts = [loop.prompt_ids(q) for q in qs]
    start = time.perf_counter()
    raw = backend.generate(prompts, [max_new] * n, ())
    raw_s = time.perf_counter() - start
    raw_tokens = sum(len(g.token_ids) for g in raw)
    overhead = t["total"] - t["generate"] - t["retrieval"]
    return {
        "concurrent_rollouts": n,
        "loop": {
            "generated_tokens": tokens,
            "turns": turns,
            "seconds": t["total"],
            "tokens_per_s": tokens / t["total"],
            "generation_s": t["generate"],
            "retrieval_s": t["retrieval"],
            "overhead_s": overhead,
            "generation_tokens_per_s": tokens / t["generate"] if t["generate"] else 0.0,
            "statuses": {
                s: sum(tr.status == s for tr in trajectories)
                for s in ("ok", "format_error", "over_budget")
            },
            "tool_calls": sum(tr.stats["tool_calls"] for tr in trajectories),
        },
        "raw_generate": {
            "generated_tokens": raw_tokens,
            "seconds": raw_s,
            "tokens_per_s": raw_tokens / raw_s,
        },
        "loop_over_raw": (tokens / t["total"]) / (raw_tokens / raw_s),
    }


def render(report: dict[str, Any]) -> str:
    m = report["meta"]
    lines = [
        "# Rollout benchmark",
        "",
        f"Command: `{m['command']}`  ",
        f"Machine: {m['machine']}  ",
        f"Date: {m['date']}  ",
        f"Policy: {m['policy']}, sampling temperature {m['temperature']}, at most {m['max_new_tokens']} new tokens "
        f"per turn and {m['max_turns']} turns; retriever: FAISS flat over the shipped summaries. One run; "
        "read figures as ±20 %.",
        "",
        "| concurrent rollouts | loop tokens/s | generation s | retrieval s | loop overhead s | raw generate tokens/s | loop / raw | statuses (ok / format / budget) | tool calls |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["results"]:
        lo, raw = r["loop"], r["raw_generate"]
        st = lo["statuses"]
        lines.append(
            f"| {r['concurrent_rollouts']} | {lo['tokens_per_s']:.1f} | {lo['generation_s']:.1f} | "
            f"{lo['retrieval_s']:.2f} | {lo['overhead_s']:.2f} | {raw['tokens_per_s']:.1f} | "
            f"{r['loop_over_raw']:.2f} | {st['ok']} / {st['format_error']} / {st['over_budget']} | {lo['tool_calls']} |"
        )
    lines += [
        "",
        "Loop tokens/s counts the model-generated tokens of all rollouts over the loop's wall time. The "
        "raw ceiling generates the same prompts in one batched call of the same backend with no stop "
        "strings, so each sequence runs to the token budget or end of sequence.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--decoder", choices=["loop", "generate"], default="loop")
    parser.add_argument("--out", default=str(REPO / "docs" / "benchmarks" / "rollout"))
    args = parser.parse_args()
    backend = TransformersBackend(
        cfg=TransformersBackendConfig(
            name="transformers",
            sampling=SamplingConfig(temperature=args.temperature),
            micro_batch=max(args.sizes),
            decoder=args.decoder,
        )
    )
    retriever = FaissRetriever(cfg=FaissRetrieverConfig(name="faiss", progress=False))
    questions = [it.question for it in synth_dataset("test", cfg=SynthDatasetConfig(name="synth"))]
    agent = AgentConfig(
        max_turns=args.max_turns, max_new_tokens_per_turn=args.max_new_tokens, max_total_tokens=4096
    )
    loop = AgentLoop(backend, retriever, agent)
    import torch

    results = [bench_size(loop, backend, questions, n, args.max_new_tokens) for n in args.sizes]
    report = {
        "meta": {
            "command": "python3 tools/bench/rollout.py " + " ".join(sys.argv[1:]),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads, no GPU",
            "date": time.strftime("%Y-%m-%d"),
            "policy": f"SmolLM2-135M-Instruct (fp32, rollout.decoder={args.decoder})",
            "temperature": args.temperature,
            "max_new_tokens": args.max_new_tokens,
            "max_turns": args.max_turns,
        },
        "results": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2))
    out.with_suffix(".md").write_text(render(report))
    print(render(report))


if __name__ == "__main__":
    main()
