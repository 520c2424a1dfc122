"""What a run would build before it trains, found without building anything (``dry_run=true``).

Each stage that a run makes on first use and caches (the passage store, a retrieval index, the
synthesized questions, the converted policy, the cold-start SFT) is looked up in the cache by the
same keys the run uses; a missing one is reported with a rough time. The times come from rates
recorded on the machine :data:`RECORDED_ON` names, so on another CPU they are an order of magnitude,
not a promise. :func:`job_estimates` turns them into the per-stage plan (time and peak memory) that
``dry_run=true`` prints (:func:`dry_run`) and that the running job's stage lines count down from
(:func:`job_stages`). A GPU run's model stages are planned from recorded GPU figures where one fits
the run, else given no time at all (:mod:`framework.rl.gpu_plan`), never from these CPU rates.

Light: nothing here imports Lightning or loads a model, so a dry run takes seconds.
"""

from __future__ import annotations

import dataclasses
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from framework.data.datasets import SynthDatasetConfig, answerability_retriever_config, synth_ready
from framework.data.schema import DatasetError
from framework.paths import cache_root
from framework.progress import JobStages
from framework.registry import ALL
from framework.registry.listing import describe
from framework.registry.listing import render as render_components
from framework.retrieval.bm25 import BM25RetrieverConfig, bm25_index_dir
from framework.retrieval.corpus import CorpusConfig, corpus_fingerprint, document_count, store_path
from framework.retrieval.dense import FaissRetrieverConfig, faiss_index_dir
from framework.retrieval.embed_rates import RATES_FILE, embed_rate, worker_devices
from framework.retrieval.embeddings import embeddings_path
from framework.retrieval.encoder import encoder_fingerprint
from framework.retrieval.local import MANIFEST, LocalRetrieverConfig
from framework.retrieval.types import RetrievalError, RetrieverConfigBase
from framework.rl.config import TrainConfig
from framework.rl.gpu_plan import (
    GpuPlan,
    describe_plan,
    gpu_final_seconds,
    gpu_plan,
    gpu_rl_seconds,
    is_gpu_run,
)
from framework.rl.stages import checked_training_data
from framework.rollout.policy import PolicyConfig, policy_source
from framework.sft.warm_start import warm_start_sft
from framework.training.precision import native_bf16_on
from framework.types import ComponentConfig

#: the machine the rates and peaks below were recorded on (a fresh run of the README's main command,
#: 2026-11-25: 13 min 45 s in all)
RECORDED_ON = "2 cores of an AMD EPYC (Zen 5, avx512_bf16), bf16 training and rollouts"
#: seconds per synthesized question asked for, with the answerability check (1,300 in 29 s)
SYNTH_SECONDS_PER_QUESTION = 29.4 / 1300
#: expert trajectories kept per question asked for (30 of 64); seconds to make one (scripted
#: searches); seconds of SFT per kept trajectory and epoch (58 in 266 s, about 700-token
#: trajectories: longer ones cost more)
EXPERT_KEEP_RATE = 30 / 64
EXPERT_SECONDS_PER_QUESTION = 0.01
SFT_SECONDS_PER_SEQUENCE = 265.8 / 58
#: seconds per RL rollout, generation, update and end-of-run validation included (146 s for 32),
#: and per evaluated rollout (the final comparison: 198 s for 128)
RL_SECONDS_PER_ROLLOUT = 146.0 / 32
EVAL_SECONDS_PER_ROLLOUT = 198.4 / 128
#: a CPU without native bf16 trains and rolls out in fp32: the main job's model stages (warm start,
#: RL, final comparison) took 20.2 min at the fp32 sizes of scale=demo against 6.7 min at the
#: recorded bf16 rates for the same sizes, 3.0x (2 cores of a Zen 4 limited to AVX2 kernels,
#: 2026-12-02; the recorded machine's own fp32/bf16 ratios, 1.4x a step and 2.2x decoding, gave 1.8x,
#: which understated an AVX2 CPU)
FP32_FACTOR = 3.0
#: peak resident memory of each stage of the recorded run, GB (its JobStages lines)
PEAK_GB = {
    "index": 1.7,
    "questions": 1.6,
    "warm start (SFT)": 6.2,
    "RL": 7.0,
    "final comparison": 6.1,
}
#: the job's stages in order, and which plan stages each one builds
JOB_STAGES = {
    "index": ("passage store", "passage embeddings", "faiss index", "bm25 index"),
    "questions": ("questions",),
    "warm start (SFT)": ("policy", "warm start (SFT)"),
    "RL": (),
    "final comparison": (),
}
#: the job's stages that train or roll out the policy (on a GPU in a GPU run)
MODEL_STAGES = ("warm start (SFT)", "RL", "final comparison")
#: what an estimate says for a stage it has no figures for
NO_GPU_FIGURES = "no GPU figures"


@dataclass(frozen=True)
class Stage:
    """One thing a run makes on first use.

    Attributes:
        name: what it is, e.g. ``faiss index``.
        ready: found in the cache (or given as a path): nothing to build.
        where: its file or directory.
        work: what building it takes, with a rough time (empty when ready).
        seconds: that time; None where there are no figures for it (a GPU stage without them).
    """

    name: str
    ready: bool
    where: str
    work: str = ""
    seconds: float | None = 0.0

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


def _native_bf16() -> bool:
    return native_bf16_on("cpu")[0]


def embed_estimate(
    rcfg: FaissRetrieverConfig, passages: int, rates: Path
) -> tuple[float | None, str]:
    """Seconds to embed ``passages`` passages with ``rcfg``'s encoder on its devices, and the plan's
    words for it: from a rate measured by an earlier run here (``rates``, the cache's
    ``rates.json``), else one recorded in :data:`~framework.retrieval.embed_rates.RECORDED_RATES`,
    else no time ("no recorded rate for <model> on <device>"), never another encoder's or device's.
    """
    fp = encoder_fingerprint(rcfg.encoder)
    where = ", ".join(worker_devices(rcfg.encoder))
    rate = embed_rate(rcfg.encoder, fp, rates)
    if rate is None:
        return None, (
            f"embed at least {passages} passages, no recorded rate for {fp['model']} "
            f"({fp['dtype']}) on {where}"
        )
    seconds = passages / rate.passages_per_s
    return seconds, (
        f"embed at least {passages} passages, {minutes(seconds)} at "
        f"{rate.passages_per_s:.0f} passages/s on {where}: {rate.source}"
    )


def model_factor() -> float:
    """How much longer the model stages take here than on the recorded machine (1 or
    :data:`FP32_FACTOR`)."""
    return 1.0 if _native_bf16() else FP32_FACTOR


def corpus_stages(corpus: CorpusConfig, cache_dir: str | None) -> tuple[str, int, Stage]:
    """The corpus fingerprint, its document count and the passage-store stage.

    Nothing here reads the whole source on a launch after the first: the fingerprint reuses the
    source's recorded digest, the count is the built store's (else an estimate from sampled lines,
    said "about").

    Raises:
        RetrievalError: a corpus source that cannot be found.
    """
    root = cache_root(cache_dir)
    fingerprint = corpus_fingerprint(corpus, root)
    path = store_path(root, fingerprint)
    documents, exact = document_count(corpus, path)
    count = f"{documents} documents" if exact else f"about {documents} documents"
    stage = Stage("passage store", path.is_file(), str(path), f"{count}, seconds", 10.0)
    return fingerprint, documents, stage


def retriever_stages(rcfg: RetrieverConfigBase) -> Iterator[Stage]:
    """The store and indexes the local retriever ``rcfg`` reads; nothing for other backends."""
    if not isinstance(rcfg, LocalRetrieverConfig):
        return
    fingerprint, documents, store = corpus_stages(rcfg.corpus, rcfg.cache_dir)
    yield store
    if isinstance(rcfg, FaissRetrieverConfig):
        emb = embeddings_path(rcfg, fingerprint)
        seconds, embed = embed_estimate(rcfg, documents, emb.parent / RATES_FILE)
        yield Stage("passage embeddings", emb.is_file(), str(emb), embed, seconds)
        index = faiss_index_dir(rcfg, fingerprint)
        work = f"{rcfg.index.type} index over the embeddings, seconds to minutes"
        yield Stage("faiss index", (index / MANIFEST).is_file(), str(index), work, 10.0)
    if isinstance(rcfg, BM25RetrieverConfig) or hasattr(rcfg, "bm25"):
        index = bm25_index_dir(rcfg, fingerprint)
        ready = (index / MANIFEST).is_file()
        yield Stage("bm25 index", ready, str(index), "tokenise, seconds", 10.0)


def dataset_stages(dcfg: ComponentConfig) -> Iterator[Stage]:
    """The synthesized questions (and the answerability check's index); user files are read."""
    if not isinstance(dcfg, SynthDatasetConfig):
        return
    ready = synth_ready(dcfg)
    if not ready and dcfg.answerability.enabled:
        yield from retriever_stages(answerability_retriever_config(dcfg))
    n = dcfg.train_size + dcfg.validation_size + dcfg.test_size
    seconds = n * SYNTH_SECONDS_PER_QUESTION
    yield Stage(
        "questions", ready, str(dcfg.directory()), f"{n} questions, {minutes(seconds)}", seconds
    )


def policy_stages(pcfg: PolicyConfig) -> Iterator[Stage]:
    """The policy's weights made on first use (the packaged SmolLM2 GGUF converted to a
    safetensors checkpoint, once), where its source makes them."""
    built = policy_source(pcfg).built
    if built is not None:
        target = built(pcfg)
        work = "convert the packaged weights, seconds"
        yield Stage("policy", (target / "config.json").is_file(), str(target), work, 5.0)


def warm_start_stages(cfg: TrainConfig) -> Iterator[Stage]:
    """The cold-start SFT policy (expert trajectories, then SFT), cached and shared by every arm."""
    if cfg.warm_start.path is not None or not cfg.warm_start.sft:
        return
    sft_cfg, done = warm_start_sft(cfg)
    kept = sft_cfg.expert.questions * EXPERT_KEEP_RATE
    seconds = kept * sft_cfg.optim.epochs * SFT_SECONDS_PER_SEQUENCE
    seconds += 2 * cfg.warm_start.eval_questions * EVAL_SECONDS_PER_ROLLOUT  # before/after check
    seconds = seconds * model_factor() + sft_cfg.expert.questions * EXPERT_SECONDS_PER_QUESTION
    planned: float | None = seconds
    time_text = minutes(seconds)
    if is_gpu_run(cfg):  # no SFT was measured on a GPU
        planned, time_text = None, NO_GPU_FIGURES
    work = (
        f"{sft_cfg.expert.questions} expert questions, {sft_cfg.optim.epochs} epoch(s) of SFT, "
        f"{time_text}"
    )
    ready = (done / "policy" / "config.json").is_file()
    yield Stage("warm start (SFT)", ready, str(done), work, planned)


def train_plan(cfg: TrainConfig) -> list[Stage]:
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


def rl_seconds(cfg: TrainConfig) -> float:
    """Recorded-rate seconds of the RL stage (0 for a sampler without the usual batch fields)."""
    per_step = getattr(cfg.sampler, "questions_per_step", 0) * getattr(cfg.sampler, "group_size", 0)
    return cfg.trainer.max_steps * per_step * RL_SECONDS_PER_ROLLOUT * model_factor()


def final_seconds(cfg: TrainConfig) -> float:
    """Recorded-rate seconds of the final comparison (two evaluations); 0 when switched off."""
    f = cfg.final_eval
    if not f.enabled:
        return 0.0
    questions = f.questions or getattr(cfg.dataset, "validation_size", 0) or 100
    return 2 * questions * f.samples_per_question * EVAL_SECONDS_PER_ROLLOUT * model_factor()


@dataclass(frozen=True)
class Estimate:
    """One stage of the job's plan.

    Attributes:
        stage: its name (:data:`JOB_STAGES`).
        seconds: its planned time (0: all cached); None where there are no figures for it.
        peak_gb: its peak resident memory on the host; None without figures.
        gpu_gb: its peak GPU memory per GPU (a GPU run's model stages with figures), else None.
    """

    stage: str
    seconds: float | None
    peak_gb: float | None
    gpu_gb: float | None = None


def job_estimates(cfg: TrainConfig, stages: list[Stage] | None = None) -> list[Estimate]:
    """The plan of each stage of ``seekrl-train`` (:data:`JOB_STAGES`), from the recorded rates
    and peaks; a stage whose parts are all cached is planned at 0 s. A GPU run's model stages
    come from its GPU figure (:func:`~framework.rl.gpu_plan.gpu_plan`), or have none."""
    stages = train_plan(cfg) if stages is None else stages
    gpu = gpu_plan(cfg)
    out = []
    for name, parts in JOB_STAGES.items():
        seconds: float | None
        if name == "RL":
            seconds = rl_seconds(cfg) if gpu is None else gpu_rl_seconds(cfg, gpu)
        elif name == "final comparison":
            seconds = final_seconds(cfg) if gpu is None else gpu_final_seconds(cfg, gpu)
        else:
            todo = [s.seconds for s in stages if s.name in parts and not s.ready]
            seconds = None if None in todo else sum(t for t in todo if t is not None)
        if gpu is None or name not in MODEL_STAGES:
            out.append(Estimate(name, seconds, PEAK_GB[name] if seconds is not None else None))
        else:
            out.append(_gpu_estimate(name, seconds, gpu))
    return out


def _gpu_estimate(name: str, seconds: float | None, gpu: GpuPlan) -> Estimate:
    """A GPU run's model stage: the figure's peaks where it has a time from them."""
    fig = gpu.figure
    if fig is None or seconds is None or name not in ("RL", "final comparison"):
        return Estimate(name, seconds, None)  # no SFT figures; a cached warm start costs nothing
    return Estimate(name, seconds, fig.peak_rss_gb, fig.peak_gpu_gb)


def _estimate_line(e: Estimate) -> str:
    """One stage's line: its time and peak memory, or that there are no figures for it."""
    if e.seconds is None:  # a model stage of a GPU run, or an encoder without a rate
        return f"  {e.stage:<18} {NO_GPU_FIGURES if e.stage in MODEL_STAGES else 'no figures'}"
    time_text = minutes(e.seconds) if e.seconds else "cached, seconds"
    if e.gpu_gb is not None:
        memory = f"peak GPU about {e.gpu_gb:.1f} GB, host {e.peak_gb:.1f} GB"
        return f"  {e.stage:<18} {time_text:<14} {memory}"
    if e.peak_gb is None:
        return f"  {e.stage:<18} {time_text}"
    return f"  {e.stage:<18} {time_text:<14} peak about {e.peak_gb:.1f} GB"


def render_estimates(estimates: list[Estimate], gpu_note: str | None = None) -> str:
    """The per-stage estimate as lines, with their total and the machine they come from;
    ``gpu_note`` (a GPU run) says what its GPU stages come from, or why they have no figures."""
    scaled = "" if model_factor() == 1.0 else f", model stages x{FP32_FACTOR} for fp32 here"
    if gpu_note is None:
        lines = [
            f"estimate per stage (recorded figures: {RECORDED_ON}{scaled}; another CPU differs):"
        ]
    else:
        cpu_note = f"CPU stages: recorded figures of {RECORDED_ON}; another CPU differs."
        lines = ["estimate per stage:"]
        for note in (cpu_note, gpu_note):
            lines += textwrap.wrap(note, 100, initial_indent="  ", subsequent_indent="    ")
    lines += [_estimate_line(e) for e in estimates]
    unknown = [e.stage for e in estimates if e.seconds is None]
    if unknown:
        lines.append(f"  {'whole job':<18} not estimated (no figures for {', '.join(unknown)})")
        return "\n".join(lines)
    total = sum(e.seconds or 0.0 for e in estimates)
    peak = max(e.peak_gb for e in estimates if e.peak_gb is not None)
    gpu = [e.gpu_gb for e in estimates if e.gpu_gb is not None]
    memory = f"peak about {peak:.1f} GB"
    if gpu:
        memory = f"peak GPU about {max(gpu):.1f} GB, host {peak:.1f} GB"
    lines.append(f"  {'whole job':<18} {minutes(total):<14} {memory}")
    return "\n".join(lines)


def rl_estimate(cfg: TrainConfig) -> str:
    """The RL stage's size and a rough time (a GPU run's from its GPU figure, or none)."""
    steps = cfg.trainer.max_steps
    per_step = getattr(cfg.sampler, "questions_per_step", 0) * getattr(cfg.sampler, "group_size", 0)
    if not per_step:  # a sampler without the usual batch fields
        return f"{steps} steps"
    rollouts = steps * per_step
    gpu = gpu_plan(cfg)
    if gpu is None:
        return f"{steps} steps, {rollouts} rollouts, {minutes(rl_seconds(cfg))}"
    seconds = gpu_rl_seconds(cfg, gpu)
    if seconds is None:
        return f"{steps} steps, {rollouts} rollouts, {NO_GPU_FIGURES} (see the estimate below)"
    gpus = f"{gpu.world} GPUs" if gpu.world > 1 else "1 GPU"
    device = gpu.figure.device if gpu.figure else gpu.device
    return f"{steps} steps, {rollouts} rollouts, {minutes(seconds)} on {gpus} ({device} figures)"


def render(stages: list[Stage]) -> str:
    """The plan as lines, one per stage."""
    lines = [s.line() for s in stages]
    if all(s.ready for s in stages):
        lines.append("  everything cached: the run starts with its first RL step")
    return "\n".join(lines)


def job_stages(cfg: TrainConfig) -> JobStages:
    """The job's stage lines, counting down from the recorded-rate plan of what this run still has
    to build."""
    try:
        estimates = job_estimates(cfg)
    except (RetrievalError, OSError):  # a missing corpus: the index stage reports it
        estimates = [Estimate(name, 0.0, 0.0) for name in JOB_STAGES]
    return JobStages("seekrl-train", [(e.stage, e.seconds) for e in estimates])


def dry_run(cfg: TrainConfig) -> None:
    """Bind every configured component, say what the run would build (from the cache, building
    nothing: no index, no data, no model loaded), check the data when it exists, then stop."""
    print(f"seekrl-train: configuration valid (algorithm={cfg.algorithm}, seed={cfg.seed})")
    choice = cfg.trainer.precision_choice()  # reads the CPU's flags only
    print(f"  precision  {choice.precision} ({choice.reason})")
    schema = {f.name for f in dataclasses.fields(cfg)}
    for section in [group for group in ALL if group in schema]:  # the registries it selects from
        component = getattr(cfg, section)
        entry = ALL[section].get(component.name)
        ALL[section].bind(component)  # fails here, not mid-run, if a target cannot take its config
        values = {k: v for k, v in vars(component).items() if k != "name"}
        print(f"  {section:<10} {component.name:<22} [{entry.source}] {values}")
    try:
        stages = train_plan(cfg)
    except RetrievalError as exc:  # a corpus source that is not there
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    print("\nwhat it builds before the first RL step:")
    print(render(stages))
    print(f"  RL                 {rl_estimate(cfg)}")
    f = cfg.final_eval
    if f.enabled:
        print(
            f"  final comparison   the warm start and the trained policy on {f.questions or 'all'} "
            f"validation questions x {f.samples_per_question} samples, paired"
        )
    print()
    gpu = gpu_plan(cfg)
    note = None if gpu is None else describe_plan(cfg, gpu)
    print(render_estimates(job_estimates(cfg, stages), note))
    if all(s.ready for s in stages if s.name == "questions"):
        try:  # the data exists: check its schema, the reward's and the warm start's needs now
            splits, notes = checked_training_data(cfg)
        except DatasetError as exc:
            print(exc, file=sys.stderr)
            raise SystemExit(2) from None
        sizes = ", ".join(f"{k} {len(v)}" for k, v in splits.items())
        print(f"  data               {sizes} questions, checked")
        for note in notes:
            print(f"                     {note}")
    print()
    print(render_components(describe()))
    print("\nseekrl-train: dry run; drop dry_run=true to train.")


__all__ = [
    "Estimate",
    "Stage",
    "dry_run",
    "job_estimates",
    "job_stages",
    "minutes",
    "render",
    "render_estimates",
    "rl_estimate",
    "train_plan",
]
