"""``seekrl-study``: arms x seeds from one warm start, each evaluated on held-out questions, compared.

seekrl-study                                 # E-GRPO vs GRPO, seeds 0 1 2 (study=egrpo_vs_grpo)
seekrl-study study=learn_cpu                 # the learning benchmark: one GRPO run vs its start
seekrl-study study=alpha_cpu                 # alpha 0, 0.1, 0.3, 0.5 (the paper's Figure 4)
seekrl-study seeds=[0] eval.questions=50     # smaller
seekrl-study report_only=true                # the report so far, marked partial; trains nothing

Everything goes into one fixed directory, ``runs/study/<name>`` (``out_dir``), so the same command
resumes: finished runs and evaluations are skipped, an interrupted run resumes from its newest
checkpoint, and a run that crashes is reported in the study (``status.json``, the table) and does
not stop the others. Each train run is a child process (``python -m framework.cli.train``) with
its log in ``<run>/train.log``. Ctrl-C stops the study after the running child has checkpointed.

The study writes ``study.md`` (tables, the paired differences, the entity analysis, curves),
``study.json``, ``curves/*.png`` and ``runs/<arm>/seed<S>/`` (config, versions, git commit,
TensorBoard) beside ``eval/<arm>/seed<S>/`` (the evaluation reports) and ``eval/start/``.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework.cli.app import run_app
from framework.config.inert import config_leaves
from framework.config.study import StudyConfig
from framework.eval import study_integrity
from framework.eval.study_archive import BASIS, archived_config
from framework.eval.study_integrity import (
    PROVENANCE,
    SHOWN,
    file_record,
    is_ancestor,
    publishable,
    record_commits,
    record_evaluated,
    record_launch,
    record_trained,
    same_commit,
    short,
    study_folders,
    tree_state,
)

if TYPE_CHECKING:
    from framework.eval.study_archive import StudyArchive
    from framework.training.precision import PrecisionChoice

#: exit status of a train run stopped by SIGINT / SIGTERM after its checkpoint (see cli/train.py)
INTERRUPTED = 130
#: in a run directory: the exit status and log tail of a run that crashed (it marks the run failed)
STUDY_ERROR = "study_error.txt"


# -- one run ----------------------------------------------------------------------------------------
@dataclass
class RunState:
    arm: str
    seed: int
    status: str  # done | failed | interrupted | unfinished (checkpoints on disk) | pending
    seconds: float = 0.0
    error: str = ""
    #: what an earlier invocation had done of this run, when this one did not train it from its
    #: start ('': nothing): its time here is then not a run's, and must not set the study's pace
    earlier: str = ""


#: RunState.earlier of a run this invocation went on with from an earlier one's checkpoint
RESUMED = "resumed from a checkpoint"
#: RunState.earlier of a run an earlier invocation trained to its end (cut off while evaluating)
TRAINED_BEFORE = "trained before; evaluated now"


def run_dir_of(root: Path, arm: str, seed: int) -> Path:
    return root / "runs" / arm / f"seed{seed}"


def train_finished(run: Path) -> bool:
    """A run is finished when its summary says so and its policy was exported."""
    summary = run / "summary.json"
    if not summary.is_file() or not (run / "policy" / "config.json").is_file():
        return False
    try:
        return not json.loads(summary.read_text()).get("interrupted", False)
    except json.JSONDecodeError:
        return False


#: seekrl-train overrides of every study run: the study evaluates each final policy itself
STUDY_TRAIN_ARGS = ("final_eval.enabled=false",)


def train_command(cfg: StudyConfig, arm: str, seed: int, run: Path) -> list[str]:
    args = [*cfg.overrides, *cfg.arms[arm], *STUDY_TRAIN_ARGS, f"seed={seed}", f"run_dir={run}"]
    args.append(f"hydra.run.dir={run}/.hydra_run")
    if (run / "checkpoints").is_dir() and any((run / "checkpoints").glob("step-*.ckpt")):
        args.append(f"resume={run}")
    return [sys.executable, "-m", "framework.cli.train", *args]


def state_on_disk(root: Path, arm: str, seed: int) -> RunState:
    """What the run directory says of one (arm, seed), without running anything."""
    run = run_dir_of(root, arm, seed)
    if train_finished(run):
        return RunState(
            arm, seed, "done", json.loads((run / "summary.json").read_text())["seconds"]
        )
    if (run / STUDY_ERROR).is_file():
        return RunState(arm, seed, "failed", error=(run / STUDY_ERROR).read_text()[-2000:])
    if any((run / "checkpoints").glob("step-*.ckpt")):  # interrupted, or training right now
        return RunState(arm, seed, "unfinished")
    return RunState(arm, seed, "pending")


def run_train(
    cfg: StudyConfig,
    arm: str,
    seed: int,
    root: Path,
    launch: Mapping[str, Any] | None = None,
    context: Mapping[str, Any] | None = None,
) -> RunState:
    """Train one (arm, seed) in a child process unless it is finished; never raises for a crash.

    ``launch`` (the tree it is launched on, :meth:`~framework.eval.study_integrity.TreeState.record`)
    and ``context`` (what the study stands on) go to the run's provenance record with the times
    it starts and finishes training (:mod:`framework.eval.study_integrity`); None records none."""
    known = state_on_disk(root, arm, seed)  # done: finished by an earlier invocation, its time
    if known.status == "done":
        return replace(known, earlier=TRAINED_BEFORE)
    if known.status == "failed" and not cfg.retry_failed:
        return known
    run = run_dir_of(root, arm, seed)
    failed = run / STUDY_ERROR
    run.mkdir(parents=True, exist_ok=True)
    failed.unlink(missing_ok=True)
    cmd = train_command(cfg, arm, seed, run)
    earlier = RESUMED if any(a.startswith("resume=") for a in cmd) else ""
    if launch is not None:
        record_launch(run, launch, context or {}, resumed=bool(earlier))
    print(
        f"seekrl-study: {'resuming' if earlier else 'training'} {arm} seed {seed} "
        f"(log: {run / 'train.log'})",
        flush=True,
    )
    clock = time.perf_counter()
    with (run / "train.log").open("a") as log:
        log.write(f"\n$ {' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=_child_env())
        wait_forwarding_sigterm(proc.send_signal, proc.wait)
        code = proc.returncode
    seconds = time.perf_counter() - clock
    if code == INTERRUPTED or code == -signal.SIGINT:
        return RunState(arm, seed, "interrupted", seconds, earlier=earlier)
    if code != 0 or not train_finished(run):
        tail = _tail(run / "train.log", 40)
        failed.write_text(f"exit status {code}\n{tail}")
        print(f"seekrl-study: {arm} seed {seed} FAILED (exit {code}); see {failed}", flush=True)
        return RunState(arm, seed, "failed", seconds, error=tail[-2000:], earlier=earlier)
    if launch is not None:
        record_trained(run)
    # its time as its summary gives it, as on a later start
    return replace(state_on_disk(root, arm, seed), earlier=earlier)


def wait_forwarding_sigterm(send: Callable[[int], Any], wait: Callable[[], Any]) -> None:
    """``wait()`` for a child while SIGTERM to the study goes on to it (``send(signum)``): the
    child checkpoints and exits with ``INTERRUPTED``. A Ctrl-C reaches the child too (same process
    group), so the study waits on for it to finish its checkpoint."""
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: send(signum))
    try:
        wait()
    except KeyboardInterrupt:  # the child got the same SIGINT: let it checkpoint
        wait()
    finally:
        signal.signal(signal.SIGTERM, previous)


def _child_env() -> dict[str, str]:
    """A train child's environment: the study's, unbuffered, and the study's process id, so that
    the child stops (checkpointed) when the study ends, even by SIGKILL (``stop_with_parent``)."""
    from framework.interrupt import STOP_WITH_ENV

    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env[STOP_WITH_ENV] = str(os.getpid())
    return env


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# -- evaluation -------------------------------------------------------------------------------------
def eval_settings(cfg: StudyConfig, start: bool) -> dict[str, Any]:
    """The eval settings of one of the study's evaluations: the warm start's has its own k."""
    settings = asdict(cfg.eval)
    settings.pop("start_samples_per_question", None)
    if start:
        settings["samples_per_question"] = cfg.start_samples()
    return settings


def eval_config(
    train_cfg: Any, cfg: StudyConfig, checkpoint: Path | None, out: Path, start: bool = False
) -> Any:
    """The eval app's config for ``checkpoint``: the train run's dataset, retriever, rollout
    settings and agent budgets, the study's questions, k and seed, the rule judge; ``start``: the
    warm start's evaluation, with its own number of samples."""
    from framework.eval.config import eval_config_for

    return eval_config_for(train_cfg, checkpoint, out, eval_settings(cfg, start))


def evaluate_once(
    train_cfg: Any, cfg: StudyConfig, checkpoint: Path | None, out: Path, start: bool = False
) -> dict:
    """The evaluation in ``out`` (made now, in a child process, unless ``results.json`` is there);
    ``checkpoint`` None evaluates ``train_cfg.rollout.policy`` itself; ``start``: it is the warm
    start's. A finished evaluation on the test split is counted (:func:`count_test_evaluation`)."""
    done = out / "results.json"
    if done.is_file() and (out / "samples.jsonl").is_file():
        return json.loads(done.read_text())
    what = checkpoint or f"the base policy ({train_cfg.rollout.policy.source})"
    print(f"seekrl-study: evaluating {what} -> {out}", flush=True)
    # an interrupted evaluation left its finished batches in partial/journal-*.jsonl: kept, so the
    # rerun rolls out only the rest
    partial = out.with_name(out.name + ".partial")
    in_child(_evaluate_child, eval_config(train_cfg, cfg, checkpoint, partial, start))
    (partial / EVAL_SETTINGS).write_text(json.dumps(eval_settings(cfg, start), indent=2) + "\n")
    record_evaluated(partial)  # when it finished (UTC), for the run's provenance
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    if cfg.eval.split == "test":
        evals = out.parent if start else out.parent.parent  # <root>/eval
        count_test_evaluation(evals.parent, out.relative_to(evals).as_posix())
    return json.loads(done.read_text())


def prune_checkpoints(root: Path, arm: str, seed: int) -> int:
    """Delete the training checkpoints of one (arm, seed) of the study in ``root`` once the run is
    finished (its policy exported) and evaluated (``eval/<arm>/seed<S>/results.json``); they are
    needed only to resume its training. Returns the bytes freed (0 when it is not both)."""
    run = run_dir_of(root, arm, seed)
    evaluated = (root / "eval" / arm / f"seed{seed}" / "results.json").is_file()
    if not (train_finished(run) and evaluated):
        return 0
    freed = 0
    for ckpt in sorted((run / "checkpoints").glob("*.ckpt")):
        freed += ckpt.stat().st_size
        ckpt.unlink()
    return freed


def count_test_evaluation(root: Path, policy: str) -> dict[str, int]:
    """Add one to ``policy``'s count of finished test-split evaluations in the study directory
    (``test_evaluations.json``, which the report prints); returns the counts."""
    from framework.eval.study_archive import TEST_COUNTS

    path = root / TEST_COUNTS
    counts = json.loads(path.read_text()) if path.is_file() else {}
    counts[policy] = counts.get(policy, 0) + 1
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(counts, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return counts


def _evaluate_child(eval_cfg: Any) -> None:
    from framework.cli.app import prepare
    from framework.eval.run import evaluate

    prepare()
    evaluate(eval_cfg)


def needs_sft(train_cfg: Any) -> bool:
    """True when the train config asks for a cold-start SFT that is not cached yet."""
    from framework.sft.warm_start import warm_start_sft

    ws = train_cfg.warm_start
    if ws.path is not None or not ws.sft:
        return False
    return not (warm_start_sft(train_cfg)[1] / "policy" / "config.json").is_file()


def _warm_start_child(train_cfg: Any) -> None:
    from framework.cli.app import prepare
    from framework.sft.warm_start import warm_start

    prepare()
    warm_start(train_cfg)


def _interruptible(parent: int, target: Any, *args: Any) -> None:
    """``target(*args)`` as :func:`in_child`'s child runs it: Ctrl-C or SIGTERM where no checkpoint
    callback handles them (the index or question build before an SFT, an evaluation) end the
    child with ``INTERRUPTED``, not with a traceback and status 1; what it finished is kept, and
    those stages go on from it. The study ``parent`` ending, even by SIGKILL, sends it SIGTERM."""
    from framework.interrupt import sigterm_as_interrupt, stop_with_parent

    stop_with_parent(parent)
    try:
        with sigterm_as_interrupt():
            target(*args)
    except KeyboardInterrupt:
        raise SystemExit(INTERRUPTED) from None


def in_child(target: Any, *args: Any) -> None:
    """``target(*args)`` in a spawned child process, so that the study process itself never holds
    a policy: the memory of an in-process SFT or evaluation (12.3 GB resident after the cold-start
    SFT and the warm start's evaluation, on 24 GB) stayed with the study while its train child
    needed 10.7 GB more, and the kernel's OOM killer ended the study (docs/study.md, item 20).

    SIGTERM to the study goes on to the child (which checkpoints, as the train children do).

    Raises:
        SystemExit: with the child's exit status when it did not end with 0 (``INTERRUPTED``
            after SIGINT / SIGTERM).
    """
    import multiprocessing

    proc = multiprocessing.get_context("spawn").Process(
        target=_interruptible, args=(os.getpid(), target, *args)
    )
    proc.start()
    pid = proc.pid
    assert pid is not None  # started
    wait_forwarding_sigterm(lambda signum: os.kill(pid, signum), proc.join)
    code = proc.exitcode
    if code in (-signal.SIGINT, -signal.SIGTERM, INTERRUPTED):
        # as after an interrupted train run: say so, and that nothing finished is lost
        print(
            f"seekrl-study: interrupted during {getattr(target, '__name__', target)}; the same "
            "command resumes (finished runs, evaluations and evaluation batches are kept)",
            flush=True,
        )
        raise SystemExit(INTERRUPTED)
    if code:
        raise SystemExit(code)


#: the study's eval settings a finished evaluation was made with (beside its results.json)
EVAL_SETTINGS = "study_eval.json"


def eval_settings_changed(out: Path, now: dict[str, Any]) -> list[str]:
    """How the study's eval settings ``now`` differ from those the finished evaluation in ``out``
    (a directory with ``results.json``) was made with; empty when they match.

    An evaluation from before the settings were recorded is checked on what its ``results.json``
    says: samples per question (``k``) and seed."""
    path = out / EVAL_SETTINGS
    if path.is_file():
        saved = json.loads(path.read_text())
    else:
        result = json.loads((out / "results.json").read_text())
        saved = {"samples_per_question": result.get("k"), "seed": result.get("seed")}
    return [
        f"[eval.{key}] got {now[key]!r}; expected {value!r}, what {out} was evaluated with"
        for key, value in saved.items()
        if key in now and now[key] != value
    ]


def check_evals_match(root: Path, cfg: StudyConfig) -> None:
    """Refuse to go on when a finished evaluation in ``root`` was made with other eval settings
    (questions, samples, seed, split, batch size): its rows would not pair with new ones.

    Raises:
        SystemExit: status 2, naming each changed setting of each evaluation.
    """
    changed = [
        line
        for done in sorted((root / "eval").glob("**/results.json"))
        if ".partial" not in done.parent.name
        for line in eval_settings_changed(
            done.parent, eval_settings(cfg, start=done.parent == root / "eval" / "start")
        )
    ]
    if changed:
        print(
            "\n".join(changed) + "\nFix: run the study with the eval settings it was made with, "
            "or pass a new out_dir=... (or delete an evaluation directory to evaluate that policy "
            "again with the new settings).",
            file=sys.stderr,
        )
        raise SystemExit(2)


# -- the protocol: the test split only for a study fixed in advance ---------------------------------
PREREGISTRATION = "preregistration.json"


def check_preregistration(root: Path, cfg: StudyConfig, record: bool = True) -> None:
    """A study on the test split must name its committed pre-registration, and is frozen: its
    first launch records the pre-registration, the git commit and the study's settings (not when
    ``record`` is False, as in a dry run), and a later launch with other settings is refused
    (choices are made on validation, before).

    Raises:
        SystemExit: status 2 when the pre-registration file is missing, or the settings changed.
    """
    if cfg.eval.split != "test":
        return
    from framework.eval.study_archive import study_settings
    from framework.lightning.run_info import git_commit

    doc = Path(cfg.preregistration.split("#", 1)[0])
    if not doc.is_file():
        print(
            f"[preregistration] got {cfg.preregistration!r}, which names no file here; expected "
            "the committed pre-registration of this study (docs/study.md#<section>). Fix: write "
            "and commit it first, then pass its path.",
            file=sys.stderr,
        )
        raise SystemExit(2)
    settings = study_settings(cfg)
    path = root / PREREGISTRATION
    if not path.is_file():
        if record:
            frozen = {
                "preregistration": cfg.preregistration,
                "git_commit": git_commit(),
                "settings": settings,
                # its file as it was: sha256, the commit that last changed it and when
                "file": file_record(doc),
            }
            path.write_text(json.dumps(frozen, indent=2, sort_keys=True) + "\n")
        return
    frozen = json.loads(path.read_text())["settings"]
    changed = [
        f"{k}: pre-registered {frozen.get(k)!r}, now {v!r}"
        for k, v in settings.items()
        if frozen.get(k) != v
    ]
    if changed:
        print(
            f"[study] got settings that differ from those {root} was pre-registered with:\n  "
            + "\n  ".join(changed)
            + "\nexpected the frozen settings of a test-split study. Fix: run it as "
            "pre-registered; a changed design is a new study (new pre-registration, new out_dir).",
            file=sys.stderr,
        )
        raise SystemExit(2)


# -- integrity: a publishable study's table is made on one commit, from a committed tree -----------
def left_to_make(
    root: Path, jobs: Sequence[tuple[str, int]], kept_runs: set[tuple[str, int]]
) -> list[tuple[str, int]]:
    """The (arm, seed) jobs not yet trained and evaluated, here or in the kept archive."""
    return [
        (arm, seed)
        for arm, seed in jobs
        if (arm, seed) not in kept_runs
        and not (
            train_finished(run_dir_of(root, arm, seed))
            and (root / "eval" / arm / f"seed{seed}" / "results.json").is_file()
        )
    ]


def existing_commits(
    root: Path, kept: Path | None, jobs: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], list[str]]:
    """The commits the study's existing runs of ``jobs`` were made on, by (arm, seed): from their
    run directories (the study's record of each launch, else the train process's
    ``versions.json``; not a run with nothing to go on from, which trains from its start), the
    study's archive and the kept archive (``archive_to``)."""
    from framework.eval.study_archive import ARCHIVE, StudyArchive

    archives = [StudyArchive(root / ARCHIVE)]
    if kept is not None:
        archives.append(StudyArchive(kept))
    out: dict[tuple[str, int], list[str]] = {}
    for arm, seed in jobs:
        run = run_dir_of(root, arm, seed)
        found: list[str] = []
        if state_on_disk(root, arm, seed).status != "pending":
            for name in (PROVENANCE, "versions.json"):
                try:
                    saved = json.loads((run / name).read_text())
                except (OSError, json.JSONDecodeError):
                    continue
                found += record_commits(saved if name == PROVENANCE else {"versions": saved})
                break
        for archive in archives:
            found += record_commits(archive.run(arm, seed) or {})
        if found:
            out[(arm, seed)] = list(dict.fromkeys(found))
    return out


def integrity_problems(
    cfg: StudyConfig,
    root: Path,
    kept: Path | None,
    jobs: Sequence[tuple[str, int]],
    tree: Any,
) -> list[str]:
    """Why the publishable study ``cfg`` may not go on from the checkout ``tree``
    (a :class:`~framework.eval.study_integrity.TreeState`), one line each: git cannot say, the tree
    has uncommitted changes, runs of the table were made on another commit, or its
    pre-registration is not committed as it is, changed, or is not an ancestor of the checkout."""
    what = f"a publishable study ({', '.join(publishable(cfg))})"
    out = []
    if tree.error:
        out.append(
            f"[allow_dirty] got false, and git cannot say what this study's runs are made on: "
            f"{tree.error}; expected a git checkout of the code for {what}, whose records name "
            "their commit. Fix: run it from a git checkout, with git installed, or pass "
            "allow_dirty=true (the report then marks its runs' commit unknown)."
        )
    elif tree.changed:
        shown = ", ".join(tree.changed[:SHOWN])
        more = f" and {len(tree.changed) - SHOWN} more" if len(tree.changed) > SHOWN else ""
        out.append(
            f"[allow_dirty] got false, with {len(tree.changed)} uncommitted change(s) in "
            f"{tree.repo}: {shown}{more}; expected a clean checkout for {what} (its own folders "
            "do not count, nor untracked files outside framework/ and conf/). Fix: commit or "
            "stash the changes first, or pass allow_dirty=true (the report then marks each run "
            "made on this tree)."
        )
    if tree.commit:
        others = {
            job: bad
            for job, commits in existing_commits(root, kept, jobs).items()
            if (bad := [c for c in commits if not same_commit(c, tree.commit)])
        }
        if others:
            listed = "; ".join(
                f"{arm} seed {seed}: {', '.join(short(c) for c in commits)}"
                for (arm, seed), commits in list(others.items())[:SHOWN]
            )
            more = f"; and {len(others) - SHOWN} more" if len(others) > SHOWN else ""
            afresh = "out_dir and archive_to" + (" and publish" if cfg.publish else "")
            out.append(
                f"[allow_dirty] got false, with {len(others)} run(s) of this table made on "
                f"another commit (or tree) than this checkout's {short(tree.commit)} "
                f"({listed}{more}); expected every run of {what} made on one commit. Fix: go on "
                f"from the commit those runs were made on, start the table afresh (a new "
                f"{afresh}), or pass allow_dirty=true (the report then names each run's commit)."
            )
    return out + preregistration_problems(cfg, root, tree)


def preregistration_problems(cfg: StudyConfig, root: Path, tree: Any) -> list[str]:
    """A test-split study's pre-registration that does not precede its runs: its file not
    committed as it is, changed since the study froze it (:func:`check_preregistration`), or its
    commit not an ancestor of the checkout's. [] for any other study, and for a file that is
    missing (:func:`check_preregistration` refuses that)."""
    doc = Path(cfg.preregistration.split("#", 1)[0])
    if cfg.eval.split != "test" or not cfg.preregistration or not doc.is_file():
        return []
    now = file_record(doc)
    path = root / PREREGISTRATION
    frozen = (json.loads(path.read_text()).get("file") if path.is_file() else None) or {}
    out = []
    if not now["committed"]:
        why = now.get("git_error") or "untracked, or changed since its last commit"
        out.append(
            f"[preregistration] got {cfg.preregistration!r}, whose file is not committed as it is "
            f"({why}); expected a pre-registration committed before the study runs. Fix: commit "
            f"it first (git add {doc} && git commit), or pass allow_dirty=true (the report then "
            "says it is not shown to precede the runs)."
        )
    if frozen.get("sha256") and frozen["sha256"] != now["sha256"]:
        out.append(
            f"[preregistration] got {cfg.preregistration!r}, whose file changed since {root} was "
            f"pre-registered (sha256 {frozen['sha256'][:12]} then, {now['sha256'][:12]} now); "
            "expected the file the study froze. Fix: restore it"
            + (f" (git show {short(frozen['commit'])}:<its path>)" if frozen.get("commit") else "")
            + "; a changed design is a new study (a new pre-registration and out_dir)."
        )
    base = frozen.get("commit") or now["commit"]
    if base and tree.commit and is_ancestor(Path(tree.repo), base, tree.commit) is False:
        out.append(
            f"[preregistration] got {cfg.preregistration!r}, committed in {short(base)}, which is "
            f"not an ancestor of this checkout's commit {short(tree.commit)}; expected runs made "
            "on a commit that contains their pre-registration. Fix: run from a checkout that "
            f"does (git merge-base --is-ancestor {short(base)} HEAD), or pass allow_dirty=true."
        )
    return out


def check_integrity(
    cfg: StudyConfig,
    root: Path,
    kept: Path | None,
    jobs: Sequence[tuple[str, int]],
    kept_runs: set[tuple[str, int]] | None = None,
    *,
    quiet: bool = False,
) -> Any:
    """Refuse to start (or go on with) a publishable study on an uncommitted tree, on a commit
    other than its table's existing runs', or with a pre-registration that does not precede its
    runs (:func:`integrity_problems`; :mod:`framework.eval.study_integrity`), unless
    ``allow_dirty``: then say so (unless ``quiet``) and go on; the runs' records say what they
    were made on and the report marks them. A study with nothing left to make is not refused (it
    only reports). Returns the tree (:class:`~framework.eval.study_integrity.TreeState`), for the
    runs' records.

    Raises:
        SystemExit: status 2, with one line per problem, before anything is built or trained.
    """
    # the module's code_checkout, looked up at call time (tests point it at a temporary checkout)
    tree = tree_state(study_integrity.code_checkout(), study_folders(cfg))
    if not publishable(cfg):
        return tree
    start_done = (root / "eval" / "start" / "results.json").is_file() or (
        kept is not None and (kept / "eval" / "start.jsonl.gz").is_file()
    )
    if start_done and not left_to_make(root, jobs, kept_runs or set()):
        return tree
    problems = integrity_problems(cfg, root, kept, jobs, tree)
    if not problems:
        return tree
    if cfg.allow_dirty:
        if not quiet:
            print(
                "seekrl-study: allow_dirty=true: going on, and the report marks the runs made "
                "so, although\n  " + "\n  ".join(problems),
                flush=True,
            )
        return tree
    print("\n".join(problems), file=sys.stderr)
    raise SystemExit(2)


def launch_context(cfg: StudyConfig, root: Path, tree: Any, data_key: dict[str, Any]) -> dict:
    """What every run's provenance record of this invocation carries besides its launch:
    ``allow_dirty``, the questions' ``data_key`` and, for a study with one, the pre-registration
    (its file as it is now, :func:`~framework.eval.study_integrity.file_record`, and whether its
    commit is an ancestor of the checkout's: ``ancestor``, None when git cannot say)."""
    prereg = None
    doc = Path(cfg.preregistration.split("#", 1)[0])
    if cfg.preregistration and doc.is_file():
        prereg = {"preregistration": cfg.preregistration, **file_record(doc)}
        base, head = prereg.get("commit"), tree.commit
        prereg["ancestor"] = is_ancestor(Path(tree.repo), base, head) if base and head else None
    return {"allow_dirty": cfg.allow_dirty, "data_key": data_key, "preregistration": prereg}


# -- what every run and evaluation of a study stands on ---------------------------------------------


def study_basis(train_cfg: Any) -> dict[str, Any]:
    """The questions (their data key) and the warm start every run begins from: when either changes
    (new synthesis code, other files, another SFT), finished runs and evaluations no longer pair."""
    from framework.data.datasets import data_key
    from framework.sft.warm_start import warm_start_sft

    ws = train_cfg.warm_start
    if ws.path is not None:
        start = str(ws.path)
    elif ws.sft:
        start = str(warm_start_sft(train_cfg)[1])
    else:
        start = f"{train_cfg.rollout.policy.source}:{train_cfg.rollout.policy.path}"
    return {"data": data_key(train_cfg.dataset), "warm_start": start}


def content_basis(train_cfg: Any, eval_split: str) -> dict[str, Any]:
    """What :func:`study_basis` names, by content: a digest of the training and evaluation
    questions and one of the warm start's weights. A config key stays the same on another machine
    whose index, synthesis or SFT came out differently (other floating-point kernels, say); these
    do not, so a study resumed elsewhere (``archive_to``) goes on only from the same questions and
    the same warm start. ``train_cfg`` has the warm start in place (:func:`warm_start`)."""
    import hashlib

    from framework.registry import DATASETS

    load = DATASETS.bind(train_cfg.dataset)
    questions = hashlib.sha256()
    for split in dict.fromkeys(("train", eval_split)):
        for item in load(split):
            questions.update(json.dumps(asdict(item), sort_keys=True, default=str).encode())
            questions.update(b"\n")
    policy = train_cfg.rollout.policy
    weights = hashlib.sha256()
    folder = Path(str(policy.path)).expanduser()
    files = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin"))
    for f in files:
        weights.update(f.name.encode())
        with f.open("rb") as fh:
            while chunk := fh.read(1 << 24):
                weights.update(chunk)
    return {
        "questions_sha256": questions.hexdigest(),
        "warm_start_sha256": weights.hexdigest() if files else f"{policy.source}:{policy.path}",
    }


def basis_changes(found: dict[str, Any], basis: dict[str, Any]) -> list[str]:
    """How ``basis`` differs from the ``found`` record, on the keys both have (a key the record
    predates is no difference: it is recorded from now on)."""
    return [
        f"{k}: recorded {found[k]!r}, now {v!r}"
        for k, v in basis.items()
        if k in found and found[k] != v
    ]


def check_basis(root: Path, basis: dict[str, Any], record: bool = True) -> None:
    """Record the basis of a new study (or keys of it the record lacks; not when ``record`` is
    False, as in a dry run); refuse to go on with a study made on another one.

    Raises:
        SystemExit: status 2, naming what changed, when ``root`` was made on another basis (or
            holds evaluations from before the basis was recorded).
    """
    path = root / BASIS
    if path.is_file():
        found = json.loads(path.read_text())
    elif (root / "eval" / "start" / "results.json").is_file():
        found = dict.fromkeys(basis, "not recorded")
    else:
        if record:
            path.write_text(json.dumps(basis, indent=2) + "\n")
        return
    changed = basis_changes(found, basis)
    if changed:
        print(
            f"[out_dir] got {root}, whose runs and evaluations were made on another basis:\n  "
            + "\n  ".join(changed)
            + "\nexpected the same questions and warm start. Fix: pass a new out_dir=..., or "
            "delete that directory to start the study over (its results stay valid for the basis "
            "they were made on).",
            file=sys.stderr,
        )
        raise SystemExit(2)
    if record and path.is_file() and not basis.keys() <= found.keys():
        path.write_text(json.dumps({**found, **basis}, indent=2) + "\n")


# -- a study longer than one machine's life: its archive kept where it is committed ------------------
def check_kept_archive(
    kept: Path,
    cfg: StudyConfig,
    basis: dict[str, Any],
    precision: PrecisionChoice | None = None,
) -> None:
    """Refuse to resume from the archive in ``kept`` (``archive_to``) when it was made on another
    basis (:func:`study_basis`, :func:`content_basis`) or with other eval settings: its records
    would not pair with new ones. Nothing to check when it holds no archive yet.

    ``precision`` (a :class:`~framework.training.precision.PrecisionChoice`, what this machine runs)
    explains a refusal whose cause is the machine: where the archived runs trained in another
    precision, the message says so (:func:`precision_mismatch`).

    Raises:
        SystemExit: status 2, naming each difference.
    """
    from framework.eval.study_archive import StudyArchive

    archive = StudyArchive(kept)
    if not archive.exists():
        return
    found = json.loads((kept / BASIS).read_text()) if (kept / BASIS).is_file() else None
    if found is None:
        changed = [f"{kept / BASIS}: missing (an archive from before the basis was kept)"]
    else:
        changed = basis_changes(found, basis)
    now = asdict(cfg.eval)
    changed += [
        f"eval.{k}: recorded {v!r}, now {now.get(k)!r}"
        for k, v in archive.config().get("eval", {}).items()
        if now.get(k) != v
    ]
    if changed:
        cause = precision_mismatch(archive, precision) if precision is not None else None
        print(
            f"[archive_to] got {kept}, whose records were made on another basis or with other "
            "eval settings:\n  "
            + "\n  ".join(changed + ([cause[0]] if cause else []))
            + "\nexpected the questions, warm start and evaluation the records were made with. "
            "Fix: "
            + (cause[1] + " Or pass" if cause else "pass")
            + " archive_to=<a new folder> (or archive_to='' to keep no copy"
            + ("; a screen then needs publish=<another page> too" if cfg.publish else "")
            + "), or run where the index, questions and warm start come out the same."
            + (parts_hint(cfg) if cause else ""),
            file=sys.stderr,
        )
        raise SystemExit(2)


def parts_hint(cfg: StudyConfig) -> str:
    """For a refusal the machine causes: the parts of the screen (``parts``), each run on a basis
    of its own (another precision), which may go on here where the screen cannot; '' for none."""
    from framework.eval.study_archive import StudyArchive

    runs = []
    for folder in cfg.parts:
        archive = StudyArchive(Path(folder))
        name = archive.config().get("name") if archive.exists() else None
        runs.append(
            f"seekrl-study study={name} (records: {folder})"
            if name
            else f"the study whose archive_to is {folder}"
        )
    if not runs:
        return ""
    return (
        " Or go on with this screen's parts, each on a basis of its own: " + "; ".join(runs) + "."
    )


def check_record_folders(
    cfg: StudyConfig, kept: Path | None, basis: dict[str, Any], precision: PrecisionChoice
) -> None:
    """The study's checks of the folders its records come from (``archive_to``) and go to
    (``publish``) against ``basis``: :func:`check_kept_archive`, :func:`check_publish_target`."""
    if kept is not None:
        check_kept_archive(kept, cfg, basis, precision)
    check_publish_target(cfg, kept, basis, precision)


def check_publish_target(
    cfg: StudyConfig,
    kept: Path | None,
    basis: dict[str, Any],
    precision: PrecisionChoice | None = None,
) -> None:
    """Refuse a screen whose page (``publish``) would replace records made on another basis.

    Publishing copies the study's archive over the folder beside the page
    (:func:`framework.eval.study_report.publish_screen`): a screen started afresh elsewhere (a new
    ``out_dir`` and ``archive_to``, say on a machine of another precision) with the shipped
    ``publish`` would overwrite the committed screen's records after its first evaluation. Where
    that folder is the one the study resumes from (``archive_to``), :func:`check_kept_archive`
    decides instead.

    Raises:
        SystemExit: status 2, naming each difference, with the fix.
    """
    from framework.eval.study_archive import ARCHIVE, StudyArchive
    from framework.eval.study_report import published_records

    if not (cfg.screen and cfg.publish):
        return
    records = published_records(cfg.publish) / ARCHIVE
    if kept is not None and records.resolve() == kept.resolve():
        return
    if not (records / BASIS).is_file():
        return
    changed = basis_changes(json.loads((records / BASIS).read_text()), basis)
    if not changed:
        return
    cause = precision_mismatch(StudyArchive(records), precision) if precision is not None else None
    print(
        f"[publish] got {cfg.publish}, whose records ({records}) were made on another basis:\n  "
        + "\n  ".join(changed + ([cause[0]] if cause else []))
        + "\nexpected a page whose records this study may replace: publishing copies this "
        "study's archive over them. Fix: pass publish=<another page> (or publish='' to write "
        "none), or resume those records with archive_to="
        + str(records)
        + " where the questions and warm start come out the same.",
        file=sys.stderr,
    )
    raise SystemExit(2)


def precision_mismatch(archive: StudyArchive, here: PrecisionChoice) -> tuple[str, str] | None:
    """Whether the archived runs trained in a precision other than ``here`` (this machine's
    :class:`~framework.training.precision.PrecisionChoice`): then the machine is the cause of a
    changed basis, since ``auto`` settings (trainer precision, the encoders' dtype) follow the CPU's
    bf16 support and the index, the questions' answerability check and the warm start's cache key
    follow them. Returns the difference and its fix, or None (no run records say, or they agree).
    """
    recorded: dict[str, str] = {}
    for arm, seed in archive.runs(list(archive.config().get("arms", {}))):
        versions = (archive.run(arm, seed) or {}).get("versions") or {}
        if versions.get("precision"):
            recorded.setdefault(str(versions["precision"]), str(versions.get("cpu", "?")))
    if not recorded or here.precision in recorded:
        return None
    was = "; ".join(f"{p} (on {cpu})" for p, cpu in recorded.items())
    return (
        f"precision: the archived runs trained in {was}, this machine runs {here.precision} "
        f"({here.reason})",
        "resume on a machine that runs the archived runs' precision (for bf16-mixed, a CPU with "
        "native bf16: avx512_bf16 or amx_bf16); forcing it here would run bf16 emulated, many "
        "times slower (tools/bench/precision.py measures by how much).",
    )


def restore_kept(kept: Path, root: Path, jobs: Sequence[tuple[str, int]]) -> dict[Any, dict]:
    """Bring into ``<root>/archive`` what the kept archive (``archive_to``) holds and ``root`` does
    not: the warm start's evaluation and each finished, evaluated (arm, seed). Those are not made
    again. Returns their training records, keyed by ``(arm, seed)`` (``None`` for the warm start's
    evaluation, with an empty record)."""
    from framework.eval.study_archive import ARCHIVE, StudyArchive, eval_dir

    archive = StudyArchive(kept)
    if not archive.exists():
        return {}
    local = root / ARCHIVE
    restored: dict[Any, dict] = {}

    def copy(rel: Path) -> None:
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(kept / rel, local / rel)

    if not (eval_dir(root, None) / "results.json").is_file() and archive.has_eval(None):
        copy(Path("eval") / "start.jsonl.gz")
        restored[None] = {}
    for arm, seed in sorted(_kept_runs(kept, jobs)):
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
    from framework.eval.study_archive import ARCHIVE, archive_study

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


#: config keys a run's saved config.yaml may differ in without being another run: where it lives,
#: what it resumed from, and the policy the warm start put in place (the basis pins the warm start);
#: where it logged (an archived run was made in another study directory)
RUN_LOCAL_KEYS = ("run_dir", "resume", "rollout.policy.", "logger.save_dir")


def config_drift(run: Path | dict[str, Any] | None, arm_cfg: Any) -> list[str]:
    """How the config ``run`` was trained (or began) with differs from its arm's config now.

    Compares the leaves of ``<run>/config.yaml`` (or of ``run`` itself when it is the saved config
    as a dict: an archived run's) with those of ``arm_cfg`` that both have, leaving out
    :data:`RUN_LOCAL_KEYS`; a key only one side has (a field the framework added since) is not a
    difference. ``[]`` when the run has no saved config yet.
    """
    from omegaconf import OmegaConf

    if isinstance(run, dict):
        old = config_leaves(run)
    elif run is None or not (run / "config.yaml").is_file():
        return []
    else:
        old = config_leaves(OmegaConf.to_container(OmegaConf.load(run / "config.yaml")))
    new = config_leaves(OmegaConf.to_container(OmegaConf.structured(arm_cfg)))
    return [
        f"{key}: {old[key]!r} -> {new[key]!r}"
        for key in sorted(old.keys() & new.keys())
        if old[key] != new[key] and not any(key.startswith(k) for k in RUN_LOCAL_KEYS)
    ]


def check_runs_match_arms(root: Path, drift: dict[tuple[str, int], list[str]]) -> None:
    """Refuse to reuse or resume runs whose config is no longer their arm's.

    Raises:
        SystemExit: status 2, listing every such run and what changed.
    """
    stale = {job: lines for job, lines in drift.items() if lines}
    if not stale:
        return
    lines = []
    for (arm, seed), changed in stale.items():
        lines.append(f"{arm} seed {seed} ({run_dir_of(root, arm, seed)}):")
        lines += [f"    {c}" for c in changed[:12]]
        if len(changed) > 12:
            lines.append(f"    ... and {len(changed) - 12} more")
    print(
        f"[arms] got runs in {root} made with another config than their arm's now (an edited "
        "experiment or arm, or a changed default):\n  "
        + "\n  ".join(lines)
        + "\nexpected each finished or interrupted run to match its arm. Fix: give the changed "
        "arm a new name (+arms.<new>=[...]), pass a new out_dir=..., or delete those run "
        "directories to train them again.",
        file=sys.stderr,
    )
    raise SystemExit(2)


# -- the study --------------------------------------------------------------------------------------
#: the registries a screen sweeps (``screen=true``), each selected by its config group
SCREENED_KINDS = ("advantage", "loss", "sampler", "augment")


@dataclass(frozen=True)
class BundleUpdate:
    """How a bundle (composed with a study's shared overrides) updates: its policy epochs, its
    mini-batch size and whether its loss trains turn by turn (``stages_per_turn``, which the
    train config refuses with mini-batches)."""

    policy_epochs: int
    mini_batch_size: int
    stages_per_turn: bool


@functools.lru_cache(maxsize=8)
def _bundle_choices(
    bundles: tuple[str, ...], overrides: tuple[str, ...]
) -> tuple[tuple[str, tuple[tuple[str, str], ...], BundleUpdate], ...]:
    """The component each bundle selects per screened kind, and how it updates
    (:class:`BundleUpdate`), composed once per process (not validated: a turn-staged loss with
    the shared overrides' mini-batches is refused by the train config, and the screen gives its
    arm ``optim.mini_batch_size=0``).

    Composing the train config of every bundle takes seconds (Hydra), and the bundles' files do
    not change while a process runs; a component registered later (a plugin) changes no bundle's
    choice, and a new bundle changes ``bundles``, the key.
    """
    from framework.cli.app import compose

    out = []
    for bundle in bundles:
        cfg = compose("train", [*overrides, f"algorithm={bundle}"])
        update = BundleUpdate(
            int(cfg.optim.policy_epochs),
            int(cfg.optim.get("mini_batch_size", 0) or 0),
            _stages_per_turn(str(cfg.loss.name)),
        )
        choices = tuple((kind, str(getattr(cfg, kind).name)) for kind in SCREENED_KINDS)
        out.append((bundle, choices, update))
    return tuple(out)


def _stages_per_turn(loss: str) -> bool:
    """Whether the registered loss ``loss`` trains turn by turn (``stages_per_turn``)."""
    from framework.registry import ALL

    cls = ALL["loss"].get(loss).config_cls if loss in ALL["loss"] else None
    return bool(getattr(cls, "stages_per_turn", False))


#: the arm's override that makes a turn-staged loss (SeeUPO) trainable under shared mini-batches
WHOLE_BATCH = "optim.mini_batch_size=0"


def reference_label(baseline: str, epochs: int) -> str:
    """The label of the baseline at ``epochs`` policy epochs (a matched baseline)."""
    return f"{baseline}-epochs{epochs}"


def screen_arms(
    baseline: str, *, overrides: Sequence[str] = (), matched: bool = False
) -> dict[str, list[str]]:
    """One arm per registered method: the bundles first (the baseline bundle leading), then each
    component no bundle selects, on the baseline bundle.

    A loss that acts only off policy gets a second policy epoch (``optim.policy_epochs=2``); a
    loss that trains turn by turn (SeeUPO), where the shared overrides split batches into
    mini-batches, gets one mini-batch (``optim.mini_batch_size=0``), which it needs.

    Args:
        baseline: the bundle every swapped-in component is compared with (``algorithm=<it>``).
        overrides: the study's shared overrides (they decide, e.g., the sampler the arms share).
        matched: also the baseline at each number of policy epochs some arm takes beyond the
            baseline's (:func:`reference_label`, e.g. ``grpo-epochs2``), right after it: an arm
            that spends more optimiser steps is compared with it (framework/eval/screen.py).

    Raises:
        ValueError: ``baseline`` is not an algorithm bundle.
    """
    from framework.config.compose import group_options
    from framework.registry import ALL, load_components

    load_components()
    bundles = group_options("algorithm")
    if baseline not in bundles:
        raise ValueError(
            f"[baseline] got {baseline!r}; expected an algorithm bundle for screen=true (one of "
            f"{bundles}). Fix: set baseline=grpo."
        )
    arms: dict[str, list[str]] = {baseline: [f"algorithm={baseline}"]}
    selected: dict[str, set[str]] = {kind: set() for kind in SCREENED_KINDS}
    updates: dict[str, BundleUpdate] = {}
    for bundle, choices, update in _bundle_choices(tuple(bundles), tuple(overrides)):
        for kind, name in choices:
            selected[kind].add(name)
        updates[bundle] = update
        args = [f"algorithm={bundle}"]
        if update.stages_per_turn and update.mini_batch_size:
            args.append(WHOLE_BATCH)
        arms.setdefault(bundle, args)
    base = updates[baseline]
    epochs = {arm: updates[arm].policy_epochs for arm in arms}
    for kind in SCREENED_KINDS:
        for entry in ALL[kind]:
            if entry.name in selected[kind]:
                continue
            args = [f"algorithm={baseline}", f"{kind}={entry.name}"]
            label = f"{kind}-{entry.name}"
            epochs[label] = base.policy_epochs
            if getattr(entry.config_cls, "acts_off_policy_only", False):
                args.append("optim.policy_epochs=2")
                epochs[label] = 2
            if getattr(entry.config_cls, "stages_per_turn", False) and base.mini_batch_size:
                args.append(WHOLE_BATCH)
            arms[label] = args
    if matched:  # the baseline at each budget of epochs an arm takes, right after it
        more = sorted({n for n in epochs.values() if n > base.policy_epochs})
        refs = {
            reference_label(baseline, n): [f"algorithm={baseline}", f"optim.policy_epochs={n}"]
            for n in more
        }
        arms = {baseline: arms.pop(baseline), **refs, **arms}
    return arms


def selected_arms(cfg: StudyConfig) -> dict[str, list[str]]:
    """The arms ``only_arms`` keeps, the baseline first, in the study's order.

    Raises:
        SystemExit: status 2, naming the study's arms, when ``only_arms`` names one it lacks (with
            screen=true, an arm per registered method is known only now).
    """
    unknown = [a for a in cfg.only_arms if a not in cfg.arms]
    if unknown:
        print(
            f"[only_arms] got {unknown}; expected arms of study {cfg.name!r}: "
            f"{', '.join(cfg.arms)}. Fix: name those (seekrl-study study={cfg.name} dry_run=true "
            "lists them).",
            file=sys.stderr,
        )
        raise SystemExit(2)
    keep = {cfg.baseline, *cfg.only_arms}
    return {arm: args for arm, args in cfg.arms.items() if arm in keep}


def with_inert_arms(cfg: StudyConfig) -> StudyConfig:
    """``cfg`` with ``inert_arms`` filled for a screen: every arm whose train config the
    components' rules show to train exactly as the baseline's
    (:func:`framework.eval.screen.inert_reason`), with why; the study lists them and trains none
    of them. Said in the study's log. An arm whose config does not compose is left to train (its
    run fails with the config error and the study reports it)."""
    from framework.cli.app import load_config
    from framework.eval.screen import inert_reason

    def composed(arm: str) -> Any:
        try:
            return load_config("train", [*cfg.overrides, *cfg.arms[arm], *STUDY_TRAIN_ARGS])
        except (Exception, SystemExit):
            return None

    base = composed(cfg.baseline)
    found: dict[str, str] = {}
    for arm in cfg.arms:
        if base is None or arm == cfg.baseline or arm in cfg.inert_arms:
            continue
        arm_cfg = composed(arm)
        if arm_cfg is not None and (why := inert_reason(arm_cfg, base)):
            found[arm] = why
    inert = {**found, **{a: why for a, why in cfg.inert_arms.items() if a in cfg.arms}}
    if inert:
        print(
            f"seekrl-study: {len(inert)} arm(s) inert at these settings, not trained (their runs "
            "would be the baseline's; the table lists them with the reason):\n"
            + "\n".join(f"  {arm:<16} {why}" for arm, why in inert.items()),
            flush=True,
        )
    return replace(cfg, inert_arms=inert)


def study_jobs(cfg: StudyConfig) -> list[tuple[str, int]]:
    """The study's (arm, seed) runs in the order they are made: seed by seed, every arm of a
    seed before the next seed, so that a study stopped part way has comparable arms (the same
    seeds done) rather than one arm's seeds and none of the next; a replicated baseline's further
    seeds (``baseline_seeds``) right after its first run, so that the noise band they give is
    there before the methods' runs; no run of an arm in ``inert_arms``."""
    inert = cfg.inert_arms or {}
    extra = [s for s in cfg.arm_seeds(cfg.baseline) if s not in cfg.seeds]
    jobs: list[tuple[str, int]] = []
    for i, seed in enumerate(cfg.seeds):
        for arm in cfg.arms:
            if arm in inert:
                continue
            jobs.append((arm, seed))
            if i == 0 and arm == cfg.baseline:
                jobs += [(arm, s) for s in extra]
    return jobs


def study(cfg: StudyConfig) -> dict[str, Any]:
    from framework.cli.app import load_config
    from framework.sft.warm_start import warm_start

    root = cfg.directory()
    if cfg.screen:  # an arm per registered method, found now (framework/eval/screen.py)
        found = screen_arms(cfg.baseline, overrides=cfg.overrides, matched=cfg.matched_baselines)
        cfg = replace(cfg, arms={**found, **cfg.arms})
    if cfg.only_arms:
        cfg = replace(cfg, arms=selected_arms(cfg))
    # a screen's arms the config shows to be the baseline's, not trained (a report from an
    # archive alone has them from the archive's config)
    if cfg.screen and not (cfg.report_only and not _evaluated_here(root)):
        cfg = with_inert_arms(cfg)
    jobs = study_jobs(cfg)  # seed by seed; a replicated baseline's seeds first
    print(
        f"seekrl-study: {cfg.name}: {len(cfg.arms)} arm(s) x {len(cfg.seeds)} seed(s) in {root}",
        flush=True,
    )
    kept = Path(cfg.archive_to) if cfg.archive_to else None
    kept_runs = _kept_runs(kept, jobs)
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
    if cfg.report_only:
        return report_so_far(cfg, root, jobs)
    # a publishable study goes on only from a committed tree, on its table's commit: refused here,
    # before anything is built or trained (and in a dry run), unless allow_dirty=true
    tree = check_integrity(cfg, root, kept, jobs, kept_runs)

    # 1. the warm start every arm and seed shares (cached SFT), and its evaluation
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
        return {}
    if needs_sft(first_cfg):
        in_child(_warm_start_child, first_cfg)  # the cold-start SFT, cached for every run
    train_cfg = warm_start(first_cfg)  # now only reads the cached policy's folder
    content = content_basis(train_cfg, cfg.eval.split)
    check_basis(root, content)
    data_key = {"data": basis["data"], "questions_sha256": content["questions_sha256"]}
    context = launch_context(cfg, root, tree, data_key)  # in every run's provenance record
    restored: dict[Any, dict] = {}
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
    states: list[RunState] = []
    keep_archive(root, cfg, [])

    # 2. every (arm, seed): train (or resume, or skip), then evaluate; first, every run already
    # there (or archived) must have been made with its arm's config as it is now
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
    pace = StudyPace(total=len(jobs))
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
            st = run_train(cfg, arm, seed, root, tree.record(), context)
        except KeyboardInterrupt:
            st = RunState(arm, seed, "interrupted")
        states.append(st)
        _write_status(root, states, jobs)
        if st.status == "interrupted":
            print(f"seekrl-study: interrupted; the same command resumes ({root})")
            raise SystemExit(INTERRUPTED)
        if st.status == "done":
            run = run_dir_of(root, arm, seed)
            arm_cfg = arm_cfgs[(arm, seed)]
            if arm_cfg is None:  # it trained, so it loads now: let a late error say why
                arm_cfg = _arm_config(cfg, root, arm, seed, strict=True)
            arm_cfg = replace(arm_cfg, rollout=train_cfg.rollout)  # the same base and tokenizer
            evaluate_once(arm_cfg, cfg, run, root / "eval" / arm / f"seed{seed}")
            if cfg.prune_checkpoints and (freed := prune_checkpoints(root, arm, seed)):
                print(
                    f"seekrl-study: deleted {arm} seed {seed}'s checkpoints ({freed / 1e9:.1f} GB)"
                )
        keep_archive(root, cfg, [st])  # its record only: each run is read once, not once per run
        line = pace.finish(f"{arm} seed {seed}", st.status, earlier=st.earlier)
        if line:
            print(line, flush=True)

    # 3. the report
    from framework.eval.study_report import write_study

    result = write_study(root, cfg, states)
    print((root / "study.md").read_text())
    print(f"seekrl-study: written to {root}")
    return result


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


def report_so_far(cfg: StudyConfig, root: Path, jobs: list[tuple[str, int]]) -> dict[str, Any]:
    """``report_only=true``: the report of the evaluations already in ``root`` (a long study
    looked at between sessions, or a published study's committed archive); it trains and
    evaluates nothing and says what is missing.

    A directory with evaluations is archived first; one with only ``archive/`` (a committed copy)
    is reported from it as archived, with the study config saved there, so the published tables
    regenerate exactly whatever the presets say now.
    """
    from framework.eval.study_archive import ARCHIVE, StudyArchive
    from framework.eval.study_report import write_report, write_study, write_subset_report

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


def _kept_runs(kept: Path | None, jobs: Sequence[tuple[str, int]]) -> set[tuple[str, int]]:
    """The (arm, seed) jobs the kept archive (``archive_to``) holds finished and evaluated."""
    from framework.eval.study_archive import StudyArchive

    archive = StudyArchive(kept) if kept is not None else None
    if archive is None or not archive.exists():
        return set()
    return {
        (arm, seed)
        for arm, seed in jobs
        if archive.has_eval(arm, seed) and (archive.run(arm, seed) or {}).get("status") == "done"
    }


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


def main() -> None:
    run_app("study", study)


if __name__ == "__main__":
    main()
