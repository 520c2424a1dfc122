"""Memory benchmark: peak resident memory and time of one training step of the policy, per setting.

    python3 tools/bench/memory.py                     # SmolLM2-135M, 4 x 1,024 and 4 x 2,048 tokens
    python3 tools/bench/memory.py --rows 4 --lengths 1024

Each setting runs in a fresh process (peak resident memory is a process's high-water mark): it
loads the policy, then takes two AdamW steps on ``rows`` random sequences of ``length`` tokens of
which every other token of the last 80% is trained (an SFT-like loss mask), under the precision
``trainer.precision=auto`` picks on this machine, and reports its peak resident set and the second
step's time. Settings:

- ``plain``: every activation kept (the behaviour before activation recomputation);
- ``checkpointing``: ``trainer.gradient_checkpointing=true`` (the default);
- ``micro-batches``: checkpointing and the batch split into micro-batches of at most 4,096 padded
  tokens, as ``warm_start.optim.micro_batch_tokens`` does in the SFT (the default).

All use the chunked vocabulary projection. Figures go to ``docs/benchmarks/memory.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

SETTINGS = ("plain", "checkpointing", "micro-batches")


def child(setting: str, rows: int, length: int) -> dict[str, Any]:
    """One setting in this process: peak resident GB and seconds of the second step."""
    import torch

    from framework.lightning.trainer import TrainerConfig, apply_gradient_checkpointing
    from framework.memory import peak_rss_bytes
    from framework.rollout.policy import PolicyConfig, load_policy
    from framework.sft.module import token_groups
    from framework.training.tokens import TokenBatch, token_logprobs

    torch.manual_seed(0)
    precision = TrainerConfig().precision_choice().precision
    model, _ = load_policy(PolicyConfig(source="smollm2"))
    model.train()
    if setting != "plain":
        apply_gradient_checkpointing(model, TrainerConfig(gradient_checkpointing=True))
    resp = int(length * 0.8)
    ids = torch.randint(0, model.config.vocab_size - 1, (rows, length))
    mask = torch.zeros((rows, resp), dtype=torch.long)
    mask[:, ::2] = 1
    groups = token_groups([length] * rows, 4096 if setting == "micro-batches" else 0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    seconds = 0.0
    for _ in range(2):
        start = time.perf_counter()
        for g in groups:
            batch = TokenBatch(
                ids[g],
                torch.ones((len(g), length), dtype=torch.long),
                torch.arange(length).expand(len(g), length).contiguous(),
                mask[g],
            )
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
                logp, _ = token_logprobs(model, batch)
            (-(logp.sum()) / mask.sum()).backward()
        opt.step()
        opt.zero_grad()
        seconds = time.perf_counter() - start
    return {"peak_gb": peak_rss_bytes() / 1e9, "step_s": seconds, "precision": precision}


def render(report: dict[str, Any]) -> str:
    m = report["meta"]
    lines = [
        "# Memory of one training step",
        "",
        f"Command: `{m['command']}`  ",
        f"Machine: {m['cpu']}, {m['cores']} cores, torch {m['torch']}; precision {m['precision']}  ",
        f"Date: {m['date']}  ",
        "Policy: SmolLM2-135M-Instruct with AdamW (weights, gradients and optimiser state are about "
        "2.2 GB of it); two steps per setting, each in a fresh process; the time is the second "
        "step's. One run: read times as ±10 %.",
        "",
        "| batch | setting | peak resident GB | step s |",
        "|---|---|---|---|",
    ]
    for r in report["results"]:
        lines.append(
            f"| {r['rows']} x {r['length']} tokens | {r['setting']} | {r['peak_gb']:.2f} | "
            f"{r['step_s']:.1f} |"
        )
    lines += [
        "",
        "`checkpointing` recomputes each decoder layer's activations in the backward pass "
        "(`trainer.gradient_checkpointing`, default true); `micro-batches` also splits the batch "
        "into micro-batches of at most 4,096 padded tokens whose gradients add up "
        "(`warm_start.optim.micro_batch_tokens` in the SFT, `optim.micro_batch_tokens` in RL).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(REPO / "docs" / "benchmarks" / "memory"))
    args = parser.parse_args()
    if args.child:
        setting, rows, length = args.child
        print(json.dumps(child(setting, int(rows), int(length))))
        return
    import torch

    from framework.training.precision import cpu_name

    results = []
    for length in args.lengths:
        for setting in args.settings:
            proc = subprocess.run(
                [sys.executable, __file__, "--child", setting, str(args.rows), str(length)],
                capture_output=True,
                text=True,
                check=True,
            )
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            results.append({"setting": setting, "rows": args.rows, "length": length, **got})
            print(json.dumps(results[-1]), flush=True)
    report = {
        "meta": {
            "command": "python3 tools/bench/memory.py " + " ".join(sys.argv[1:]),
            "cpu": cpu_name(),
            "cores": os.cpu_count(),
            "torch": torch.__version__,
            "precision": results[0]["precision"] if results else "",
            "date": time.strftime("%Y-%m-%d"),
        },
        "results": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    out.with_suffix(".md").write_text(render(report))
    print(render(report))


if __name__ == "__main__":
    main()
