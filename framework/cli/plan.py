"""What a run would build before it trains, found without building anything (``dry_run=true``).

Each stage that a run makes on first use and caches (the passage store, a retrieval index, the
synthesized questions, the converted policy, the cold-start SFT) is looked up in the cache by the
same keys the run uses; a missing one is reported with a rough time. The times come from rates
measured on the project's reference machine (2 cores of an Intel Xeon Cascade Lake, fp32), so on
another CPU they are an order of magnitude, not a promise.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

#: passages embedded per second by the packaged MiniLM encoder (docs/benchmarks/retrieval.md)
EMBED_PASSAGES_PER_S = 53.0
#: seconds to synthesize 1,800 questions with the answerability check, embeddings cached
SYNTH_SECONDS_PER_QUESTION = 47.0 / 1800
#: expert trajectories kept per question asked for, and seconds per SFT step of batch 4 with about
#: 1,000-token trajectories (docs/study.md, the learn_cpu cold start: 110 of 160, 45 s per step)
EXPERT_KEEP_RATE = 110 / 160
SFT_SECONDS_PER_SEQUENCE = 45.0 / 4
#: seconds per RL rollout (generation and update) of the learn_cpu run: 2,124 s for 256 rollouts
RL_SECONDS_PER_ROLLOUT = 8.3


@dataclass(frozen=True)
class Stage:
    """One thing a run makes on first use.

    Attributes:
        name: what it is, e.g. ``faiss index``.
        ready: found in the cache (or given as a path): nothing to build.
        where: its file or directory.
        work: what building it takes, with a rough time (empty when ready).
    """

    name: str
    ready: bool
    where: str
    work: str = ""

    def line(self) -> str:
        state = "cached" if self.ready else "to build"
        tail = f"  ({self.work})" if self.work and not self.ready else ""
        return f"  {self.name:<18} {state:<9} {self.where}{tail}"


def minutes(seconds: float) -> str:
    """A rough duration: seconds under two minutes, minutes under two hours, else hours."""
    if seconds < 120:
        return f"about {max(round(seconds), 1)} s"
    if seconds < 7200:
        return f"about {round(seconds / 60)} min"
    return f"about {seconds / 3600:.1f} h"


def corpus_stages(corpus: Any, cache_dir: str | None) -> tuple[str, int, Stage]:
    """The corpus fingerprint, its document count and the passage-store stage.

    Raises:
        RetrievalError: a corpus source that cannot be found.
    """
    from framework.paths import cache_root
    from framework.retrieval.corpus import corpus_fingerprint, iter_documents, store_path

    fingerprint = corpus_fingerprint(corpus)
    path = store_path(cache_root(cache_dir), fingerprint)
    documents = sum(1 for _ in iter_documents(corpus))
    stage = Stage("passage store", path.is_file(), str(path), f"{documents} documents, seconds")
    return fingerprint, documents, stage


def retriever_stages(rcfg: Any) -> Iterator[Stage]:
    """The store and indexes the local retriever ``rcfg`` reads; nothing for other backends."""
    from framework.retrieval.bm25 import BM25RetrieverConfig, bm25_index_dir
    from framework.retrieval.dense import FaissRetrieverConfig, embeddings_path, faiss_index_dir
    from framework.retrieval.local import MANIFEST, LocalRetrieverConfig

    if not isinstance(rcfg, LocalRetrieverConfig):
        return
    fingerprint, documents, store = corpus_stages(rcfg.corpus, rcfg.cache_dir)
    yield store
    if isinstance(rcfg, FaissRetrieverConfig):
        emb = embeddings_path(rcfg, fingerprint)
        embed = f"embed at least {documents} passages, {minutes(documents / EMBED_PASSAGES_PER_S)}"
        yield Stage("passage embeddings", emb.is_file(), str(emb), embed)
        index = faiss_index_dir(rcfg, fingerprint)
        work = f"{rcfg.index.type} index over the embeddings, seconds to minutes"
        yield Stage("faiss index", (index / MANIFEST).is_file(), str(index), work)
    if isinstance(rcfg, BM25RetrieverConfig) or hasattr(rcfg, "bm25"):
        index = bm25_index_dir(rcfg, fingerprint)
        yield Stage("bm25 index", (index / MANIFEST).is_file(), str(index), "tokenise, seconds")


def dataset_stages(dcfg: Any) -> Iterator[Stage]:
    """The synthesized questions (and the answerability check's index); user files are read."""
    from framework.data.datasets import (
        SynthDatasetConfig,
        answerability_retriever_config,
        synth_ready,
    )

    if not isinstance(dcfg, SynthDatasetConfig):
        return
    ready = synth_ready(dcfg)
    if not ready and dcfg.answerability.enabled:
        yield from retriever_stages(answerability_retriever_config(dcfg))
    n = dcfg.train_size + dcfg.validation_size + dcfg.test_size
    work = f"{n} questions, {minutes(n * SYNTH_SECONDS_PER_QUESTION)}"
    yield Stage("questions", ready, str(dcfg.directory()), work)


def policy_stages(pcfg: Any) -> Iterator[Stage]:
    """The packaged SmolLM2 GGUF converted to a safetensors checkpoint, once."""
    from framework.paths import cache_root

    if pcfg.source == "smollm2":
        target = cache_root(pcfg.cache_dir) / "models" / "smollm2-135m-instruct"
        work = "convert the packaged GGUF, seconds"
        yield Stage("policy", (target / "config.json").is_file(), str(target), work)


def warm_start_stages(cfg: Any) -> Iterator[Stage]:
    """The cold-start SFT policy (expert trajectories, then SFT), cached and shared by every arm."""
    from framework.sft.warm_start import warm_start_sft

    if cfg.warm_start.path is not None or not cfg.warm_start.sft:
        return
    sft_cfg, done = warm_start_sft(cfg)
    kept = sft_cfg.expert.questions * EXPERT_KEEP_RATE
    seconds = kept * sft_cfg.optim.epochs * SFT_SECONDS_PER_SEQUENCE
    work = (
        f"{sft_cfg.expert.questions} expert questions, {sft_cfg.optim.epochs} epoch(s) of SFT, "
        f"{minutes(seconds)}"
    )
    yield Stage("warm start (SFT)", (done / "policy" / "config.json").is_file(), str(done), work)


def train_plan(cfg: Any) -> list[Stage]:
    """Every stage ``seekrl-train`` with ``cfg`` builds before its first RL step, in order."""
    stages = [*retriever_stages(cfg.retriever), *dataset_stages(cfg.dataset)]
    stages += [*policy_stages(cfg.rollout.policy), *warm_start_stages(cfg)]
    seen: set[str] = set()
    out = []
    for s in stages:  # the answerability check and the agent often share a store and an index
        if s.where not in seen:
            seen.add(s.where)
            out.append(s)
    return out


def rl_estimate(cfg: Any) -> str:
    """The RL stage's size and a rough time."""
    steps = cfg.trainer.max_steps
    per_step = getattr(cfg.sampler, "questions_per_step", 0) * getattr(cfg.sampler, "group_size", 0)
    if not per_step:  # a sampler without the usual batch fields
        return f"{steps} steps"
    rollouts = steps * per_step
    return f"{steps} steps, {rollouts} rollouts, {minutes(rollouts * RL_SECONDS_PER_ROLLOUT)}"


def render(stages: list[Stage]) -> str:
    """The plan as lines, one per stage."""
    lines = [s.line() for s in stages]
    if all(s.ready for s in stages):
        lines.append("  everything cached: the run starts with its first RL step")
    return "\n".join(lines)


__all__ = ["Stage", "minutes", "render", "rl_estimate", "train_plan"]
