"""An evaluation run (``seekrl-eval``, the train job's final comparison, a study's evaluations): a
policy as a search agent on the configured datasets (:func:`evaluate_policy`), or a comparison of
finished evaluations (:func:`compare_runs`).

An evaluation writes ``report.md`` (with its PNG plots), ``results.json``, ``summary.csv``,
``by_hops.csv`` and ``samples.jsonl`` into ``cfg.run_dir``.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from framework.eval.config import EvalConfig
from framework.progress import Progress


class EvalError(RuntimeError):
    """A bad evaluation input (a dataset)."""


def evaluate(cfg: EvalConfig) -> dict[str, object]:
    """``seekrl-eval``: compare the evaluations ``cfg.compare`` names, or evaluate the policy."""
    return compare_runs(cfg) if cfg.compare else evaluate_policy(cfg)


def compare_runs(cfg: EvalConfig) -> dict[str, object]:
    """Put finished evaluations (or a sweep's) side by side, with no new rollouts; prints the
    comparison and writes ``comparison.md`` into ``cfg.run_dir``."""
    from framework.eval.report import CompareError, compare

    run_dir = Path(cfg.run_dir)
    try:
        result = compare([Path(c) for c in cfg.compare], cfg.labels or None, run_dir)
    except (FileNotFoundError, CompareError) as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    print((run_dir / "comparison.md").read_text())
    print(f"seekrl-eval: comparison written to {run_dir}")
    return result


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


def journal_path(run_dir: Path, dataset: str) -> Path:
    """Where the finished waves of ``dataset`` are kept until the evaluation ends: a rerun in the
    same ``run_dir`` rolls out only the waves that are not there."""
    return run_dir / f"journal-{dataset.replace('/', '_')}.jsonl"


def eval_backend(cfg: EvalConfig, model: Any, tokenizer: Any) -> Any:
    """The rollout backend of an evaluation: ``cfg.rollout``'s (through the registry) with the
    sampling seed ``cfg.seed``, handed ``model`` (an evaluation trains nothing)."""
    from framework.rollout.backend import build_backend

    sampling = replace(cfg.rollout.sampling, seed=cfg.seed)
    return build_backend(replace(cfg.rollout, sampling=sampling), model, tokenizer, owns_model=True)


def evaluate_policy(cfg: EvalConfig) -> dict[str, object]:
    """Roll out the policy ``cfg.checkpoint`` names ``samples_per_question`` times on each question
    of the configured datasets, judge the answers, summarise, and write the outputs; returns the
    results (``results.json``).

    Raises:
        SystemExit: status 2 with the message for a bad checkpoint, dataset, policy or retriever.
    """
    from framework.data.schema import DatasetError
    from framework.eval.harness import (
        DatasetResults,
        rollout_records,
        summarize,
        summarize_by_hops,
    )
    from framework.eval.records import EvalRecord
    from framework.eval.report import flat, write_outputs
    from framework.registry import JUDGES, RETRIEVERS
    from framework.retrieval.types import RetrievalError
    from framework.rollout.engine import AgentLoop
    from framework.rollout.policy import PolicyError
    from framework.training.checkpoints import CheckpointLoadError, load_checkpoint_policy

    run_dir = Path(cfg.run_dir)
    clock = time.perf_counter()
    try:
        sets, notices = load_datasets(cfg)
        model, tok, described = load_checkpoint_policy(cfg.checkpoint, cfg.rollout.policy)
        retriever = RETRIEVERS.bind(cfg.retriever)()
    except (EvalError, CheckpointLoadError, DatasetError, PolicyError, RetrievalError) as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    backend = eval_backend(cfg, model, tok)
    del model  # the backend holds it (converted to its rollout dtype)
    judge = JUDGES.bind(cfg.judge)(backend=backend)
    loop = AgentLoop(backend, retriever, cfg.agent)
    k = cfg.samples_per_question
    records: list[EvalRecord] = []
    datasets: dict[str, DatasetResults] = {}
    waves: dict[str, dict[str, int]] = {}
    try:
        for name, items in sets.items():
            # one plain line per batch of questions (a batch takes minutes), also on a terminal
            progress = Progress(
                f"eval {name}", len(items), "question", every_s=0, min_s=0, plain=True
            )
            got = rollout_records(
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
            records += got
            datasets[name] = DatasetResults(
                overall=summarize(got, k), by_hops=summarize_by_hops(got, k)
            )
    finally:
        retriever.close()
    results: dict[str, object] = {
        "policy": described,
        "k": k,
        "judge": cfg.judge.name,
        "seed": cfg.seed,
        "seconds": round(time.perf_counter() - clock, 1),
        "schedule": schedule(cfg, backend, waves),
        "datasets": datasets,
    }
    write_outputs(run_dir, results, records, notices)
    for name in sets:  # every row is in samples.jsonl now
        journal_path(run_dir, name).unlink(missing_ok=True)
    for n in notices:
        print(f"notice: {n}")
    for name, s in datasets.items():
        o = flat(s["overall"])
        print(
            f"{name}: Pass@1 {o['pass@1']:.3f} [{o['pass@1_low']:.3f}, {o['pass@1_high']:.3f}], "
            f"Pass@{k} {o['pass@k']:.3f}, pass^{k} {o['pass^k']:.3f}, "
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
