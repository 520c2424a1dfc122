"""Rollout-vs-trainer log-prob mismatch of each rollout backend (what ``loss.rollout_correction``
corrects), on the same prompts and the same policy weights.

    python3 tools/bench/rollout_mismatch.py                          # loop fp32 and bf16, tiny + SmolLM2
    /tmp/vllmenv/bin/python tools/bench/rollout_mismatch.py --backends loop vllm --dtypes bfloat16

Each backend samples ``--group`` completions of ``--questions`` single-turn prompts (temperature 1, no
top-k / top-p, so the sampling distribution is the policy's own) and records each token's sampling
log-probability; the trainer then scores the same tokens with the fp32 policy, as ``seekrl-train``
does before an update. Reported per backend and rollout dtype: the token mean and maximum of
``k3 = ρ - 1 - log ρ`` (``ρ = π_train / π_rollout``, the estimate of KL(rollout || trainer) that the
train app logs as ``loss/rollout_mismatch_kl_*``), the share of tokens whose ratio is outside
``[1/C, C]`` (C = 2), and the share that token-level ``tis`` would truncate and ``mis`` would mask. The
peer in the same run is the decoding loop in fp32 (rounding only): every row gives its mean k3 as a
multiple of that row's. Figures go to ``--out`` (markdown) and the same name with ``.json``.
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
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DEFAULT_OUT = REPO / "docs" / "benchmarks" / "rollout_mismatch.md"
THRESHOLD = 2.0


def prompts(tok: Any, n: int) -> list[list[int]]:
    from framework.data.datasets import SynthDatasetConfig, synth_dataset
    from framework.rollout.policy import chat_prompt_ids

    items = synth_dataset("test", cfg=SynthDatasetConfig(name="synth"))[:n]
    return [
        chat_prompt_ids(tok, [{"role": "user", "content": f"Answer briefly. {it.question}"}])
        for it in items
    ]


def make_backend(kind: str, policy: str, dtype: str, args: argparse.Namespace) -> Any:
    from framework.rollout.hf_backend import (
        SamplingConfig,
        TransformersBackend,
        TransformersBackendConfig,
    )
    from framework.rollout.policy import PolicyConfig

    pcfg = PolicyConfig(source=policy, dtype=dtype)
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, seed=args.seed)
    if kind == "vllm":
        from framework.rollout.vllm_backend import VLLMBackend, VLLMBackendConfig

        cfg = VLLMBackendConfig(
            name="vllm",
            policy=pcfg,
            sampling=sampling,
            max_model_len=1024,
            gpu_memory_utilization=args.vllm_memory,
            compute_dtype=dtype,
        )
        return VLLMBackend(cfg=cfg)
    cfg = TransformersBackendConfig(
        name="transformers", policy=pcfg, sampling=sampling, compute_dtype=dtype
    )
    return TransformersBackend(cfg=cfg)


def measure(kind: str, policy: str, dtype: str, args: argparse.Namespace) -> dict[str, Any]:
    """Sample with ``kind`` at ``dtype``, score the tokens with the fp32 trainer policy."""
    import torch

    from framework.algorithms.losses.rollout_correction import correction_weights, mismatch_stats
    from framework.rollout.policy import PolicyConfig, load_policy
    from framework.training.tokens import pack, packed_rollout_logprobs, token_logprobs
    from framework.types import Trajectory

    torch.manual_seed(args.seed)
    backend = make_backend(kind, policy, dtype, args)
    tok = backend.tokenizer
    seqs = [p for p in prompts(tok, args.questions) for _ in range(args.group)]
    clock = time.perf_counter()
    gens = backend.generate(seqs, [args.max_new] * len(seqs), [])
    seconds = time.perf_counter() - clock
    trajs = []
    for i, (p, g) in enumerate(zip(seqs, gens, strict=True)):
        if g.logprobs is None:
            raise SystemExit(f"{kind} returned no log-probs; it cannot be measured")
        t = Trajectory(i, i, [*p, *g.token_ids], [0] * len(p) + [1] * len(g.token_ids), len(p))
        t.rollout_logprobs = [0.0] * len(p) + list(g.logprobs)
        trajs.append(t)
    del backend
    trainer, _ = load_policy(PolicyConfig(source=policy, dtype="float32"))
    trainer.eval()
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    stats = []
    with torch.no_grad():
        for start in range(0, len(trajs), 8):
            chunk = trajs[start : start + 8]
            batch = pack(chunk, pad)
            old, _ = token_logprobs(trainer, batch)
            behav = packed_rollout_logprobs(chunk, batch.response_width)
            mask = batch.loss_mask.bool()
            tis = correction_weights(old, behav, mask, mode="tis", threshold=THRESHOLD)
            mis = correction_weights(old, behav, mask, mode="mis", threshold=THRESHOLD)
            s = mismatch_stats(old, behav, mask, threshold=THRESHOLD, correction=tis)
            stats.append((s, int((mis.changed & mask).sum())))
    tokens = sum(s.tokens for s, _ in stats)
    return {
        "backend": kind,
        "policy": policy,
        "rollout_dtype": dtype,
        "tokens": tokens,
        "generate_s": round(seconds, 2),
        "kl_mean": sum(s.kl_sum for s, _ in stats) / tokens,
        "kl_max": max(s.kl_max for s, _ in stats),
        "frac_beyond": sum(s.beyond for s, _ in stats) / tokens,
        "tis_truncated": sum(s.corrected for s, _ in stats) / tokens,
        "mis_masked": sum(m for _, m in stats) / tokens,
    }


def measure_in_child(kind: str, policy: str, dtype: str) -> dict[str, Any]:
    """:func:`measure` in a process of its own (one vLLM engine per process: a second engine in
    the same process fails to size its KV cache), with this run's other arguments."""
    import subprocess

    argv = [a for a in sys.argv[1:]]
    cmd = [sys.executable, __file__, *argv, "--one", policy, kind, dtype]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("[row] ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout)[-1500:]
        raise SystemExit(f"{policy} {kind} {dtype} failed (exit {proc.returncode}):\n{tail}")
    return json.loads(lines[-1][len("[row] ") :])


def machine() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"CPU capability {torch.backends.cpu.get_cpu_capability()}"
    )


def render(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    ref = {
        r["policy"]: r["kl_mean"]
        for r in rows
        if r["backend"] == "loop" and r["rollout_dtype"] == "float32"
    }
    lines = [
        "# Rollout-vs-trainer log-prob mismatch",
        "",
        f"Command: `{Path(sys.executable).name} tools/bench/rollout_mismatch.py "
        f"{' '.join(sys.argv[1:])}`",
        f"Machine: {machine()}. {time.strftime('%Y-%m-%d')}.",
        f"{args.questions} prompts x {args.group} samples of at most {args.max_new} tokens, "
        f"temperature 1; the trainer scores in fp32; C = {THRESHOLD:g}.",
        "",
        "| policy | backend | rollout dtype | tokens | mean k3 | max k3 | beyond [1/C, C] | "
        "tis truncates | mis masks | mean k3 / loop fp32 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        base = ref.get(r["policy"])
        ratio = f"{r['kl_mean'] / base:.3g}" if base else "n/a (the peer is exactly 0)"
        lines.append(
            f"| {r['policy']} | {r['backend']} | {r['rollout_dtype']} | {r['tokens']} | "
            f"{r['kl_mean']:.3g} | {r['kl_max']:.3g} | {r['frac_beyond']:.2%} | "
            f"{r['tis_truncated']:.2%} | {r['mis_masked']:.2%} | {ratio} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", nargs="+", default=["loop"], choices=["loop", "vllm"])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--policies", nargs="+", default=["tiny", "smollm2"])
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vllm-memory", type=float, default=0.08)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument(
        "--one", nargs=3, metavar=("POLICY", "BACKEND", "DTYPE"), help=argparse.SUPPRESS
    )
    args = ap.parse_args()
    if args.one:  # a child of measure_in_child
        policy, kind, dtype = args.one
        print("[row] " + json.dumps(measure(kind, policy, dtype, args)), flush=True)
        return

    rows = []
    for policy in args.policies:
        # the peer first: the decoding loop in fp32 (the trainer's own numerics)
        combos = [("loop", "float32")] + [
            (b, d) for b in args.backends for d in args.dtypes if (b, d) != ("loop", "float32")
        ]
        for kind, dtype in combos:
            print(f"[mismatch] {policy} {kind} {dtype} ...", flush=True)
            rows.append(measure_in_child(kind, policy, dtype))
            print(f"[mismatch] {json.dumps(rows[-1])}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(rows, args))
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=2) + "\n")
    print(args.out.read_text())


if __name__ == "__main__":
    main()
