"""Decoding at 64 rollouts: the eager decoding loop and CUDA graphs against a warmed-up ``generate``.

    python3 tools/bench/decode_graphs.py --device cuda --policy shape:smollm2-135m --out d.json
    python3 tools/bench/decode_graphs.py --device cpu --policy tiny --rollouts 8 --new-tokens 16

The same prompts for every variant (``--prompts`` short questions, each sampled ``--rollouts /
--prompts`` times, left-padded), the same model object with its weights in the rollout dtype
(``rollout.compute_dtype=auto``: bf16 on a GPU), sampling at temperature 1:

- ``generate``: ``model.generate`` with its dynamic KV cache, eager; the reference, timed after a
  warm-up call of the same length (allocator and kernels warm), every row run to
  ``--new-tokens`` (``min_new_tokens``);
- ``loop``: the rollout default, this framework's decoding loop (``TransformersBackend``,
  ``decoder=loop``, every rollout in one decoding batch), eager, after a warm-up call;
- ``graphs``: ``model.generate`` with a static KV cache (``cache_implementation="static"``), whose
  decode step transformers compiles with ``torch.compile(mode="reduce-overhead")``, i.e. replayed
  as CUDA graphs; timed after two warm-up calls (compilation, then graph capture; their seconds
  are kept). CUDA only: on a CPU it is recorded as skipped. (The decoding loop has no graph
  option: its batch shrinks as rows finish, so its shapes change every few steps.)

Tokens/s is generated tokens over the measured call's seconds; ``ratio_to_generate`` divides it by
``generate``'s. ``faster`` names the faster of ``loop`` and ``graphs`` (issue 77: "keep what is
faster"). The JSON is written again after each variant, so a run stopped by a time limit keeps
what it measured. ``tools/gpu_check.sh`` runs this as its ``decode_graphs`` phase.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

#: a question per prompt, cycled (no dataset needed: a GPU machine may carry none)
QUESTIONS = (
    "Who directed the film that won the Palme d'Or in 1994?",
    "Which river flows through the capital of Hungary?",
    "What is the birthplace of the author of The Name of the Rose?",
    "Which element has the atomic number 26?",
    "In which year did the first person walk on the Moon?",
    "Who painted the ceiling of the Sistine Chapel?",
    "What is the largest moon of Saturn?",
    "Which composer wrote The Magic Flute?",
)


def policy_config(name: str, device: str, tokenizer: str | None) -> Any:
    from framework.rollout.policy import PolicyConfig

    if name.startswith("shape:"):
        cfg = PolicyConfig(source="shape", shape=name.removeprefix("shape:"), tokenizer=tokenizer)
    elif name in ("tiny", "smollm2"):
        cfg = PolicyConfig(source=name, tokenizer=tokenizer if name == "tiny" else None)
    else:
        cfg = PolicyConfig(source="path", path=name)
    cfg.device = device
    problems = cfg.problems()
    if problems:
        raise SystemExit("\n".join(f"[--policy {name}] {p}" for p in problems))
    return cfg


def timed(call: Callable[[], int], cuda: bool) -> tuple[int, float]:
    """``(tokens, seconds)`` of ``call`` (which returns its generated tokens)."""
    import torch

    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    tokens = call()
    if cuda:
        torch.cuda.synchronize()
    return tokens, time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--policy", default="shape:smollm2-135m", help="shape:<name>, tiny, or a folder")
    p.add_argument("--tokenizer", default=None, help="tokenizer folder for tiny and shape:")
    p.add_argument("--device", default="cuda")
    p.add_argument("--rollouts", type=int, default=64)
    p.add_argument("--prompts", type=int, default=16, help="distinct prompts among the rollouts")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--variants", nargs="+", default=["generate", "loop", "graphs"])
    p.add_argument("--out", required=True, help="the JSON of figures")
    args = p.parse_args()

    import torch

    from framework.rollout.hf_backend import (
        TransformersBackend,
        TransformersBackendConfig,
        rollout_dtype,
    )
    from framework.rollout.policy import load_policy

    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise SystemExit(f"[--device] got {args.device}; torch sees no CUDA. Fix: --device cpu.")
    torch.manual_seed(0)
    policy = policy_config(args.policy, args.device, args.tokenizer)
    dtype, why = rollout_dtype("auto", args.device)
    model, tok = load_policy(policy)
    model = model.to(dtype)
    texts = [f"Answer briefly. {QUESTIONS[i % len(QUESTIONS)]} ({i})" for i in range(args.prompts)]
    rows = [texts[i % args.prompts] for i in range(args.rollouts)]
    seqs = [tok.encode(t) for t in rows]
    batch = tok(rows, return_tensors="pt", padding=True).to(args.device)  # left padding
    n = args.new_tokens
    report: dict[str, Any] = {
        "device": args.device + (f" ({torch.cuda.get_device_name()})" if cuda else ""),
        "policy": args.policy,
        "dtype": str(dtype).removeprefix("torch."),
        "dtype_reason": why,
        "rollouts": args.rollouts,
        "prompts": args.prompts,
        "prompt_tokens": int(batch["input_ids"].shape[1]),
        "new_tokens": n,
        "torch": torch.__version__,
        "variants": {},
        "faster": None,
    }

    def generate(**extra: Any) -> Callable[[], int]:
        def call() -> int:
            with torch.inference_mode():
                out = model.generate(
                    **batch,
                    max_new_tokens=n,
                    min_new_tokens=n,
                    do_sample=True,
                    pad_token_id=tok.pad_token_id,
                    **extra,
                )
            return int((out.shape[1] - batch["input_ids"].shape[1]) * out.shape[0])

        return call

    attention = model.config._attn_implementation

    def loop() -> Callable[[], int]:
        # the backend installs its attention path on the model (the same kernel on a GPU, a
        # packed one for one-token queries on a CPU): put back for the variants after it
        backend = TransformersBackend(
            cfg=TransformersBackendConfig(
                name="transformers", policy=policy, micro_batch=args.rollouts, prefix_cache_tokens=0
            ),
            model=model,
            tokenizer=tok,
            owns_model=True,
        )
        return lambda: sum(len(g.token_ids) for g in backend.generate(seqs, [n] * len(seqs), ()))

    def graphs() -> Callable[[], int]:
        from transformers import CompileConfig

        return generate(cache_implementation="static", compile_config=CompileConfig())

    plans: dict[str, tuple[Callable[[], Callable[[], int]], int]] = {
        "generate": (lambda: generate(), 1),
        "loop": (loop, 1),
        "graphs": (graphs, 2),
    }
    for name in args.variants:
        if name == "graphs" and not cuda:
            report["variants"][name] = {
                "status": "skipped",
                "reason": "no CUDA: CUDA graphs need a GPU",
            }
            continue
        make, warmups = plans[name]
        call = make()
        warm = [round(timed(call, cuda)[1], 2) for _ in range(warmups)]
        tokens, seconds = timed(call, cuda)
        if model.config._attn_implementation != attention:
            model.set_attn_implementation(attention)
        report["variants"][name] = {
            "status": "measured",
            "tokens": tokens,
            "seconds": round(seconds, 3),
            "tokens_per_s": round(tokens / seconds, 1),
            "warmup_s": warm,
        }
        finish(report)
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
        print(f"[decode] {name}: {tokens / seconds:.1f} tokens/s (warm-up {warm} s)", flush=True)
    finish(report)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")


def finish(report: dict[str, Any]) -> None:
    """Each measured variant's ratio to ``generate``'s tokens/s, and the faster of loop and
    graphs (of those measured)."""
    v = report["variants"]
    base = v.get("generate", {}).get("tokens_per_s")
    for d in v.values():
        if d["status"] == "measured" and base:
            d["ratio_to_generate"] = round(d["tokens_per_s"] / base, 3)
    measured = {
        k: v[k]["tokens_per_s"]
        for k in ("loop", "graphs")
        if v.get(k, {}).get("status") == "measured"
    }
    report["faster"] = max(measured, key=lambda k: measured[k]) if measured else None
    report["switch_default"] = report["faster"] == "graphs"


if __name__ == "__main__":
    main()
