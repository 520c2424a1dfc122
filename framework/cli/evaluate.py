"""``seekrl-eval``: evaluate a policy as a search agent, or compare evaluations.

seekrl-eval                                          # the base policy, 64 validation questions, k = 3
seekrl-eval checkpoint=runs/train/<run>              # a trained policy (its policy/ folder)
seekrl-eval checkpoint=runs/train/<run>/checkpoints/step-000004.ckpt
seekrl-eval files=[nq_test.jsonl] questions=0        # more datasets, all their questions
seekrl-eval compare=[runs/eval/a,runs/eval/b] labels=[grpo,e_grpo]
seekrl-eval compare=runs/multirun/<sweep>          # a sweep: its evaluations, or its sweep table

Writes ``report.md`` (with its PNG plots), ``results.json``, ``summary.csv``, ``by_hops.csv``,
``samples.jsonl`` and TensorBoard logs into the run directory.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from framework.cli.app import run_app
from framework.cli.schema import EvalConfig
from framework.progress import Progress


class EvalError(RuntimeError):
    """A bad evaluation input (checkpoint, dataset)."""


def resolve_policy(cfg: EvalConfig) -> tuple[Any, Any, str]:
    """``(model, tokenizer, description)`` of the policy to evaluate.

    Raises:
        EvalError: a ``.ckpt`` whose weights do not fit the configured ``rollout.policy``.
    """
    import torch

    from framework.rollout.policy import load_policy
    from framework.training.checkpoints import latest_checkpoint, policy_folder

    base = cfg.rollout.policy
    if cfg.checkpoint is None:
        model, tok = load_policy(base)
        return model, tok, f"base policy ({base.source}{': ' + base.path if base.path else ''})"
    p = Path(cfg.checkpoint).expanduser()
    if p.is_dir():
        folder = policy_folder(p)
        if folder is not None:
            model, tok = load_policy(replace(base, source="path", path=str(folder)))
            return model, tok, str(folder)
        try:
            p = latest_checkpoint(p)
        except FileNotFoundError:
            raise EvalError(
                f"[checkpoint] {p} has neither policy/ nor checkpoints/step-*.ckpt. "
                "Fix: point checkpoint at a finished run."
            ) from None
    model, tok = load_policy(base)
    state = torch.load(p, map_location="cpu", weights_only=True)
    weights = {
        k.removeprefix("policy."): v
        for k, v in state.get("state_dict", {}).items()
        if k.startswith("policy.")
    }
    lora = any("lora_" in k for k in weights)
    if lora:
        from framework.training.lora import LoraConfig, apply_lora

        model = apply_lora(model, LoraConfig(enabled=True))
    try:
        model.load_state_dict(weights, strict=True)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
        raise EvalError(
            f"[checkpoint] {p} does not match the configured rollout.policy "
            f"(source={base.source}): {first[:300]}. Fix: set rollout.policy to the model the "
            "run trained (e.g. rollout.policy.source=tiny), or evaluate its policy/ folder."
        ) from None
    return model.eval(), tok, str(p)


def load_datasets(cfg: EvalConfig) -> tuple[dict[str, list], list[str]]:
    """The evaluated datasets (each subsampled to ``questions``) and notices for the report."""
    from framework.data.schema import read_dataset
    from framework.registry import DATASETS

    sets = {f"{cfg.dataset.name}/{cfg.split}": DATASETS.bind(cfg.dataset)(cfg.split)}
    for f in cfg.files:
        sets[Path(f).stem] = read_dataset(Path(f).expanduser())
    notices = []
    rng = random.Random(cfg.seed)
    for name, items in list(sets.items()):
        if not items:
            raise EvalError(
                f"[dataset] {name} has no questions. Fix: point it at a non-empty split."
            )
        if cfg.questions and len(items) > cfg.questions:
            sets[name] = rng.sample(items, cfg.questions)
        if not all(it.entities for it in sets[name]):
            notices.append(
                f"{name}: no ground-truth entities on every question; the entity analysis is "
                "skipped for it (the other metrics are reported)."
            )
    return sets, notices


def eval_config_for(
    train_cfg: Any, checkpoint: Path | None, out: Path, settings: Mapping[str, Any]
) -> EvalConfig:
    """The eval app's config for a policy of a train run: the run's dataset, retriever, rollout
    settings and agent budgets, the rule judge, and ``settings`` (``split``, ``questions``,
    ``samples_per_question``, ``seed``, ``batch_questions``); ``checkpoint`` None evaluates
    ``train_cfg.rollout.policy`` itself (the warm start)."""
    from framework.cli.app import load_config

    keys = ("split", "questions", "samples_per_question", "seed", "batch_questions")
    base = load_config("eval", [f"run_dir={out}", *(f"{k}={settings[k]}" for k in keys)])
    return replace(
        base,
        checkpoint=None if checkpoint is None else str(checkpoint),
        dataset=train_cfg.dataset,
        retriever=train_cfg.retriever,
        rollout=train_cfg.rollout,
        agent=train_cfg.agent,
    )


def journal_path(run_dir: Path, dataset: str) -> Path:
    """Where the finished waves of ``dataset`` are kept until the evaluation ends: a rerun in the
    same ``run_dir`` rolls out only the waves that are not there."""
    return run_dir / f"journal-{dataset.replace('/', '_')}.jsonl"


def evaluate(cfg: EvalConfig) -> dict[str, Any]:
    from framework.data.schema import DatasetError
    from framework.eval.harness import rollout_rows, summarize, summarize_by_hops
    from framework.eval.report import CompareError, compare, write_outputs
    from framework.registry import JUDGES, RETRIEVERS
    from framework.retrieval.types import RetrievalError
    from framework.rollout.engine import AgentLoop
    from framework.rollout.hf_backend import TransformersBackend
    from framework.rollout.policy import PolicyError

    run_dir = Path(cfg.run_dir)
    if cfg.compare:
        try:
            result = compare([Path(c) for c in cfg.compare], cfg.labels or None, run_dir)
        except (FileNotFoundError, CompareError) as exc:
            print(exc, file=sys.stderr)
            raise SystemExit(2) from None
        print((run_dir / "comparison.md").read_text())
        print(f"seekrl-eval: comparison written to {run_dir}")
        return result
    clock = time.perf_counter()
    try:
        sets, notices = load_datasets(cfg)
        model, tok, described = resolve_policy(cfg)
        retriever = RETRIEVERS.bind(cfg.retriever)()
    except (EvalError, DatasetError, PolicyError, RetrievalError) as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    sampling = replace(cfg.rollout.sampling, seed=cfg.seed)
    backend = TransformersBackend(
        cfg=replace(cfg.rollout, sampling=sampling), model=model, tokenizer=tok, owns_model=True
    )
    del model  # the backend holds it (converted to its rollout dtype)
    judge = JUDGES.bind(cfg.judge)(backend=backend)
    loop = AgentLoop(backend, retriever, cfg.agent)
    k = cfg.samples_per_question
    rows: list[dict[str, Any]] = []
    datasets = {}
    waves: dict[str, dict[str, int]] = {}
    try:
        for name, items in sets.items():
            # one plain line per batch of questions (a batch takes minutes), also on a terminal
            progress = Progress(
                f"eval {name}", len(items), "question", every_s=0, min_s=0, plain=True
            )
            got = rollout_rows(
                loop,
                items,
                k,
                judge,
                dataset=name,
                batch_questions=cfg.batch_questions,
                wave_questions=cfg.wave_questions,
                progress=progress,
                journal=journal_path(run_dir, name),
                seed=cfg.seed,
                waves=waves.setdefault(name, {}),
            )
            rows += got
            datasets[name] = {"overall": summarize(got, k), "by_hops": summarize_by_hops(got, k)}
    finally:
        retriever.close()
    results = {
        "policy": described,
        "k": k,
        "judge": cfg.judge.name,
        "seed": cfg.seed,
        "seconds": round(time.perf_counter() - clock, 1),
        "schedule": schedule(cfg, backend, waves),
        "datasets": datasets,
    }
    write_outputs(run_dir, results, rows, notices)
    for name in sets:  # every row is in samples.jsonl now
        journal_path(run_dir, name).unlink(missing_ok=True)
    for n in notices:
        print(f"notice: {n}")
    for name, s in datasets.items():
        o = s["overall"]
        print(
            f"{name}: Pass@1 {o['pass@1']:.3f} [{o['pass@1_ci'][0]:.3f}, {o['pass@1_ci'][1]:.3f}], "
            f"Pass@{k} {o[f'pass@{k}']:.3f}, pass^{k} {o[f'pass^{k}']:.3f}, "
            f"tool calls {o['tool_calls']:.2f}, format errors {o['format_error_rate']:.3f}"
        )
    print(f"seekrl-eval: report {run_dir / 'report.md'} ({results['seconds']} s)")
    return results


def schedule(cfg: EvalConfig, backend: Any, waves: Mapping[str, Any]) -> dict[str, Any]:
    """How the rollouts were computed, beyond the seed: the settings a sample's tokens depend on
    (the batches it decoded in and the rollout dtype) and, per dataset, the waves taken from the
    journal of an interrupted launch (the same rows as rolled out now, so a resumed evaluation
    can be told from an uninterrupted one, although their records are equal)."""
    import torch

    rollout = cfg.rollout
    return {
        "batch_questions": cfg.batch_questions,
        "wave_questions": cfg.wave_questions or cfg.batch_questions,
        "rollout_dtype": str(getattr(backend, "dtype", "")).removeprefix("torch."),
        "rollout_dtype_reason": getattr(backend, "dtype_reason", None),
        "decoder": getattr(rollout, "decoder", None),
        "micro_batch": getattr(rollout, "micro_batch", None),
        "prefix_cache_tokens": getattr(rollout, "prefix_cache_tokens", None),
        "torch_threads": torch.get_num_threads(),
        "waves": dict(waves),
    }


def main() -> None:
    run_app("eval", evaluate)


if __name__ == "__main__":
    main()
