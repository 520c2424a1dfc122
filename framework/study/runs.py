"""The study's child processes: each train run (``python -m framework.cli.train``), each
evaluation and the cold-start SFT, with SIGTERM forwarded to them and their state read from disk.

A run's state is its directory's (:func:`state_on_disk`), so the same command resumes: a finished
run is skipped, an interrupted one goes on from its newest checkpoint, and one that crashed is
marked failed (``study_error.txt``) without stopping the others.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from framework.study.integrity import record_evaluated, record_launch, record_trained
from framework.study.layout import TEST_COUNTS, run_dir_of
from framework.study.schema import StudyConfig
from framework.study.types import Launch

#: exit status of a train run stopped by SIGINT / SIGTERM after its checkpoint (see cli/train.py)
INTERRUPTED = 130


#: in a run directory: the exit status and log tail of a run that crashed (it marks the run failed)
STUDY_ERROR = "study_error.txt"


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


def train_finished(run: Path) -> bool:
    """A run is finished when its summary says so (neither interrupted nor stopped by a health
    monitor: both export a policy too) and its policy was exported."""
    summary = run / "summary.json"
    if not summary.is_file() or not (run / "policy" / "config.json").is_file():
        return False
    try:
        ended = json.loads(summary.read_text())
    except json.JSONDecodeError:
        return False
    return not ended.get("interrupted", False) and not ended.get("stopped_by")


#: seekrl-train overrides of every study run: the study evaluates each final policy itself, from
#: policy/ saved at the training precision: rounded to bf16 it would differ from the warm start
#: by the rounding too where evaluations roll out in fp32 (a CPU without native bf16)
STUDY_TRAIN_ARGS = ("final_eval.enabled=false", "export.dtype=float32")


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
    launch: Launch | None = None,
    context: Mapping[str, object] | None = None,
) -> RunState:
    """Train one (arm, seed) in a child process unless it is finished; never raises for a crash.

    ``launch`` (the tree it is launched on, :meth:`~framework.study.integrity.TreeState.record`)
    and ``context`` (what the study stands on) go to the run's provenance record with the times
    it starts and finishes training (:mod:`framework.study.integrity`); None records none."""
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


def needs_sft(train_cfg: Any) -> bool:
    """True when the train config asks for a cold-start SFT that is not cached yet."""
    from framework.sft.warm_start import warm_start_sft

    ws = train_cfg.warm_start
    if ws.path is not None or not ws.sft:
        return False
    return not (warm_start_sft(train_cfg)[1] / "policy" / "config.json").is_file()


def warm_start_child(train_cfg: Any) -> None:
    from framework.cli.app import prepare
    from framework.sft.warm_start import warm_start

    prepare()
    warm_start(train_cfg)


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


#: the study's eval settings a finished evaluation was made with (beside its results.json)
EVAL_SETTINGS = "study_eval.json"


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


def count_test_evaluation(root: Path, policy: str) -> dict[str, int]:
    """Add one to ``policy``'s count of finished test-split evaluations in the study directory
    (``test_evaluations.json``, which the report prints); returns the counts."""
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
