"""Policy-update benchmark: the whole-batch update against PPO mini-batches, and against another
checkout's update, side by side in one run.

    python3 tools/bench/update.py                               # this checkout alone
    python3 tools/bench/update.py --peer /tmp/seekrl-old --peer-python /tmp/venv-old/bin/python

One fixed batch (``--rollouts`` rollouts in groups of ``--group``, prompts of 64 tokens and
responses of ``--response`` tokens, random advantages) of a random Llama of the shape
``--hidden`` x ``--layers`` with SmolLM2's vocabulary, trained by
:func:`framework.rl.update.policy_update` with GRPO's PPO-clip loss (token mean) and AdamW. Arms,
each timed ``--rounds`` times in alternation after a warm-up, from the same starting weights:

- ``whole``: ``optim.mini_batch_size=0`` (one optimiser step, on policy: no behaviour pass);
- ``mini<k>``: ``k`` mini-batches (one behaviour pass over all but the first, ``k`` steps);
- ``epochs2``: two epochs over the whole batch (one behaviour pass, two steps);
- ``peer``: the ``whole`` arm run by the checkout at ``--peer`` (its own ``framework``, in a child
  process, on the same batch), for "no slower than before".

Every arm runs in ``--alternations`` fresh processes, the arms' order rotated each time (the
machine's pace drifts; a fixed order gave the first arm a 1.6x penalty here).

Figures: median seconds per update, per optimiser step and per rollout-pass (an optimiser step's
share of the batch), each as a ratio to ``whole``. Written to ``docs/benchmarks/update.json`` with
the CPU named; the numbers compare only within one run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "docs" / "benchmarks" / "update.json"


def build(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """``(model, trajectories, advantages)``: the fixed batch (seeded) and a fresh model."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from framework.types import Trajectory

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 4,
        num_hidden_layers=args.layers,
        num_attention_heads=max(args.hidden // 64, 1),
        num_key_value_heads=max(args.hidden // 64, 1),
        tie_word_embeddings=True,
        pad_token_id=0,
    )
    model = LlamaForCausalLM(config)
    gen = torch.Generator().manual_seed(1)
    trajs = []
    for i in range(args.rollouts):
        response = args.response - int(torch.randint(0, args.response // 2, (1,), generator=gen))
        ids = torch.randint(3, 49152, (64 + response,), generator=gen).tolist()
        trajs.append(
            Trajectory(
                question=i // args.group,
                group=i // args.group,
                token_ids=ids,
                loss_mask=[0] * 64 + [1] * response,
                prompt_len=64,
            )
        )
    advantages = torch.randn(args.rollouts, generator=gen)
    return model, trajs, advantages


def time_arm(args: argparse.Namespace, mini: int, epochs: int) -> dict[str, float]:
    """Seconds of ``--rounds`` updates of one arm (after one warm-up), from the same weights."""
    import copy

    import torch

    from framework.algorithms.losses.kl import KLConfig
    from framework.algorithms.losses.ppo_clip import ClipLossConfig
    from framework.rl.batch import RolloutBatch
    from framework.rl.config import OptimConfig
    from framework.rl.update import loss_spec, plan_options, policy_update

    torch.set_num_threads(args.threads)
    model, trajs, advantages = build(args)
    spec = loss_spec(ClipLossConfig(name="ppo_clip", agg="token_mean"), KLConfig(name="k3"))
    fields = dict(micro_batch_size=args.micro, micro_batch_tokens=0, skip_zero_advantage=False)
    if mini:
        fields["mini_batch_size"] = mini
    optim = OptimConfig(policy_epochs=epochs, **fields)  # type: ignore[arg-type]
    batch = RolloutBatch.build(trajs, pad_id=0)
    seconds, steps = [], 0
    for r in range(args.rounds + 1):
        policy = copy.deepcopy(model)
        opt = torch.optim.AdamW(policy.parameters(), lr=1e-6)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
        plan = batch.plan(advantages, plan_options(optim, spec))
        start = time.perf_counter()
        figures = policy_update(policy, plan, spec, opt, sched, optim)
        if r:  # the first is a warm-up
            seconds.append(time.perf_counter() - start)
        steps = int(figures.get("optimizer_steps", epochs))
    return {"seconds": median(seconds), "optimizer_steps": steps, "epochs": epochs}


def child(
    args: argparse.Namespace, repo: Path, mini: int, epochs: int, python: str = sys.executable
) -> dict[str, float]:
    """One arm timed in its own process, importing ``framework`` from ``repo`` (with ``python``,
    whose environment must resolve ``framework`` to ``repo``: an editable install elsewhere wins
    over ``sys.path``)."""
    cmd = [
        python,
        str(Path(__file__).resolve()),
        "--arm",
        f"{mini},{epochs}",
        "--repo",
        str(repo),
        *(f"--{k}={getattr(args, k)}" for k in ARGS),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=repo)
    return json.loads(out.stdout.strip().splitlines()[-1])


ARGS = ("rollouts", "group", "response", "hidden", "layers", "micro", "rounds", "threads")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rollouts", type=int, default=16)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--response", type=int, default=192)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--alternations", type=int, default=5, help="processes per arm")
    ap.add_argument("--peer", type=Path, default=None, help="an older checkout to compare with")
    ap.add_argument(
        "--peer-python",
        default=sys.executable,
        help="the interpreter of an environment with --peer installed (editable)",
    )
    ap.add_argument("--arm", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--repo", type=Path, default=REPO, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.arm is not None:  # a child: one arm, its figures as one JSON line
        sys.path.insert(0, str(args.repo))
        import framework

        if Path(framework.__file__).resolve().parents[1] != args.repo.resolve():
            raise SystemExit(f"framework comes from {framework.__file__}, not {args.repo}")
        mini, epochs = (int(v) for v in args.arm.split(","))
        print(json.dumps(time_arm(args, mini, epochs)))
        return
    arms = {"whole": (0, 1), "epochs2": (0, 2)}
    arms.update({f"mini{k}": (args.rollouts // k, 1) for k in (2, 4)})
    results: dict[str, list[dict[str, float]]] = {name: [] for name in arms}
    if args.peer is not None:
        results["peer"] = []
    order = [*arms, *(["peer"] if args.peer is not None else [])]
    for a in range(args.alternations):  # each arm in a fresh process, the order rotated each time
        for name in order[a % len(order) :] + order[: a % len(order)]:
            if name == "peer":
                assert args.peer is not None
                results["peer"].append(child(args, args.peer.resolve(), 0, 1, args.peer_python))
            else:
                results[name].append(child(args, REPO, *arms[name]))
    base = median(r["seconds"] for r in results["whole"])
    table = {}
    for name, runs in results.items():
        sec = median(r["seconds"] for r in runs)
        steps = runs[0]["optimizer_steps"]
        passes = runs[0]["epochs"]  # rollout-passes: each epoch sees the batch once
        table[name] = {
            "seconds_per_update": sec,
            "optimizer_steps": steps,
            "vs_whole_per_update": sec / base,
            "vs_whole_per_optimizer_step": (sec / steps) / base,
            "vs_whole_per_rollout_pass": (sec / passes) / base,
        }
    sys.path.insert(0, str(REPO))
    from framework.training.precision import cpu_name

    out = {
        "cpu": cpu_name(),
        "settings": {k: getattr(args, k) for k in ARGS},
        "peer": None if args.peer is None else str(args.peer),
        "arms": table,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    for name, row in table.items():
        print(
            f"{name:8s} {row['seconds_per_update']:.3f} s/update, {row['optimizer_steps']} steps, "
            f"x{row['vs_whole_per_update']:.2f} per update, "
            f"x{row['vs_whole_per_rollout_pass']:.2f} per rollout-pass"
        )
    print(f"wrote {OUT.relative_to(REPO)} ({out['cpu']})")


if __name__ == "__main__":
    main()
