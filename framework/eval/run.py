"""An evaluation run (``seekrl-eval``, the train job's final comparison, a study's evaluations): a
policy as a search agent on the configured datasets (:func:`evaluate_policy`), or a comparison of
finished evaluations (:func:`compare_runs`).

An evaluation writes ``report.md`` (with its PNG plots), ``results.json``, ``summary.csv``,
``by_hops.csv``, ``by_source.csv`` and ``samples.jsonl`` into ``cfg.run_dir``.
"""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework.eval.config import EvalConfig
from framework.progress import Progress

if TYPE_CHECKING:
    from framework.data.schema import QAItem


class EvalError(RuntimeError):
    """A bad evaluation input (a dataset)."""


def evaluate(cfg: EvalConfig) -> dict[str, object]:
    """``seekrl-eval``: compare the evaluations ``cfg.compare`` names, or evaluate the policy."""
    return compare_runs(cfg) if cfg.compare else evaluate_policy(cfg)


def compare_runs(cfg: EvalConfig) -> dict[str, object]:
    """Put finished evaluations (or a sweep's) side by side, with no new rollouts; prints the
    comparison and writes ``comparison.md`` into ``cfg.run_dir``."""
    from framework.eval.compare import CompareError, compare

    run_dir = Path(cfg.run_dir)
    try:
        result = compare([Path(c) for c in cfg.compare], cfg.labels or None, run_dir)
    except (FileNotFoundError, CompareError) as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    print((run_dir / "comparison.md").read_text())
    print(f"seekrl-eval: comparison written to {run_dir}")
    return result


def load_datasets(cfg: EvalConfig) -> tuple[dict[str, list[QAItem]], list[str]]:
    """The evaluated datasets and notices for the report: the files ``cfg.files`` names when it
    names any (only those), else the configured dataset's ``cfg.split``.

    A dataset is subsampled to ``cfg.questions``; a file with several ``data_source`` values
    (Search-R1's merged test file) to ``cfg.questions`` per source, so that every source has its
    row in the per-source table. Question ids that repeat across the sources of a file (the merged
    file keeps each source's own ids) are read as ``<data_source>/<id>``.

    Raises:
        EvalError: an empty dataset, a file named twice, or a question id that repeats within one
            source.
    """
    from framework.data.schema import read_dataset
    from framework.registry import DATASETS

    notices: list[str] = []
    if cfg.files:
        sets = {}
        for name, path in dataset_names(cfg.files).items():
            sets[name], renamed = unique_ids(read_dataset(path), name)
            if renamed:
                notices.append(
                    f"{name}: question ids repeat across its data sources (as in Search-R1's "
                    "merged test file); each is read as <data_source>/<id>."
                )
    else:
        sets = {f"{cfg.dataset.name}/{cfg.split}": DATASETS.bind(cfg.dataset)(cfg.split)}
    rng = random.Random(cfg.seed)
    for name, items in list(sets.items()):
        if not items:
            raise EvalError(
                f"[dataset] {name} has no questions. Fix: point it at a non-empty split."
            )
        if cfg.questions:
            sets[name] = subsample(items, cfg.questions, rng)
        if not all(it.entities for it in sets[name]):
            notices.append(
                f"{name}: no ground-truth entities on every question; the entity analysis is "
                "skipped for it (the other metrics are reported)."
            )
    return sets, notices


def dataset_names(files: Sequence[str]) -> dict[str, Path]:
    """The report's name of each file of ``files``: its stem (``nq/test.parquet``: ``test``), or
    ``<folder>/<stem>`` where stems repeat (``nq/test``, ``hotpotqa/test``), or the path itself
    where those repeat too.

    Raises:
        EvalError: a file named twice.
    """
    paths = [Path(f).expanduser() for f in files]
    seen: dict[Path, str] = {}
    for f, path in zip(files, paths, strict=True):
        if path.resolve() in seen:
            raise EvalError(
                f"[files] got {f} twice ({seen[path.resolve()]} too); expected each file once. "
                "Fix: drop the repeated entry."
            )
        seen[path.resolve()] = f
    for names in (
        [p.stem for p in paths],
        [f"{p.parent.name}/{p.stem}" for p in paths],
        [str(p) for p in paths],  # distinct files: distinct paths
    ):
        if len(set(names)) == len(names):
            break
    return dict(zip(names, paths, strict=True))


def unique_ids(items: list[QAItem], name: str) -> tuple[list[QAItem], bool]:
    """``items`` with ids unique within the file: as they are when they are, else each read as
    ``<data_source>/<id>`` (ids repeating across sources); and whether they were renamed.

    Raises:
        EvalError: an id that repeats within one source.
    """
    ids = [it.id for it in items]
    if len(set(ids)) == len(ids):
        return items, False
    counts = Counter((it.data_source, it.id) for it in items)
    if len(counts) < len(items):
        source, dup = next(key for key, n in counts.items() if n > 1)
        raise EvalError(
            f"[files] {name}: got question id {dup!r} twice in data_source {source!r}; expected "
            "ids unique within a source (samples and records are keyed by them). Fix: give the "
            "rows unique ids, or drop the repeated rows."
        )
    return [replace(it, id=f"{it.data_source}/{it.id}") for it in items], True


def subsample(items: list[QAItem], questions: int, rng: random.Random) -> list[QAItem]:
    """At most ``questions`` of ``items`` drawn with ``rng``, per ``data_source`` where there
    are several (each source in the order it first appears), else of the whole."""
    groups: dict[str, list[QAItem]] = {}
    for it in items:
        groups.setdefault(it.data_source, []).append(it)
    out: list[QAItem] = []
    for group in groups.values():
        out += rng.sample(group, questions) if len(group) > questions else group
    return out


def journal_path(run_dir: Path, dataset: str) -> Path:
    """Where the finished waves of ``dataset`` are kept until the evaluation ends: a rerun in the
    same ``run_dir`` rolls out only the waves that are not there."""
    return run_dir / f"journal-{dataset.replace('/', '_')}.jsonl"


def eval_backend(cfg: EvalConfig, model: Any, tokenizer: Any, owns_model: bool = True) -> Any:
    """The rollout backend of an evaluation: ``cfg.rollout``'s (through the registry) with the
    sampling seed ``cfg.seed``, handed ``model`` (an evaluation trains nothing; ``owns_model``:
    it may convert ``model`` in place)."""
    from framework.rollout.backend import build_backend

    sampling = replace(cfg.rollout.sampling, seed=cfg.seed)
    rollout = replace(cfg.rollout, sampling=sampling)
    return build_backend(rollout, model, tokenizer, owns_model=owns_model)


def evaluate_policy(
    cfg: EvalConfig, policy: tuple[Any, Any, str] | None = None
) -> dict[str, object]:
    """Roll out the policy ``cfg.checkpoint`` names ``samples_per_question`` times on each question
    of the evaluated datasets (:func:`load_datasets`), judge the answers, summarise per dataset, per
    hop count and per ``data_source`` with the macro average over sources
    (:func:`~framework.eval.sources.by_source`), and write the outputs; returns the results
    (``results.json``, which also records the answer-extraction rule:
    :data:`~framework.eval.answer_rule.ANSWER_RULE`).

    ``policy``: ``(model, tokenizer, description)`` of a policy already in memory (on
    ``cfg.rollout.policy.device``, in eval mode; left as it is) to evaluate instead of loading
    ``cfg.checkpoint``'s (the train job's final comparison: the trained weights before
    ``export.dtype`` rounds them).

    Raises:
        SystemExit: status 2 with the message for a bad checkpoint, dataset, policy or retriever.
    """
    from framework.data.schema import DatasetError
    from framework.eval.answer_rule import ANSWER_RULE
    from framework.eval.harness import (
        DatasetResults,
        rollout_records,
        summarize,
        summarize_by_hops,
    )
    from framework.eval.records import EvalRecord
    from framework.eval.report import flat, source_lines, write_outputs
    from framework.eval.sources import by_source
    from framework.registry import JUDGES, RETRIEVERS
    from framework.retrieval.types import RetrievalError
    from framework.rollout.engine import AgentLoop
    from framework.rollout.policy import PolicyError
    from framework.training.checkpoints import CheckpointLoadError, load_checkpoint_policy

    run_dir = Path(cfg.run_dir)
    clock = time.perf_counter()
    try:
        sets, notices = load_datasets(cfg)
        if policy is None:
            model, tok, described = load_checkpoint_policy(cfg.checkpoint, cfg.rollout.policy)
        else:
            model, tok, described = policy
        retriever = RETRIEVERS.bind(cfg.retriever)()
    except (EvalError, CheckpointLoadError, DatasetError, PolicyError, RetrievalError) as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    backend = eval_backend(cfg, model, tok, owns_model=policy is None)
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
    sources = by_source(records, k)
    results: dict[str, object] = {
        "policy": described,
        "k": k,
        "judge": cfg.judge.name,
        "answer_rule": ANSWER_RULE,
        "seed": cfg.seed,
        "seconds": round(time.perf_counter() - clock, 1),
        "schedule": schedule(cfg, backend, waves),
        "datasets": datasets,
        "by_source": sources,
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
    if len(sources["rows"]) > 1:
        print("by data source:", *source_lines(sources), sep="\n")
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
