"""The study's runner (:func:`study`): the arms, the checks, the warm start and its evaluation,
then every (arm, seed) trained and evaluated in turn with its progress and pace, then the report.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from framework.study.archive import (
    Restored,
    StudyArchive,
    archived_config,
    keep_archive,
    kept_jobs,
    restore_kept,
)
from framework.study.arms import screen_arms, selected_arms, study_jobs, with_inert_arms
from framework.study.basis import (
    check_basis,
    check_record_folders,
    check_runs_match_arms,
    config_drift,
    content_basis,
    study_basis,
)
from framework.study.checks import (
    check_integrity,
    check_preregistration,
    launch_context,
    left_to_make,
)
from framework.study.integrity import TreeState
from framework.study.layout import ARCHIVE, run_dir_of
from framework.study.report import write_report, write_study, write_subset_report
from framework.study.runs import (
    INTERRUPTED,
    STUDY_TRAIN_ARGS,
    RunState,
    check_evals_match,
    evaluate_once,
    in_child,
    needs_sft,
    prune_checkpoints,
    run_train,
    state_on_disk,
    train_finished,
    warm_start_child,
)
from framework.study.schema import StudyConfig
from framework.study.summary import StudySummary


def study(cfg: StudyConfig) -> Mapping[str, object]:
    """The study app's entry point (``seekrl-study``): the study's arms and (arm, seed) jobs, the
    checks before anything is built, the warm start and its evaluation, every job trained (or
    resumed, or skipped) and evaluated, then the report; returns the report's figures (``{}``
    for a dry run). ``report_only`` reports what is there and trains nothing."""
    root = cfg.directory()
    cfg = study_arms(cfg, root)
    jobs = study_jobs(cfg)  # seed by seed; a replicated baseline's seeds first
    kept = Path(cfg.archive_to) if cfg.archive_to else None
    kept_runs = kept_jobs(kept, jobs)
    print_plan(cfg, root, jobs, kept, kept_runs)
    if cfg.report_only:
        return report_so_far(cfg, root, jobs)
    # a publishable study goes on only from a committed tree, on its table's commit: refused here,
    # before anything is built or trained (and in a dry run), unless allow_dirty=true
    tree = check_integrity(cfg, root, kept, jobs, kept_runs)
    # 1. the warm start every arm and seed shares (cached SFT), and its evaluation
    first = checked_first_config(cfg, root, kept)
    if first is None:  # a dry run: checked, nothing recorded
        return {}
    start = warm_start_and_evaluate(cfg, root, jobs, kept, tree, *first)
    # 2. every (arm, seed): train (or resume, or skip), then evaluate
    states = run_jobs(cfg, root, jobs, kept, kept_runs, start)
    # 3. the report
    result = write_study(root, cfg, states)
    print((root / "study.md").read_text())
    print(f"seekrl-study: written to {root}")
    return result


def study_arms(cfg: StudyConfig, root: Path) -> StudyConfig:
    """``cfg`` with the arms it trains: a screen's arm per registered method (found now), those
    ``only_arms`` keeps, and a screen's arms that the config shows to be the baseline's
    (``inert_arms``, not trained; a report from an archive alone has them from its config)."""
    if cfg.screen:  # an arm per registered method, found now (framework/study/screen.py)
        found = screen_arms(cfg.baseline, overrides=cfg.overrides, matched=cfg.matched_baselines)
        cfg = replace(cfg, arms={**found, **cfg.arms})
    if cfg.only_arms:
        cfg = replace(cfg, arms=selected_arms(cfg))
    if cfg.screen and not (cfg.report_only and not _evaluated_here(root)):
        cfg = with_inert_arms(cfg)
    return cfg


def print_plan(
    cfg: StudyConfig,
    root: Path,
    jobs: list[tuple[str, int]],
    kept: Path | None,
    kept_runs: set[tuple[str, int]],
) -> None:
    """Say what the study holds: every (arm, seed) finished, archived (in ``kept``) or to run."""
    print(
        f"seekrl-study: {cfg.name}: {len(cfg.arms)} arm(s) x {len(cfg.seeds)} seed(s) in {root}",
        flush=True,
    )
    tally = dict.fromkeys(("finished", "archived", "to run"), 0)
    for arm, seed in jobs:
        if train_finished(run_dir_of(root, arm, seed)):
            kind = "finished"
        else:
            kind = "archived" if (arm, seed) in kept_runs else "to run"
        tally[kind] += 1
        state = f"archived in {kept}" if kind == "archived" else kind
        print(f"  {arm:<16} seed {seed}: {state}  (seekrl-train {' '.join(cfg.arms[arm])})")
    print(
        f"seekrl-study: of {len(jobs)} run(s), "
        + ", ".join(f"{n} {state}" for state, n in tally.items() if n),
        flush=True,
    )


def checked_first_config(
    cfg: StudyConfig, root: Path, kept: Path | None
) -> tuple[Any, dict[str, Any], Any] | None:
    """The first arm's train config (the warm start every run shares), its basis and this
    machine's precision choice, after the config-level checks a long SFT must not come before:
    the basis, the record folders, the finished evaluations' settings, the pre-registration.
    Records the study's config and basis unless a dry run, which ends here (None)."""
    from framework.cli.app import load_config

    first = [
        *cfg.overrides,
        *cfg.arms[next(iter(cfg.arms))],
        *STUDY_TRAIN_ARGS,
        f"run_dir={root / 'start'}",
    ]
    first_cfg = load_config("train", first)
    basis = study_basis(first_cfg)
    if not cfg.dry_run:
        root.mkdir(parents=True, exist_ok=True)
        (root / "study_config.json").write_text(json.dumps(asdict(cfg), indent=2) + "\n")
    # before a long SFT, and in a dry run (which records nothing): the config-level checks
    check_basis(root, basis, record=not cfg.dry_run)
    here = first_cfg.trainer.precision_choice()  # what explains a refusal caused by the machine
    check_record_folders(cfg, kept, basis, here)
    check_evals_match(root, cfg)
    check_preregistration(root, cfg, record=not cfg.dry_run)
    if cfg.dry_run:
        print(
            "seekrl-study: dry run: out_dir, archive_to and publish agree with these settings on "
            "this machine (the questions' and warm start's contents are checked once they are "
            "built); drop dry_run=true to run.",
            flush=True,
        )
        return None
    return first_cfg, basis, here


@dataclass
class StudyStart:
    """What this invocation's runs go on from (:func:`warm_start_and_evaluate`)."""

    train_cfg: Any  #: the first arm's train config, its warm start in place (every run's rollout)
    tree: TreeState  #: the checkout the study was checked on
    context: dict[str, object]  #: what every run's provenance record carries besides its launch
    restored: Restored  #: the records brought back from the kept archive, by (arm, seed)


def warm_start_and_evaluate(
    cfg: StudyConfig,
    root: Path,
    jobs: list[tuple[str, int]],
    kept: Path | None,
    tree: TreeState,
    first_cfg: Any,
    basis: dict[str, Any],
    here: Any,
) -> StudyStart:
    """The cold-start SFT (in a child, cached for every run) and the warm start in place, the
    checks of what the questions and weights hold, what the kept archive restores, and the warm
    start's evaluation (unless restored)."""
    from framework.sft.warm_start import warm_start

    if needs_sft(first_cfg):
        in_child(warm_start_child, first_cfg)  # the cold-start SFT, cached for every run
    train_cfg = warm_start(first_cfg)  # now only reads the cached policy's folder
    content = content_basis(train_cfg, cfg.eval.split)
    check_basis(root, content)
    data_key = {"data": basis["data"], "questions_sha256": content["questions_sha256"]}
    context = launch_context(cfg, root, tree, data_key)  # in every run's provenance record
    restored: Restored = {}
    check_record_folders(cfg, kept, {**basis, **content}, here)
    if kept is not None:
        restored = restore_kept(kept, root, jobs)
        if restored:
            print(
                f"seekrl-study: {len(restored)} evaluation(s) restored from {kept}, not made again",
                flush=True,
            )
    start_ckpt = train_cfg.rollout.policy.checkpoint_dir()
    if None not in restored:
        evaluate_once(train_cfg, cfg, start_ckpt, root / "eval" / "start", start=True)
    keep_archive(root, cfg, [])
    return StudyStart(train_cfg, tree, context, restored)


def run_jobs(
    cfg: StudyConfig,
    root: Path,
    jobs: list[tuple[str, int]],
    kept: Path | None,
    kept_runs: set[tuple[str, int]],
    start: StudyStart,
) -> list[RunState]:
    """Every (arm, seed) in turn: restored, or trained (or resumed, or skipped) and evaluated,
    its status and archive kept up to date and its progress said; first, every run already there
    (or archived) must have been made with its arm's config as it is now.

    Raises:
        SystemExit: ``INTERRUPTED`` when a run was interrupted (the same command resumes).
    """
    restored = start.restored
    arm_cfgs = {job: _arm_config(cfg, root, *job) for job in jobs}
    check_runs_match_arms(
        root,
        {
            job: config_drift(
                restored[job].get("config") if job in restored else run_dir_of(root, *job), c
            )
            for job, c in arm_cfgs.items()
            if c is not None
        },
    )
    states: list[RunState] = []
    pace = StudyPace(total=len(jobs))
    tree = start.tree
    for arm, seed in jobs:
        pace.start()
        if (arm, seed) in restored:
            states.append(RunState(arm, seed, "done", float(restored[(arm, seed)]["seconds"])))
            _write_status(root, states, jobs)
            pace.finish(f"{arm} seed {seed}", "done")
            continue
        if left_to_make(root, [(arm, seed)], kept_runs):  # made now: on the tree checked first
            tree = check_integrity(cfg, root, kept, jobs, kept_runs, quiet=True)
        try:
            st = run_train(cfg, arm, seed, root, tree.record(), start.context)
        except KeyboardInterrupt:
            st = RunState(arm, seed, "interrupted")
        states.append(st)
        _write_status(root, states, jobs)
        if st.status == "interrupted":
            print(f"seekrl-study: interrupted; the same command resumes ({root})")
            raise SystemExit(INTERRUPTED)
        if st.status == "done":
            evaluate_run(cfg, root, arm, seed, arm_cfgs[(arm, seed)], start.train_cfg)
        keep_archive(root, cfg, [st])  # its record only: each run is read once, not once per run
        line = pace.finish(f"{arm} seed {seed}", st.status, earlier=st.earlier)
        if line:
            print(line, flush=True)
    return states


def evaluate_run(
    cfg: StudyConfig, root: Path, arm: str, seed: int, arm_cfg: Any, train_cfg: Any
) -> None:
    """Evaluate the finished run of (arm, seed) with the warm start's rollout settings (the same
    base and tokenizer), then delete its checkpoints when ``prune_checkpoints``. ``arm_cfg`` None:
    its config did not load before it trained; it trained, so it loads now (or says why)."""
    run = run_dir_of(root, arm, seed)
    if arm_cfg is None:  # it trained, so it loads now: let a late error say why
        arm_cfg = _arm_config(cfg, root, arm, seed, strict=True)
    arm_cfg = replace(arm_cfg, rollout=train_cfg.rollout)  # the same base and tokenizer
    evaluate_once(arm_cfg, cfg, run, root / "eval" / arm / f"seed{seed}")
    if cfg.prune_checkpoints and (freed := prune_checkpoints(root, arm, seed)):
        print(f"seekrl-study: deleted {arm} seed {seed}'s checkpoints ({freed / 1e9:.1f} GB)")


@dataclass
class StudyPace:
    """The study's progress over its (arm, seed) runs: after each, a line with how many are through
    and, from the runs this invocation trained or evaluated, about how long the rest will take.
    Runs finished by an earlier invocation take no time here and do not set the pace; nor does a
    run an earlier invocation had begun (resumed from a checkpoint, or trained and only evaluated
    now), whose time here is only its remainder: the first run of a restarted study made the rest
    look twice as quick, and an evaluation alone five times as quick."""

    total: int
    through: int = 0
    worked: float = 0.0  # seconds of the runs that did work now
    runs_worked: int = 0
    _mark: float = 0.0
    clock: Callable[[], float] = time.perf_counter

    def start(self) -> None:
        self._mark = self.clock()

    def finish(
        self, what: str, status: str, *, earlier: str = "", idle_below: float = 5.0
    ) -> str | None:
        """Count one run; the progress line, or None for a run that was already finished.
        ``earlier``: what an earlier invocation had done of it (:attr:`RunState.earlier`), so
        that its time here is not a run's."""
        seconds = self.clock() - self._mark
        self.through += 1
        if seconds < idle_below and status == "done":  # finished before: skipped, nothing to say
            return None
        if not earlier:
            self.worked += seconds
            self.runs_worked += 1
        left = self.total - self.through
        eta = ""
        if left and self.runs_worked:
            eta = f"; about {_hours(left * self.worked / self.runs_worked)} left at this pace"
        elif left:
            eta = "; the pace comes with the first run trained from its start"
        how = f" ({earlier})" if earlier else ""
        return (
            f"seekrl-study: [{self.through}/{self.total}] {what} {status}{how} in "
            f"{_hours(seconds)}{eta}"
        )


def _hours(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def report_so_far(cfg: StudyConfig, root: Path, jobs: list[tuple[str, int]]) -> StudySummary:
    """``report_only=true``: the report of the evaluations already in ``root`` (a long study
    looked at between sessions, or a published study's committed archive); it trains and
    evaluates nothing and says what is missing.

    A directory with evaluations is archived first; one with only ``archive/`` (a committed copy)
    is reported from it as archived, with the study config saved there, so the published tables
    regenerate exactly whatever the presets say now.
    """
    archive = StudyArchive(root / ARCHIVE)
    evaluated = any((root / "eval").glob("*/seed*/samples.jsonl"))
    if evaluated or (root / "eval" / "start" / "samples.jsonl").is_file():
        result = write_study(root, cfg, [state_on_disk(root, *job) for job in jobs])
    elif archive.exists():
        cfg = archived_config(archive.config(), cfg)
        print(f"seekrl-study: reporting from the archive {archive.path} (its study config)")
        result = write_report(root, cfg)
    else:
        print(
            f"[report_only] got no evaluated run in {root}; expected a study directory with "
            "eval/start or eval/<arm>/seed<S>/samples.jsonl, or a study's archive/. Fix: run the "
            "study first "
            "(without report_only=true), or pass its out_dir=...",
            file=sys.stderr,
        )
        raise SystemExit(2)
    if cfg.only_seeds:
        try:
            write_subset_report(root, cfg, cfg.only_seeds)
        except ValueError as err:
            print(err, file=sys.stderr)
            raise SystemExit(2) from None
    print((root / "study.md").read_text())
    print(f"seekrl-study: the report so far, written to {root}")
    return result


def _arm_config(cfg: StudyConfig, root: Path, arm: str, seed: int, strict: bool = False) -> Any:
    """The train config of one (arm, seed); ``None`` for one that does not load (unless
    ``strict``): its child process fails with the config error and the study reports it."""
    from framework.cli.app import load_config

    run = run_dir_of(root, arm, seed)
    args = [*cfg.overrides, *cfg.arms[arm], *STUDY_TRAIN_ARGS, f"seed={seed}", f"run_dir={run}"]
    try:
        return load_config("train", args)
    except (Exception, SystemExit):
        if strict:
            raise
        return None


def _evaluated_here(root: Path) -> bool:
    """Whether the study directory holds an evaluation of its own (not only an archive)."""
    return (
        any((root / "eval").glob("*/seed*/samples.jsonl"))
        or (root / "eval" / "start" / "samples.jsonl").is_file()
    )


def _write_status(root: Path, states: list[RunState], jobs: list[tuple[str, int]]) -> None:
    seen = {(s.arm, s.seed): s for s in states}
    rows = []
    for arm, seed in jobs:
        s = seen.get((arm, seed), RunState(arm, seed, "pending"))
        rows.append(
            {
                "arm": arm,
                "seed": seed,
                "status": s.status,
                "seconds": round(s.seconds, 1),
                "error": s.error,
            }
        )
    (root / "status.json").write_text(json.dumps(rows, indent=2) + "\n")
