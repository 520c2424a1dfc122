"""A study's archive: everything its report is computed from, small enough to commit.

``seekrl-study`` keeps, under ``<out_dir>/archive/``:

* ``study_config.json``: the arms, seeds, baseline, evaluation settings and analysis settings;
* ``eval/start.jsonl.gz`` and ``eval/<arm>/seed<S>.jsonl.gz``: every evaluation's per-question,
  per-sample records (:mod:`framework.eval.records`);
* ``training/<arm>/seed<S>.json``: each run's status, times, versions (git commit, precision, CPU),
  its provenance (when it trained and was evaluated, each launch's commit and uncommitted changes,
  the questions' data key, the pre-registration: :mod:`framework.study.integrity`; runs
  archived before it was kept have none), the training curves the report draws (the logged
  scalars of :data:`CURVE_TAGS` only) and the
  histogram of E-GRPO's normalised entity rate over its wrong training rollouts
  (:func:`~framework.study.entity_credit.run_histogram`, from its saved trajectories), and what each
  step spent (rollouts, generated tokens, optimiser steps: :data:`COMPUTE_TAGS`);
* ``test_evaluations.json``: how many times each policy was evaluated on the test split;
* ``basis.json``: the questions and warm start the study stands on (``seekrl-study``'s
  ``study_basis`` and ``content_basis``), so that a study resumed from its archive elsewhere
  (``archive_to``) can check it stands on the same.

:func:`archive_study` brings the archive up to date from the study directory (it never deletes:
an archive copied elsewhere without its study directory stays whole), and :class:`StudyArchive`
reads it. The report (:mod:`framework.study.report`) reads nothing else, so a committed
archive regenerates the published tables exactly: ``seekrl-study report_only=true
out_dir=<the directory that holds archive/>``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, is_dataclass, replace
from pathlib import Path
from typing import TypedDict, cast

from framework.eval.curves import Series, read_scalars
from framework.eval.paired import load_samples
from framework.eval.records import RECORDS, EvalRecord, load_records, write_records
from framework.study.entity_credit import run_histogram
from framework.study.integrity import run_provenance
from framework.study.layout import (
    ARCHIVE,
    BASIS,
    TEST_COUNTS,
    TRAINING,
    eval_dir,
    read_json_object,
    run_dir_of,
    saved_config,
)
from framework.study.runs import RunState, train_finished
from framework.study.schema import LearningBarConfig, StudyConfig, arm_seeds
from framework.study.types import JSON, Method, RunRecord

#: training curves drawn per arm (mean over seeds, band = min..max)
CURVE_TAGS = (
    "rollout/reward",
    "rollout/accuracy",
    "rollout/entity_match_rate",
    "rollout/partial_credit_share",
    "rollout/wrong_entity_rate_mean",
    "rollout/zero_variance_groups",
    "rollout/response_length",
    "rollout/tool_calls",
    "loss/entropy",
)


#: what each training step spent (``rl_step``'s figures), kept per run for the screen's compute
#: columns and matching (framework/study/screen.py): every rollout generated, their generated
#: tokens, the optimiser steps; and, for runs logged before those, the trained rollouts, the
#: generated tokens per rollout and the mini-batches' optimiser steps
COMPUTE_TAGS = (
    "train/generated_rollouts",
    "train/generated_tokens",
    "train/optimizer_steps",
    "train/rollouts",
    "rollout/generated_tokens",
    "loss/optimizer_steps",
)


#: the study config fields the report depends on (not where it runs or how it was invoked)
CONFIG_KEYS = (
    "name",
    "arms",
    "baseline",
    "seeds",
    "baseline_seeds",
    "overrides",
    "eval",
    "bootstrap",
    "min_effect",
    "learning_bar",
    "screen",
    "inert_arms",
    "only_arms",
    "parts",
    "publish",
)


#: versions.json fields kept per run
VERSION_KEYS = ("git_commit", "precision", "precision_reason", "cpu", "platform", "packages")


def archive_study(root: Path, cfg: StudyConfig, states: Sequence[RunState]) -> Path:
    """Bring ``<root>/archive`` up to date with the study directory; returns the archive."""
    arc = root / ARCHIVE
    arc.mkdir(parents=True, exist_ok=True)
    _write_json(
        arc / "study_config.json", study_settings(cfg), sort_keys=False
    )  # arm order is the report's
    sources: list[tuple[str | None, int | None, Path]] = [
        (None, None, arc / "eval" / "start.jsonl.gz")
    ]
    sources += [
        (arm, seed, arc / "eval" / arm / f"seed{seed}.jsonl.gz")
        for arm in cfg.arms
        for seed in arm_seeds(cfg, arm)  # a replicated baseline's further seeds too
    ]
    for arm, seed, target in sources:
        src = eval_dir(root, arm, seed)
        if (src / RECORDS).is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((src / RECORDS).read_bytes())
        elif (src / "samples.jsonl").is_file():  # an evaluation from before records existed
            write_records(target, load_samples(src))
    for s in states:
        run = root / "runs" / s.arm / f"seed{s.seed}"
        target = arc / TRAINING / s.arm / f"seed{s.seed}.json"
        if not run.is_dir() and target.is_file():
            continue  # archived elsewhere; the run directory is not here
        _write_json(target, _run_record(run, s, eval_dir(root, s.arm, s.seed)))
    for name in (TEST_COUNTS, BASIS):
        if (root / name).is_file():
            (arc / name).write_text((root / name).read_text())
    return arc


def study_settings(cfg: StudyConfig) -> dict[str, JSON]:
    """The study config's fields the report depends on (:data:`CONFIG_KEYS`), as plain data."""
    plain = cast(dict[str, JSON], _as_plain(cfg))  # a dataclass: an object
    out = {k: v for k, v in plain.items() if k in CONFIG_KEYS}
    # unset: as settings recorded before the field say
    for key in ("only_arms", "parts", "baseline_seeds", "inert_arms"):
        if not out.get(key):
            out.pop(key, None)
    bar = out.get("learning_bar")
    if not isinstance(bar, dict) or not bar.get("arm"):  # no bar: as recorded before it existed
        out.pop("learning_bar", None)
    return out


def archived_config(saved: dict[str, JSON], cfg: StudyConfig) -> StudyConfig:
    """``cfg`` (a :class:`~framework.study.schema.StudyConfig`) with the settings an archive was
    made with (arms, seeds, baseline, evaluation, analysis); settings the archive predates keep
    ``cfg``'s values, and so does ``publish`` (where a screen's page goes is the command's choice:
    a copy of a published archive reported elsewhere must not overwrite the committed page)."""
    fields = {k: v for k, v in saved.items() if k not in ("eval", "publish", "learning_bar")}
    evaluation = cast(dict[str, JSON], saved.get("eval", {}))  # study_settings wrote an object
    bar = saved.get("learning_bar")
    if isinstance(bar, dict):
        fields["learning_bar"] = LearningBarConfig(**bar)  # type: ignore[assignment,arg-type]
    return replace(cfg, **fields, eval=replace(cfg.eval, **evaluation))  # type: ignore[arg-type]


def _as_plain(node: object) -> JSON:
    """A dataclass or namespace config as plain dicts and lists (for JSON)."""
    if is_dataclass(node) and not isinstance(node, type):
        return cast(dict[str, JSON], asdict(node))
    if hasattr(node, "__dict__"):
        return {k: _as_plain(v) for k, v in vars(node).items()}
    if isinstance(node, dict):
        return {k: _as_plain(v) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [_as_plain(v) for v in node]
    return cast(JSON, node)  # a str, number, bool or None


def _run_record(run: Path, state: RunState, evals: Path | None = None) -> RunRecord:
    scalars = read_scalars(run) if (run / "tensorboard").is_dir() else {}
    steps = scalars.get("timing/step", [])
    versions = read_json_object(run / "versions.json") or {}
    summary = cast(_TrainSummary, read_json_object(run / "summary.json") or {})
    peaks = [float(s["peak_gb"]) for s in summary.get("stages", []) if "peak_gb" in s]
    earlier = summary.get("earlier_launches_peak_gb")  # resumed: the killed launches' peak
    if earlier is not None:
        peaks.append(float(earlier))
    # when it trained and was evaluated, on what commit and tree, from which questions and
    # pre-registration; a run the study did not record (made before these records) has none
    provenance = run_provenance(run, evals) if evals is not None else None
    alarms = sorted(
        tag.split("/")[1]
        for tag, values in scalars.items()
        if tag.startswith("health/") and tag.endswith("/alarm") and any(v > 0 for _, v in values)
    )
    record: RunRecord = {
        "arm": state.arm,
        "seed": state.seed,
        "status": state.status,
        "seconds": round(float(state.seconds), 1),
        "train_seconds": round(sum(v for _, v in steps), 1) if steps else None,
        "eval_seconds": _eval_seconds(evals),
        "steps": len(steps),
        "peak_gb": max(peaks) if peaks else None,
        "earlier_launches_peak_gb": earlier,
        "alarms": alarms,
        "stopped_by": summary.get("stopped_by"),
        "wrong_entity_rates": run_histogram(run),
        "methods": run_methods(run),
        "versions": {k: versions[k] for k in VERSION_KEYS if k in versions},
        # the resolved config it trained with: a run restored from the archive is checked against
        # its arm's config as a run directory's config.yaml is
        "config": saved_config(run),
        "curves": {
            t: [[int(x), float(y)] for x, y in scalars[t]] for t in CURVE_TAGS if t in scalars
        },
    }
    # per step, what it spent (COMPUTE_TAGS); runs logged before the figures have none
    if found := [t for t in COMPUTE_TAGS if t in scalars]:
        record["compute"] = {t: [[int(x), float(y)] for x, y in scalars[t]] for t in found}
    if provenance is not None:
        record["provenance"] = provenance
    return record


def _eval_seconds(evals: Path | None) -> float | None:
    """How long the run's evaluation took (its ``results.json``; the last launch's time where an
    interrupted evaluation was finished from its journal); None before it finished."""
    result = read_json_object(evals / "results.json") if evals is not None else None
    seconds = (result or {}).get("seconds")
    return float(seconds) if isinstance(seconds, int | float) else None


class _Stage(TypedDict, total=False):
    peak_gb: float


class _TrainSummary(TypedDict, total=False):
    """The fields of a run's ``summary.json`` (:func:`framework.rl.summary.run_summary`) its
    record keeps."""

    stages: list[_Stage]
    earlier_launches_peak_gb: float | None
    stopped_by: dict[str, JSON] | None


#: the config sections whose components may name a paper (a run's methods)
METHOD_SECTIONS = ("reward", "advantage", "loss", "sampler", "augment")


def run_methods(run: Path) -> list[Method]:
    """The components of a run that come from a paper (:data:`METHOD_SECTIONS`): section, name,
    paper and how closely the component follows it (``fidelity``), as registered now; empty when
    the run's config cannot be read."""
    from framework.registry import load_components
    from framework.registry.kinds import ALL

    saved = saved_config(run) or {}
    load_components()
    out: list[Method] = []
    for section in METHOD_SECTIONS:
        part = saved.get(section)
        name = part.get("name") if isinstance(part, dict) else None
        if not name or name not in ALL[section]:
            continue
        cls = ALL[section].get(name).config_cls
        if getattr(cls, "paper", ""):
            out.append(
                {
                    "section": section,
                    "name": name,
                    "paper": cls.paper,
                    "fidelity": getattr(cls, "fidelity", "") or "exact",
                }
            )
    return out


def _write_json(path: Path, data: Mapping[str, object], sort_keys: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=sort_keys, default=str) + "\n")


class StudyArchive:
    """Read access to one study's archive directory."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def exists(self) -> bool:
        return (self.path / "study_config.json").is_file()

    def config(self) -> dict[str, JSON]:
        """The study's settings (:func:`study_settings`) as archived."""
        config: dict[str, JSON] = json.loads((self.path / "study_config.json").read_text())
        return config

    def _eval_file(self, arm: str | None, seed: int | None) -> Path:
        if arm is None:
            return self.path / "eval" / "start.jsonl.gz"
        return self.path / "eval" / arm / f"seed{seed}.jsonl.gz"

    def has_eval(self, arm: str | None, seed: int | None = None) -> bool:
        return self._eval_file(arm, seed).is_file()

    def records(self, arm: str | None, seed: int | None = None) -> list[EvalRecord]:
        """The records of the warm start (``arm`` None) or of one run's evaluation."""
        return load_records(self._eval_file(arm, seed))

    def run(self, arm: str, seed: int) -> RunRecord | None:
        """The archived record of one run (:func:`archive_study`); None when there is none."""
        return cast(
            "RunRecord | None", read_json_object(self.path / TRAINING / arm / f"seed{seed}.json")
        )

    def runs(self, arms: Sequence[str]) -> list[tuple[str, int]]:
        """The archived runs of ``arms``, arm by arm in that order, seeds ascending."""
        out = []
        for arm in arms:
            files = (self.path / TRAINING / arm).glob("seed*.json")
            seeds = sorted(int(f.stem[4:]) for f in files if f.stem[4:].isdigit())
            out += [(arm, s) for s in seeds]
        return out

    def curves(self, arm: str, seed: int) -> dict[str, Series]:
        run = self.run(arm, seed) or {}
        return {t: [(int(x), float(y)) for x, y in v] for t, v in run.get("curves", {}).items()}

    def test_evaluations(self) -> dict[str, int]:
        """How many times each policy was evaluated on the test split."""
        return cast(dict[str, int], read_json_object(self.path / TEST_COUNTS) or {})


def kept_jobs(kept: Path | None, jobs: Sequence[tuple[str, int]]) -> set[tuple[str, int]]:
    """The (arm, seed) jobs the kept archive (``archive_to``) holds finished and evaluated."""
    archive = StudyArchive(kept) if kept is not None else None
    if archive is None or not archive.exists():
        return set()
    return {
        (arm, seed)
        for arm, seed in jobs
        if archive.has_eval(arm, seed) and (archive.run(arm, seed) or {}).get("status") == "done"
    }


#: the records :func:`restore_kept` brought back, by ``(arm, seed)`` (None: the warm start's
#: evaluation)
Restored = dict[tuple[str, int] | None, RunRecord]


def restore_kept(kept: Path, root: Path, jobs: Sequence[tuple[str, int]]) -> Restored:
    """Bring into ``<root>/archive`` what the kept archive (``archive_to``) holds and ``root`` does
    not: the warm start's evaluation and each finished, evaluated (arm, seed). Those are not made
    again. Returns their training records, keyed by ``(arm, seed)`` (``None`` for the warm start's
    evaluation, with an empty record)."""
    archive = StudyArchive(kept)
    if not archive.exists():
        return {}
    local = root / ARCHIVE
    restored: Restored = {}

    def copy(rel: Path) -> None:
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(kept / rel, local / rel)

    if not (eval_dir(root, None) / "results.json").is_file() and archive.has_eval(None):
        copy(Path("eval") / "start.jsonl.gz")
        restored[None] = {}
    for arm, seed in sorted(kept_jobs(kept, jobs)):
        here = (
            train_finished(run_dir_of(root, arm, seed))
            or (eval_dir(root, arm, seed) / "results.json").is_file()
        )
        if here:  # made on this machine: its own records (archive_study) stand
            continue
        copy(Path("eval") / arm / f"seed{seed}.jsonl.gz")
        copy(Path("training") / arm / f"seed{seed}.json")
        restored[(arm, seed)] = archive.run(arm, seed) or {}
    return restored


def keep_archive(root: Path, cfg: StudyConfig, states: Sequence[RunState]) -> None:
    """Bring ``<root>/archive`` up to date with the runs of ``states`` (the one just evaluated:
    the records of earlier runs are already there) and copy it to ``archive_to`` (new and changed
    files; nothing there is deleted): commit that folder and the study survives its machine."""
    if not cfg.archive_to:
        return
    archive_study(root, cfg, states)
    src, dst = root / ARCHIVE, Path(cfg.archive_to)
    if src.resolve() == dst.resolve():
        return
    for f in sorted(p for p in src.rglob("*") if p.is_file()):
        target = dst / f.relative_to(src)
        if target.is_file() and target.read_bytes() == f.read_bytes():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        shutil.copyfile(f, tmp)
        os.replace(tmp, target)
