"""Where a rollout's time goes: the agent loop at N concurrent rollouts, every forward timed.

    python3 tools/bench/decode_profile.py                       # 64 in flight, base policy
    python3 tools/bench/decode_profile.py --policy <dir> --in-flight 64 --micro-batch 32 64

Runs the real agent loop (transformers backend, ``decoder=loop``, FAISS retrieval, the
``learn_cpu`` agent budgets) on validation questions, and times, in one run:

- every forward pass of the policy, split into prefill calls (more than one new token per row) and
  decode steps bucketed by the rows they carry; for each bucket its tokens, seconds and ms per
  step, and the time the same tokens would take at the full batch's per-row rate: what the batch
  shrinking as rows end costs;
- what the decoding loop does outside the forward passes (sampling, stop checks, KV selection);
- retrieval and the agent's own per-turn work (parsing, tokenising observations);
- an operator profile (``torch.profiler``) of one decoding call at the full batch: which kernels
  a decode step is made of.

Figures go to ``docs/benchmarks/decode_profile.md`` and ``.json``. A profile, not a timed test:
read figures as +-15 %.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
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
from framework.rollout.policy import PolicyConfig  # noqa: E402
from framework.training.precision import cpu_flags, cpu_name  # noqa: E402

BUCKETS = ((1, 4), (5, 8), (9, 16), (17, 32), (33, 64), (65, 128))
LEARN_CPU_AGENT = {
    "max_turns": 4,
    "max_tool_calls": 3,
    "max_new_tokens_per_turn": 128,
    "max_total_tokens": 1536,
    "search_k": 2,
    "max_passage_chars": 300,
}


class ForwardTimer:
    """Times every call of ``model.forward`` and records its shape."""

    def __init__(self, model: Any) -> None:
        self.calls: list[dict[str, float]] = []
        self._start = 0.0
        model.register_forward_pre_hook(self._pre, with_kwargs=True)
        model.register_forward_hook(self._post, with_kwargs=True)

    def _pre(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        self._start = time.perf_counter()

    def _post(self, module: Any, args: Any, kwargs: dict[str, Any], out: Any) -> None:
        ids = kwargs.get("input_ids")
        mask = kwargs.get("attention_mask")
        rows, new = (ids.shape[0], ids.shape[1]) if ids is not None else (0, 0)
        width = mask.shape[1] if mask is not None else new
        real = int(mask[:, -new:].sum()) if mask is not None else rows * new
        self.calls.append(
            {
                "rows": rows,
                "new": new,
                "width": width,
                "real_new_tokens": real,
                "seconds": time.perf_counter() - self._start,
            }
        )


def bucket_of(rows: int) -> str:
    for lo, hi in BUCKETS:
        if lo <= rows <= hi:
            return f"{lo}-{hi}"
    return f">{BUCKETS[-1][1]}"


def summarise(calls: list[dict[str, float]], full: int) -> dict[str, Any]:
    prefill = [c for c in calls if c["new"] > 1]
    decode = [c for c in calls if c["new"] == 1]
    by: dict[str, dict[str, float]] = defaultdict(lambda: {"steps": 0, "tokens": 0, "seconds": 0.0})
    for c in decode:
        b = by[bucket_of(int(c["rows"]))]
        b["steps"] += 1
        b["tokens"] += c["rows"]
        b["seconds"] += c["seconds"]
    full_rows = [c for c in decode if c["rows"] >= max(full // 2, 1)]
    per_token_full = (
        sum(c["seconds"] for c in full_rows) / sum(c["rows"] for c in full_rows)
        if full_rows
        else float("nan")
    )
    buckets = {}
    for name, b in sorted(by.items(), key=lambda kv: int(kv[0].split("-")[0].lstrip(">"))):
        buckets[name] = {
            **b,
            "ms_per_step": 1000 * b["seconds"] / max(b["steps"], 1),
            "at_full_rate_s": b["tokens"] * per_token_full,
        }
    return {
        "prefill_calls": len(prefill),
        "prefill_padded_tokens": sum(c["rows"] * c["new"] for c in prefill),
        "prefill_real_tokens": sum(c["real_new_tokens"] for c in prefill),
        "prefill_s": sum(c["seconds"] for c in prefill),
        "decode_steps": len(decode),
        "decode_tokens": sum(c["rows"] for c in decode),
        "decode_s": sum(c["seconds"] for c in decode),
        "decode_s_per_token_at_full_batch": per_token_full,
        "decode_buckets": buckets,
    }


def operator_profile(backend: TransformersBackend, prompts: list[list[int]], n: int) -> str:
    """``torch.profiler``'s table of one decoding call of ``n`` prompts (64 new tokens each)."""
    from torch.profiler import ProfilerActivity, profile

    seqs = (prompts * n)[:n]
    backend.prefix_cache.clear() if backend.prefix_cache is not None else None
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        backend.generate(seqs, [64] * n, (), seeds=list(range(n)))
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18)


def run(args: argparse.Namespace) -> dict[str, Any]:
    retriever = FaissRetriever(cfg=FaissRetrieverConfig(name="faiss", progress=False))
    if args.questions_file:
        with open(args.questions_file) as f:
            questions = [json.loads(line)["question"] for line in f if line.strip()]
    else:
        items = synth_dataset("validation", cfg=SynthDatasetConfig(name="synth"))
        questions = [it.question for it in items]
    questions = questions[: args.questions]
    policy = PolicyConfig(source="path", path=args.policy) if args.policy else PolicyConfig()
    results = []
    for micro in args.micro_batch:
        backend = TransformersBackend(
            cfg=TransformersBackendConfig(
                name="transformers",
                policy=policy,
                sampling=SamplingConfig(temperature=1.0),
                micro_batch=micro,
                compute_dtype=args.dtype,
                **(
                    {}
                    if args.prefix_cache_tokens is None
                    else {"prefix_cache_tokens": args.prefix_cache_tokens}
                ),
            )
        )
        timer = ForwardTimer(backend.model)
        loop = AgentLoop(backend, retriever, AgentConfig(**LEARN_CPU_AGENT))
        seeds = list(range(len(questions) * args.samples))
        start = time.perf_counter()
        trajectories = loop.run(questions, args.samples, max_in_flight=args.in_flight, seeds=seeds)
        wall = time.perf_counter() - start
        forward_s = sum(c["seconds"] for c in timer.calls)
        summary = summarise(timer.calls, min(micro, args.in_flight))
        generated = sum(t.stats["generated_tokens"] for t in trajectories)
        cache = backend.prefix_cache
        results.append(
            {
                "micro_batch": micro,
                "in_flight": args.in_flight,
                "rollouts": len(trajectories),
                "generated_tokens": generated,
                "turns": sum(t.stats["turns"] for t in trajectories),
                "wall_s": wall,
                "generate_s": loop.timings["generate"],
                "retrieval_s": loop.timings["retrieval"],
                "agent_other_s": wall - loop.timings["generate"] - loop.timings["retrieval"],
                "forward_s": forward_s,
                "decoder_outside_forward_s": loop.timings["generate"] - forward_s,
                "tokens_per_s": generated / wall,
                "prefix_hits": cache.hits if cache is not None else 0,
                "prefix_reused_tokens": cache.reused_tokens if cache is not None else 0,
                "prefix_evicted_tokens": cache.evicted_tokens if cache is not None else 0,
                **summary,
            }
        )
        print(json.dumps(results[-1], indent=1), flush=True)
        if micro == args.micro_batch[-1] and args.operators:
            prompts = [loop.prompt_ids(q) for q in questions]
            results[-1]["operators"] = operator_profile(backend, prompts, min(micro, 64))
            print(results[-1]["operators"], flush=True)
        del backend, loop
    return {
        "meta": {
            "command": "python3 tools/bench/decode_profile.py " + " ".join(sys.argv[1:]),
            "cpu": cpu_name(),
            "bf16_flags": " ".join(sorted(f for f in cpu_flags() if "bf16" in f)),
            "cores": os.cpu_count(),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d"),
            "policy": args.policy or "SmolLM2-135M-Instruct (base)",
            "dtype": args.dtype,
            "questions": len(questions),
            "samples": args.samples,
        },
        "results": results,
    }


def render(report: dict[str, Any]) -> str:
    m = report["meta"]
    lines = [
        "# Where a rollout's time goes: the agent loop's forward passes, timed",
        "",
        f"Command: `{m['command']}`  ",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['threads']} threads, torch {m['torch']}; "
        f"bf16 flags: {m['bf16_flags'] or 'none'}  ",
        f"Date: {m['date']}; policy: {m['policy']}; rollout dtype: {m['dtype']}; "
        f"{m['questions']} validation questions x {m['samples']} samples, `learn_cpu` agent "
        "budgets, FAISS retrieval. One run: read figures as +-15 %.",
        "",
        "## Where the wall time goes",
        "",
        "| in flight | micro-batch | wall s | tokens/s | prefill s | decode s | decoder outside "
        "forward s | retrieval s | agent other s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["results"]:
        lines.append(
            f"| {r['in_flight']} | {r['micro_batch']} | {r['wall_s']:.1f} | "
            f"{r['tokens_per_s']:.0f} | {r['prefill_s']:.1f} | {r['decode_s']:.1f} | "
            f"{r['decoder_outside_forward_s']:.1f} | {r['retrieval_s']:.1f} | "
            f"{r['agent_other_s']:.1f} |"
        )
    for r in report["results"]:
        lines += [
            "",
            f"## Decode steps by rows, micro-batch {r['micro_batch']}",
            "",
            f"Prefill: {r['prefill_calls']} calls, {r['prefill_real_tokens']} real tokens in "
            f"{r['prefill_padded_tokens']} padded positions, {r['prefill_s']:.1f} s. Prefix "
            f"cache: {r['prefix_hits']} hits, {r['prefix_reused_tokens']} tokens reused, "
            f"{r['prefix_evicted_tokens']} live tokens evicted for room.",
            "",
            "| rows | steps | tokens | s | ms per step | s at the full batch's per-token rate |",
            "|---|---|---|---|---|---|",
        ]
        for name, b in r["decode_buckets"].items():
            lines.append(
                f"| {name} | {b['steps']} | {b['tokens']} | {b['seconds']:.1f} | "
                f"{b['ms_per_step']:.1f} | {b['at_full_rate_s']:.1f} |"
            )
        if "operators" in r:
            lines += ["", "Operators of one decoding call (64 new tokens per row):", "", "```"]
            lines += [r["operators"].rstrip(), "```"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policy", default=None, help="a saved policy directory (default: base)")
    parser.add_argument(
        "--questions-file", default=None, help="a validation.jsonl (default: synth's validation)"
    )
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--dtype", default="auto")
    parser.add_argument(
        "--prefix-cache-tokens", type=int, default=None, help="the backend's default if not given"
    )
    parser.add_argument("--no-operators", dest="operators", action="store_false")
    parser.add_argument("--out", default=str(REPO / "docs" / "benchmarks" / "decode_profile"))
    args = parser.parse_args()
    report = run(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    out.with_suffix(".md").write_text(render(report))
    print(render(report))


if __name__ == "__main__":
    main()
