"""Registered datasets: the synthesized entity-annotated questions, and user files.

``dataset=synth`` (default) reads the splits written by :func:`synthesize`, running it first when the
output for these settings does not exist yet. ``dataset=files`` reads Search-R1-layout JSONL or
parquet files (NQ, HotpotQA, ... converted by the user).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING

from framework.config import ComponentConfig, Problem, check, check_range, option
from framework.config.app import RUN_DIR
from framework.data.entity_graph import Article, GraphConfig, build_graph
from framework.data.leakage import (
    HeldOut,
    answer_key,
    answer_repeats,
    refuse_leaks,
    split_overlaps,
)
from framework.data.quality import answerability, report, write_report
from framework.data.schema import DatasetError, QAItem, read_dataset, write_split
from framework.data.synthesis import (
    ALL_SPLITS,
    SPLITS,
    VALIDATION2,
    QuestionSynthesizer,
    SynthesisError,
    SynthesisStats,
    quotas_for,
)
from framework.paths import cache_root
from framework.registry import RETRIEVERS, load_components
from framework.registry.kinds import DATASETS
from framework.retrieval.corpus import CorpusConfig, corpus_fingerprint, iter_documents
from framework.retrieval.encoder import resolved_dtype

FORMAT_VERSION = 6  # bump when synthesis logic changes: cached outputs are keyed by it
#: rounds of "generate, drop the unanswerable, generate again"; a round with want=1 takes
#: milliseconds, and a dropping rate of 70% still fills 18 questions well within this
MAX_REFILL_ROUNDS = 64
#: why the synthesizer refuses a train walk that would leak a held-out question
LEAK_REASONS = ("answer_in_train_chain", "link_in_train_chain", "answer_in_train_question")


@dataclass
class AnswerabilityConfig:
    """The check that each hop's evidence can be found with the default retriever."""

    enabled: bool = option(True, "run the check (needs the index)")
    retriever: str = option("faiss", "retriever registry name")
    k: int = option(5, "evidence must be in the top k")
    drop_unanswerable: bool = option(True, "replace questions whose evidence is not found")

    def problems(self) -> list[Problem]:
        out = check_range(self.k, "k", low=1)
        out += check(
            self.retriever != "http",
            "retriever",
            self.retriever,
            "a local backend (faiss, bm25, hybrid)",
            "use answerability.retriever=faiss",
        )
        return out


@dataclass
class SynthDatasetConfig(ComponentConfig):
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    graph: GraphConfig = field(default_factory=GraphConfig)
    seed: int = option(0, "walks, templates, fuzzing and splits")
    train_size: int = 3000
    validation_size: int = 300
    test_size: int = 500
    hop_weights: list[float] = option(
        default_factory=lambda: [0.3, 0.3, 0.25, 0.15],
        help="share of 1, 2, 3, 4(, ...) hop questions",
    )
    split_salt: str = option(
        "leakfree-1",
        "salt of the answer -> split hash: a new salt draws a fresh partition (a test "
        "split no earlier run has seen); '' = the unsalted partition of format 4",
    )
    max_answer_repeats: int = option(
        1, "validation / test (/ validation2) questions per answer at most (0 = no cap)"
    )
    validation2_size: int = option(
        0,
        "questions of a second validation split, validation2: a share of the answers the "
        "main salt gives train is moved to it by validation2_salt, it is drawn like "
        "validation and test, and train is kept off it like them; validation and test stay "
        "the same questions; 0 = none (the splits and data key of earlier versions)",
    )
    validation2_salt: str = option(
        "fresh-1",
        "salt of the second hash that moves a share of train's answers to validation2 "
        "(only with validation2_size > 0): a new salt draws other validation2 questions",
    )
    fuzz_prob: float = option(0.3, "chance a clue's years become decades")
    attempts_per_question: int = option(
        200,
        "walk budget per question: random walks per open question, and prefixes the "
        "search for what they leave open may expand per question asked",
    )
    min_fill: float = option(0.5, "fail when a split gets less than this share of its size")
    answerability: AnswerabilityConfig = field(default_factory=AnswerabilityConfig)
    output_dir: str | None = option(None, "where splits go; None = $SEEKRL_CACHE/data/synth-<key>")
    cache_dir: str | None = option(None, "index cache (answerability)")
    progress: bool = True

    def problems(self) -> list[Problem]:
        out: list[Problem] = []
        for name in ("train_size", "validation_size", "test_size", "validation2_size"):
            out += check_range(getattr(self, name), name, low=0)
        out += check(
            bool(self.hop_weights)
            and all(w >= 0 for w in self.hop_weights)
            and sum(self.hop_weights) > 0,
            "hop_weights",
            self.hop_weights,
            "non-negative weights for 1, 2, ... hops with a positive sum",
            "e.g. dataset.hop_weights=[0.3,0.3,0.25,0.15]",
        )
        out += check_range(self.fuzz_prob, "fuzz_prob", low=0.0, high=1.0)
        out += check_range(self.attempts_per_question, "attempts_per_question", low=1)
        out += check_range(self.min_fill, "min_fill", low=0.0, high=1.0)
        out += check_range(self.max_answer_repeats, "max_answer_repeats", low=0)
        out += check(
            self.validation2_size <= 0 or bool(self.validation2_salt),
            "validation2_salt",
            self.validation2_salt,
            "a non-empty salt when validation2_size > 0",
            "e.g. dataset.validation2_salt=fresh-1",
        )
        return out

    def sizes(self) -> dict[str, int]:
        """Questions asked per split, in the order they are written (validation2 only when on)."""
        out = {"train": self.train_size, "validation": self.validation_size, "test": self.test_size}
        if self.validation2_size > 0:
            out[VALIDATION2] = self.validation2_size
        return out

    def settings(self) -> dict[str, Any]:
        """Every field but ``name``, without validation2's when it is off (so the data key and
        the quality report of a config without validation2 are those of earlier versions)."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if k != "name"}
        if self.validation2_size <= 0:
            out.pop("validation2_size")
            out.pop("validation2_salt")
        return out

    def key(self) -> str:
        """Identifies the output: every setting that changes the questions, and the corpus bytes."""
        settings = self.settings()
        for name in ("output_dir", "cache_dir", "progress"):
            settings.pop(name)
        payload = {"format": FORMAT_VERSION, "corpus": corpus_fingerprint(self.corpus), **settings}
        if self.answerability.enabled:
            dtype = _answerability_encoder_dtype(self)
            if dtype not in (None, "float32"):  # fp32 keys stay those of earlier versions
                payload["answerability_encoder_dtype"] = dtype
        return hashlib.blake2b(
            json.dumps(payload, sort_keys=True).encode(), digest_size=8
        ).hexdigest()

    def directory(self) -> Path:
        if self.output_dir:
            return Path(self.output_dir).expanduser()
        return cache_root(self.cache_dir) / "data" / f"synth-{self.key()}"


def _articles(cfg: CorpusConfig) -> list[Article]:
    return list(iter_documents(cfg))


def _answerability_entry(cfg: SynthDatasetConfig) -> Any:
    """The registered retriever the answerability check names (built-ins loaded first, so a
    library caller of :func:`synthesize` need not have loaded them)."""
    load_components()
    return RETRIEVERS.get(cfg.answerability.retriever)


def answerability_retriever_config(cfg: SynthDatasetConfig) -> Any:
    """The retriever config the answerability check uses: its defaults over the dataset's corpus."""
    entry = _answerability_entry(cfg)
    rcfg: Any = entry.config_cls(name=entry.name)
    rcfg.corpus, rcfg.cache_dir, rcfg.progress = cfg.corpus, cfg.cache_dir, cfg.progress
    return rcfg


def _answerability_encoder_dtype(cfg: SynthDatasetConfig) -> str | None:
    """The dtype the answerability check's encoder runs in (None: its retriever has no encoder)."""
    entry = _answerability_entry(cfg)
    encoder = getattr(entry.config_cls(name=entry.name), "encoder", None)
    if encoder is None:
        return None

    return resolved_dtype(encoder)


def _answerability_retriever(cfg: SynthDatasetConfig) -> Any:
    rcfg = answerability_retriever_config(cfg)
    return RETRIEVERS.get(rcfg.name).target(cfg=rcfg)


@dataclass
class SynthConfig:
    """The ``synth`` app (``seekrl-synth``, :func:`synthesize`): write the synthesized train /
    validation / test (/ validation2) splits."""

    run_dir: str = RUN_DIR
    dataset: Any = MISSING
    export_search_r1: str | None = option(
        None,
        "a folder to write train/validation/test.parquet to in Search-R1's layout (its "
        "instruction prompt; the entities in extra_info), from the splits for these settings "
        "(synthesized first unless cached); None = synthesize only",
    )

    def problems(self) -> list[Problem]:
        name = getattr(self.dataset, "name", None)
        out = check(
            name == "synth",
            "dataset.name",
            name,
            "synth (the synthesized dataset)",
            "run seekrl-synth with dataset=synth; other datasets are read, not written",
        )
        own = getattr(self.dataset, "output_dir", None)
        if self.export_search_r1 is not None and own:
            out += check(
                Path(self.export_search_r1).expanduser().resolve()
                != Path(own).expanduser().resolve(),
                "export_search_r1",
                self.export_search_r1,
                "a folder other than dataset.output_dir (whose parquet files hold the plain "
                "question as the prompt)",
                "pick another folder, e.g. export_search_r1=data/search_r1",
            )
        return out


def synthesize(cfg: SynthDatasetConfig, *, log: Any = print) -> Path:
    """Build the graph, sample questions, check answerability, write splits and reports.

    Returns:
        The output directory (``train/validation/test`` ``.jsonl`` and ``.parquet``, and
        ``validation2`` when ``cfg.validation2_size`` > 0,
        ``graph_stats.json``, ``quality_report.md/.json``, ``manifest.json``).

    An interrupted run (Ctrl-C, SIGTERM, a kill) leaves no ``manifest.json``, so the next run
    synthesizes again (about a minute on the shipped corpus) instead of reading partial splits; the
    index the answerability check built, or the embeddings it had computed, are kept.

    Raises:
        SynthesisError: the corpus has too few linked entities for the requested sizes.
    """
    clock = time.perf_counter()
    out_dir = cfg.directory()
    out_dir.mkdir(parents=True, exist_ok=True)
    # the manifest marks finished output: gone until this run has written every split and report,
    # so an interrupted run never leaves output that a rerun (or synth_ready) takes as finished
    (out_dir / "manifest.json").unlink(missing_ok=True)
    graph = build_graph(_articles(cfg.corpus), cfg.graph)
    stats = graph.save_stats(out_dir / "graph_stats.json")
    log(
        f"entity graph: {stats['articles']} articles, {stats['edges']} edges, "
        f"{stats['articles_with_out_edges']} with out-links"
    )
    sizes = cfg.sizes()
    synth = QuestionSynthesizer(
        graph,
        seed=cfg.seed,
        fuzz_prob=cfg.fuzz_prob,
        split_salt=cfg.split_salt,
        max_answer_repeats=cfg.max_answer_repeats,
        validation2_salt=cfg.validation2_salt,
    )
    wanted = {s: quotas_for(n, cfg.hop_weights) for s, n in sizes.items()}
    kept: dict[str, list[QAItem]] = {s: [] for s in sizes}
    fill = _Fill(cfg, synth, sizes, kept)
    retriever = _answerability_retriever(cfg) if cfg.answerability.enabled else None
    try:
        # the held-out splits first (validation and test as without validation2, which comes
        # after them so that their random draws are unchanged); then train, kept off them all
        fill.run({s: dict(wanted[s]) for s in SPLITS if s != "train"}, retriever)
        if VALIDATION2 in wanted:
            fill.run({VALIDATION2: dict(wanted[VALIDATION2])}, retriever)
        synth.held_out = HeldOut.of(kept)
        fill.run({"train": dict(wanted["train"])}, retriever)
    finally:
        if retriever is not None:
            retriever.close()
    shortfall = unfilled_quotas(wanted, kept, synth.stats, fill.dropped_by)
    for s in shortfall:
        log(
            f"[dataset] {s['split']} {s['hops']}-hop quota not filled: got {s['got']} of "
            f"{s['wanted']}: {s['why']}"
        )
    for split, n in sizes.items():
        if len(kept[split]) < cfg.min_fill * n:
            raise SynthesisError(
                f"[dataset.{split}_size] got {len(kept[split])} of {n} {split} questions after "
                f"{synth.stats.attempts} walks over {stats['articles']} articles with "
                f"{stats['edges']} links; expected at least {cfg.min_fill:.0%}. Fix: use a larger or "
                "more interlinked corpus, lower the sizes, or raise attempts_per_question."
            )
    overlaps = split_overlaps(kept)
    refuse_leaks(overlaps, "dataset")  # never reached unless the synthesizer's filter is broken
    for split in sizes:
        items = [
            dataclasses.replace(it, id=f"seekrl-synth-{split}-{i:06d}")
            for i, it in enumerate(sorted(kept[split], key=lambda it: (it.hops, it.chain)))
        ]
        kept[split] = items
        write_split(items, out_dir, split)
    answers = {s: answer_repeats(v) for s, v in kept.items()}
    rates = None
    if fill.checked:
        rates = {
            "retriever": cfg.answerability.retriever,
            "k": cfg.answerability.k,
            "checked": fill.checked,
            "dropped": fill.dropped,
            "rate": sum(sum(v) for v in fill.per_hop.values()) / fill.checked,
            "per_hop": {h: sum(v) / len(v) for h, v in fill.per_hop.items()},
        }
    sampling = {
        "attempts": synth.stats.attempts,
        "rejections": dict(synth.stats.rejections),
        "skipped": dict(synth.stats.skipped),
        "search_steps": synth.stats.search_steps,
    }
    data, markdown = report(
        kept,
        graph_stats=stats,
        sampling=sampling,
        answerability_rates=rates,
        settings=cfg.settings(),
        seed=cfg.seed,
        shortfall=shortfall,
        overlaps=overlaps,
        answers=answers,
    )
    report_path = write_report(out_dir, data, markdown)
    manifest = {
        "key": cfg.key(),
        "sizes": {s: len(v) for s, v in kept.items()},
        "overlaps": overlaps,
        "answers": answers,
        "shortfall": shortfall,
        "seconds": time.perf_counter() - clock,
    }
    tmp = out_dir / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2))
    os.replace(tmp, out_dir / "manifest.json")  # last, and atomic: the output is complete
    log(
        f"wrote {manifest['sizes']} to {out_dir} in {manifest['seconds']:.1f} s; report: {report_path}"
    )
    log(
        "held-out overlaps with the training data: "
        + ", ".join(f"{k} {v}" for k, v in overlaps.items())
        + "; distinct answers: "
        + ", ".join(f"{s} {a['distinct_answers']} of {a['questions']}" for s, a in answers.items())
    )
    return out_dir


@dataclass
class _Fill:
    """Fills quotas with synthesized questions, dropping (and refilling) the unanswerable ones."""

    cfg: SynthDatasetConfig
    synth: QuestionSynthesizer
    sizes: dict[str, int]
    kept: dict[str, list[QAItem]]
    checked: int = 0
    dropped: int = 0
    dropped_by: Counter = field(default_factory=Counter)  # (split, hops) -> questions dropped
    per_hop: dict[int, list[bool]] = field(default_factory=dict)

    def run(self, quotas: dict[str, dict[int, int]], retriever: Any) -> None:
        """Fill ``quotas`` (split -> hops -> count) into ``kept``, as far as the corpus allows."""
        cfg, sizes = self.cfg, self.sizes
        for _ in range(MAX_REFILL_ROUNDS):  # each round refills what answerability dropped
            want = sum(sum(q.values()) for q in quotas.values())
            if want == 0:
                break
            new = self.synth.generate(
                quotas,
                # (train, validation, test[, validation2]): see split_of_answer
                [sizes[s] for s in ALL_SPLITS if s in sizes],
                max_attempts=cfg.attempts_per_question * want,
                # the search tries every walk of a small corpus; on a large one random walks fill
                # the quotas, so it runs only for rare (split, hops) pairs and stops soon;
                # validation2 does not enlarge it, so validation and test stay as without it
                max_search_steps=cfg.attempts_per_question * sum(sizes[s] for s in SPLITS),
                progress=cfg.progress,
            )
            for split, items in new.items():
                flags = None
                if retriever is not None:
                    k = cfg.answerability.k
                    flags = answerability(items, retriever, k, progress=cfg.progress)
                for i, item in enumerate(items):
                    ok = all(flags[i]) if flags is not None else True
                    if flags is not None:
                        self.checked += 1
                        self.per_hop.setdefault(item.hops or 0, []).append(ok)
                    if ok or not cfg.answerability.drop_unanswerable:
                        extra = {**item.extra, "answerable": ok if flags is not None else None}
                        self.kept[split].append(dataclasses.replace(item, extra=extra))
                        quotas[split][item.hops or 0] -= 1
                    else:
                        self.dropped += 1
                        self.dropped_by[(split, item.hops)] += 1
                        self.synth.answer_counts[(split, answer_key(item))] -= 1
            if sum(len(v) for v in new.values()) == 0:
                break


def unfilled_quotas(
    wanted: dict[str, dict[int, int]],
    kept: dict[str, list[QAItem]],
    stats: SynthesisStats,
    dropped_by: Counter,
) -> list[dict[str, Any]]:
    """One entry per (split, hops) quota left short, with what was got and why.

    Args:
        wanted: split -> hops -> questions asked for.
        kept: split -> questions kept.
        stats: the synthesizer's stats (how its last search for each open quota ended).
        dropped_by: (split, hops) -> questions the answerability check dropped.

    Returns:
        ``{"split", "hops", "got", "wanted", "why"}`` dicts, in split then hop order; empty when the
        hop mix is exact.
    """
    out = []
    for split, quota in wanted.items():
        got = Counter(it.hops for it in kept[split])
        for hops, n in sorted(quota.items()):
            if got[hops] >= n:
                continue
            why = []
            if dropped_by[(split, hops)]:
                why.append(f"the answerability check dropped {dropped_by[(split, hops)]}")
            refused = sum(stats.skipped[k] for k in LEAK_REASONS) if split == "train" else 0
            if refused:
                why.append(
                    "train walks that would leak a held-out question (its answer or a link of "
                    f"its chain) were refused {refused} times"
                )
            search = stats.search.get((split, hops))
            if search == "exhausted":
                why.append(
                    f"walks exhausted: the corpus has no other valid {hops}-hop walk whose "
                    f"answer belongs to {split}"
                )
            elif search == "cut":
                why.append(
                    "walk budget exhausted before every walk was tried. "
                    "Fix: raise dataset.attempts_per_question"
                )
            else:
                why.append(f"{MAX_REFILL_ROUNDS} answerability refill rounds ran out")
            out.append(
                {"split": split, "hops": hops, "got": got[hops], "wanted": n, "why": "; ".join(why)}
            )
    return out


def synth_ready(cfg: SynthDatasetConfig) -> bool:
    """Whether the questions of ``cfg`` are already synthesized (a manifest with its key)."""
    manifest = cfg.directory() / "manifest.json"
    if not manifest.is_file():
        return False
    try:
        return json.loads(manifest.read_text()).get("key") == cfg.key()
    except json.JSONDecodeError:
        return False


@DATASETS.register("synth", config=SynthDatasetConfig)
def synth_dataset(split: str, *, cfg: SynthDatasetConfig) -> list[QAItem]:
    """The synthesized ``split``; synthesizes first when these settings have no output yet.

    Raises:
        DatasetError: an unknown split, or validation2 when ``cfg.validation2_size`` is 0.
    """
    _check_split(split, ALL_SPLITS)
    if split == VALIDATION2 and cfg.validation2_size <= 0:
        raise DatasetError(
            f"[dataset.validation2_size] got {cfg.validation2_size}; expected > 0 to read the "
            "validation2 split. Fix: set dataset.validation2_size (e.g. 100) or use "
            "dataset=synth_easy_v2."
        )
    if not synth_ready(cfg):
        synthesize(cfg)
    return read_dataset(cfg.directory() / f"{split}.jsonl")


@dataclass
class FilesDatasetConfig(ComponentConfig):
    train: str | None = option(None, "JSONL or parquet, Search-R1 layout")
    validation: str | None = None
    test: str | None = None

    def problems(self) -> list[Problem]:
        out: list[Problem] = []
        for split in SPLITS:
            path = getattr(self, split)
            if path is not None:
                out += check(
                    Path(path).expanduser().is_file(),
                    split,
                    path,
                    "an existing .jsonl or .parquet file",
                    f"set dataset.{split}=<file> or leave it null (seekrl-synth "
                    "export_search_r1=<folder> writes the synthesized splits to <folder>)",
                )
        out += check(
            any(getattr(self, s) for s in SPLITS),
            "train",
            None,
            "at least one split file",
            "set dataset.train=<file> (and validation/test)",
        )
        return out

    def key(self) -> str:
        """Identifies the questions: a hash of every split file's bytes."""
        h = hashlib.blake2b(digest_size=8)
        for split in SPLITS:
            path = getattr(self, split)
            h.update(f"{split}:".encode())
            if path is not None and Path(path).expanduser().is_file():
                with Path(path).expanduser().open("rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        h.update(block)
        return h.hexdigest()


def split_source(cfg: Any, split: str) -> str:
    """The file a dataset config's ``split`` is read from, for messages."""
    if hasattr(cfg, "directory"):  # synthesized data
        return str(cfg.directory() / f"{split}.jsonl")
    return str(getattr(cfg, split, None) or f"dataset={cfg.name} ({split})")


def data_key(cfg: Any) -> str | None:
    """What identifies a dataset config's questions (``cfg.key()``), None for one without a key: a
    cache of anything made from the questions (the cold-start SFT) must change when they do."""
    key = getattr(cfg, "key", None)
    return key() if callable(key) else None


@DATASETS.register("files", config=FilesDatasetConfig)
def files_dataset(split: str, *, cfg: FilesDatasetConfig) -> list[QAItem]:
    """The user's file for ``split``."""
    _check_split(split)
    path = getattr(cfg, split)
    if path is None:
        raise DatasetError(
            f"[dataset.{split}] got None; expected a file for the {split} split. "
            f"Fix: set dataset.{split}=<file.jsonl|file.parquet>."
        )
    return read_dataset(Path(path).expanduser())


def _check_split(split: str, names: tuple[str, ...] = SPLITS) -> None:
    if split not in names:
        raise DatasetError(
            f"[dataset] got split {split!r}; expected one of {list(names)}. Fix: choose one of "
            "those splits."
        )


__all__ = ["FilesDatasetConfig", "SynthDatasetConfig", "SynthesisError", "synthesize"]
