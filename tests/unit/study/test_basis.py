import json
import sys
from dataclasses import asdict, dataclass, field, replace

import pytest
from omegaconf import OmegaConf

from framework.study.basis import check_basis, check_runs_match_arms, config_drift
from framework.study.layout import BASIS
from framework.study.runs import EVAL_SETTINGS, check_evals_match, eval_settings
from framework.study.schema import StudyConfig, StudyEvalConfig


def test_a_study_is_pinned_to_its_questions_and_warm_start(tmp_path, capsys):
    basis = {"data": "abc", "warm_start": "/cache/sft/1"}
    check_basis(tmp_path, basis)  # a new study records its basis
    assert json.loads((tmp_path / BASIS).read_text()) == basis
    check_basis(tmp_path, dict(basis))  # the same basis goes on
    with pytest.raises(SystemExit) as exc:
        check_basis(tmp_path, {**basis, "data": "def"})  # e.g. new synthesis code
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"[out_dir] got {tmp_path}" in err and "data: recorded 'abc', now 'def'" in err
    assert "warm_start" not in err.split("expected")[0].split("basis:")[1]  # only what changed
    assert "Fix: pass a new out_dir" in err


def test_evaluations_from_before_the_basis_was_recorded_are_not_trusted(tmp_path, capsys):
    (tmp_path / "eval" / "start").mkdir(parents=True)
    (tmp_path / "eval" / "start" / "results.json").write_text("{}")
    with pytest.raises(SystemExit):
        check_basis(tmp_path, {"data": "abc", "warm_start": "/cache/sft/1"})
    assert "recorded 'not recorded'" in capsys.readouterr().err
    assert not (tmp_path / BASIS).exists()


@dataclass
class _Optim:
    lr: float = 1e-5


@dataclass
class _Policy:
    source: str = "hf"
    path: str = "base"


@dataclass
class _Rollout:
    policy: _Policy = field(default_factory=_Policy)


@dataclass
class _Train:
    run_dir: str = "runs/a"
    resume: str | None = None
    optim: _Optim = field(default_factory=_Optim)
    rollout: _Rollout = field(default_factory=_Rollout)
    added_since: int = 3


def _saved(run, cfg) -> None:
    run.mkdir(parents=True)
    text = OmegaConf.to_yaml(OmegaConf.structured(cfg))
    (run / "config.yaml").write_text(text.replace("added_since: 3\n", ""))


def test_a_run_is_compared_with_its_arm_on_the_settings_both_have(tmp_path):
    run = tmp_path / "runs" / "e_grpo" / "seed0"
    assert config_drift(run, _Train()) == []  # nothing saved yet: a new run
    # the run as trained: another directory, resumed, the warm start's policy in place
    trained = _Train(
        "elsewhere", "elsewhere/checkpoints", rollout=_Rollout(_Policy("path", "/sft"))
    )
    _saved(run, trained)
    # a field the framework added since (added_since) is no difference either
    assert config_drift(run, _Train()) == []
    assert config_drift(run, replace(_Train(), optim=_Optim(3e-5))) == ["optim.lr: 1e-05 -> 3e-05"]


@dataclass
class _OptimNow:
    lr: float = 1e-5
    over_budget: str = "train"


@dataclass
class _TrainNow:
    optim: _OptimNow = field(default_factory=_OptimNow)


def test_a_run_from_before_a_default_changed_is_compared_as_it_behaved():
    """``optim.over_budget`` came with a default (train) other than what runs did before (drop):
    a run saved without the field differs from an arm on the new default, not on drop."""
    assert config_drift({"optim": {"lr": 1e-5}}, _TrainNow()) == [
        "optim.over_budget: 'drop' -> 'train'"
    ]
    assert config_drift({"optim": {"lr": 1e-5}}, _TrainNow(_OptimNow(over_budget="drop"))) == []
    saved = {"optim": {"lr": 1e-5, "over_budget": "train"}}
    assert config_drift(saved, _TrainNow()) == []
    assert config_drift({"optim": {"lr": 1e-5}}, _Train()) == []  # an arm without the field


def test_runs_made_with_another_config_stop_the_study(tmp_path, capsys):
    check_runs_match_arms(tmp_path, {("grpo", 0): [], ("e_grpo", 1): []})  # all match: go on
    with pytest.raises(SystemExit) as exc:
        check_runs_match_arms(tmp_path, {("grpo", 0): [], ("e_grpo", 1): ["optim.lr: 1 -> 2"]})
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"[arms] got runs in {tmp_path}")
    assert "e_grpo seed 1" in err and "optim.lr: 1 -> 2" in err and "grpo seed 0" not in err
    assert "Fix: give the changed arm a new name" in err


def study_of(e: StudyEvalConfig, seeds=(0,)) -> StudyConfig:
    return StudyConfig(arms={"a": []}, seeds=list(seeds), eval=e)


def _finished_eval(out, results, settings=None) -> None:
    out.mkdir(parents=True)
    (out / "results.json").write_text(json.dumps(results))
    if settings is not None:
        (out / EVAL_SETTINGS).write_text(json.dumps(settings))


def test_finished_evaluations_made_with_other_eval_settings_stop_the_study(tmp_path, capsys):
    e = StudyEvalConfig(questions=100, samples_per_question=4, seed=0)
    made = asdict(e)
    _finished_eval(tmp_path / "eval" / "start", {"k": 4, "seed": 0}, made)
    _finished_eval(tmp_path / "eval" / "a" / "seed0", {"k": 4, "seed": 0}, made)
    check_evals_match(tmp_path, study_of(e))  # the same settings go on
    (tmp_path / "eval" / "b" / "seed0.partial").mkdir(parents=True)  # unfinished: not checked
    (tmp_path / "eval" / "b" / "seed0.partial" / "results.json").write_text("{}")
    check_evals_match(tmp_path, study_of(e))
    with pytest.raises(SystemExit) as exc:
        check_evals_match(tmp_path, study_of(replace(e, questions=200)))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    start = tmp_path / "eval" / "start"
    assert f"[eval.questions] got 200; expected 100, what {start} was evaluated with" in err
    assert "eval/a/seed0 was evaluated with" in err and "seed0.partial" not in err
    assert "samples_per_question" not in err and "Fix: run the study with the eval settings" in err


def test_evaluations_without_recorded_settings_are_checked_on_k_and_seed(tmp_path, capsys):
    _finished_eval(tmp_path / "eval" / "start", {"k": 4, "seed": 0})
    e = StudyEvalConfig(questions=100, samples_per_question=4, seed=0)
    check_evals_match(tmp_path, study_of(replace(e, questions=200)))  # not recorded: cannot be told
    with pytest.raises(SystemExit):
        check_evals_match(tmp_path, study_of(replace(e, samples_per_question=8, seed=1)))
    err = capsys.readouterr().err
    assert "[eval.samples_per_question] got 8; expected 4" in err
    assert "[eval.seed] got 1; expected 0" in err


# -- the study's own process holds no model: SFT and evaluations run in spawned children ----------
def test_in_child_runs_the_target_in_another_process(tmp_path):
    from pathlib import Path

    from framework.study.runs import in_child

    out = tmp_path / "pid.txt"
    in_child(Path.write_text, out, "written by the child")
    assert out.read_text() == "written by the child"


def test_in_child_passes_on_a_failed_childs_exit_status():
    import os

    from framework.study.runs import in_child

    with pytest.raises(SystemExit) as exc:
        in_child(os._exit, 2)  # e.g. a config or dataset error in the evaluation
    assert exc.value.code == 2


def test_sigterm_to_the_study_goes_on_to_the_child_and_reads_as_interrupted(capsys):
    import os
    import signal
    import threading
    import time

    from framework.study.runs import INTERRUPTED, in_child

    timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    clock = time.perf_counter()
    try:
        with pytest.raises(SystemExit) as exc:
            in_child(time.sleep, 60)  # stands in for an SFT or evaluation
    finally:
        timer.cancel()
    assert exc.value.code == INTERRUPTED
    assert time.perf_counter() - clock < 30  # the child ended on the signal, not after its sleep
    # the study says it was interrupted and how to go on, as it does for a train run
    assert "interrupted during sleep; the same command resumes" in capsys.readouterr().out
    assert signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, signal.default_int_handler)


def _ctrl_c(signum):
    """A child's Ctrl-C, whatever the test run's own SIGINT handling (a job started in the
    background of a shell ignores SIGINT, and its children inherit that)."""
    import signal

    signal.signal(signum, signal.default_int_handler)
    signal.raise_signal(signum)


@pytest.mark.slow
def test_ctrl_c_in_the_child_outside_a_training_step_reads_as_interrupted(capfd):
    # a Ctrl-C reaches the child too; outside a training step (an index or question build, an
    # evaluation) no checkpoint callback handles it: the child ends with INTERRUPTED, no traceback
    import signal

    from framework.study.runs import INTERRUPTED, in_child

    with pytest.raises(SystemExit) as exc:
        in_child(_ctrl_c, signal.SIGINT)  # KeyboardInterrupt inside the child
    assert exc.value.code == INTERRUPTED
    out, err = capfd.readouterr()
    assert "interrupted during _ctrl_c; the same command resumes" in out
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


# -- a study ended by SIGKILL (the OOM killer, a session's end) takes its children with it ---------
_SLEEPER = """
import os, time
from pathlib import Path

def pid_then_sleep(path):
    Path(path).write_text(str(os.getpid()))
    time.sleep(120)
"""

# the parent as a study runs its children: an SFT or evaluation through in_child, a train run
# through Popen with _child_env() (train.main calls stop_with_parent first, as the child does here)
_PARENTS = {
    "in_child": """
import sys
sys.path.insert(0, sys.argv[1])
from sleeper import pid_then_sleep
from framework.study.runs import in_child
in_child(pid_then_sleep, sys.argv[2])
""",
    "popen": """
import subprocess, sys
from framework.study.runs import _child_env
child = (
    f"import sys; sys.path.insert(0, {sys.argv[1]!r}); "
    "from framework.interrupt import stop_with_parent; stop_with_parent(); "
    f"from sleeper import pid_then_sleep; pid_then_sleep({sys.argv[2]!r})"
)
subprocess.Popen([sys.executable, "-c", child], env=_child_env()).wait()
""",
}


def _ended(pid: int) -> bool:
    """Gone, or a zombie waiting for a reaper (a container's first process may never reap)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's"
)
@pytest.mark.parametrize("how", sorted(_PARENTS))
def test_a_child_stops_when_its_study_is_killed(tmp_path, how):
    import os
    import signal
    import subprocess
    import time

    (tmp_path / "sleeper.py").write_text(_SLEEPER)
    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENTS[how], str(tmp_path), str(pid_file)], start_new_session=True
    )
    child = 0
    try:
        deadline = time.monotonic() + 60
        while not pid_file.is_file() or not pid_file.read_text():
            assert parent.poll() is None and time.monotonic() < deadline, "no child started"
            time.sleep(0.1)
        child = int(pid_file.read_text())
        assert not _ended(child)
        parent.kill()  # SIGKILL: nothing of the parent's runs, nothing is forwarded
        parent.wait()
        deadline = time.monotonic() + 20
        while not _ended(child):
            assert time.monotonic() < deadline, f"the child ({how}) outlived its killed parent"
            time.sleep(0.1)
    finally:
        if parent.poll() is None:
            parent.kill()
        if child and not _ended(child):
            os.kill(child, signal.SIGKILL)


def test_stop_with_parent_reads_and_removes_the_studys_process_id(monkeypatch):
    import os

    from framework.interrupt import STOP_WITH_ENV, stop_with_parent

    monkeypatch.delenv(STOP_WITH_ENV, raising=False)
    assert stop_with_parent() is False  # not started by a study: nothing to watch
    monkeypatch.setenv(STOP_WITH_ENV, str(os.getppid()))  # pytest's parent stays up
    assert stop_with_parent() is sys.platform.startswith("linux")
    assert STOP_WITH_ENV not in os.environ  # this process's own children do not inherit it
    monkeypatch.setenv(STOP_WITH_ENV, "12x")
    with pytest.raises(SystemExit, match=rf"\[env {STOP_WITH_ENV}\] got '12x'; expected a pro"):
        stop_with_parent()


@pytest.mark.slow
def test_a_train_run_started_by_a_study_watches_it_before_anything_else():
    import os
    import subprocess

    from framework.interrupt import STOP_WITH_ENV

    env = {**os.environ, STOP_WITH_ENV: "not-a-pid"}
    done = subprocess.run(
        [sys.executable, "-m", "framework.cli.train", "dry_run=true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and f"[env {STOP_WITH_ENV}] got 'not-a-pid'" in done.stderr


def test_the_warm_start_is_evaluated_with_as_many_samples_as_an_arm_pooled_over_seeds(tmp_path):
    e = StudyEvalConfig(questions=100, samples_per_question=2, seed=0)
    cfg = study_of(e, seeds=(0, 1, 2))
    assert cfg.start_samples() == 6
    assert eval_settings(cfg, start=True)["samples_per_question"] == 6
    assert eval_settings(cfg, start=False)["samples_per_question"] == 2
    _finished_eval(tmp_path / "eval" / "start", {"k": 6, "seed": 0}, eval_settings(cfg, True))
    _finished_eval(
        tmp_path / "eval" / "a" / "seed0", {"k": 2, "seed": 0}, eval_settings(cfg, False)
    )
    check_evals_match(tmp_path, cfg)  # each evaluation against its own k
    with pytest.raises(SystemExit):  # a fourth seed would need 8 samples of the start
        check_evals_match(tmp_path, study_of(e, seeds=(0, 1, 2, 3)))
    fixed = replace(e, start_samples_per_question=6)
    check_evals_match(tmp_path, study_of(fixed, seeds=(0, 1, 2, 3)))
    assert replace(e, start_samples_per_question=1).problems()  # fewer than an arm: refused


def test_a_test_split_study_needs_its_preregistration_and_is_frozen(tmp_path, capsys):
    from framework.study.checks import PREREGISTRATION, check_preregistration

    e = StudyEvalConfig(split="test")
    unregistered = StudyConfig(arms={"a": []}, baseline="a", eval=e)
    (problem,) = [p for p in unregistered.problems() if p.path == "preregistration"]
    assert "eval.split=validation" in problem.fix
    assert not StudyConfig(arms={"a": []}, baseline="a").problems()  # validation: no need
    doc = tmp_path / "prereg.md"
    cfg = replace(unregistered, preregistration=f"{tmp_path / 'missing.md'}#study")
    with pytest.raises(SystemExit):
        check_preregistration(tmp_path, cfg)
    assert "names no file here" in capsys.readouterr().err
    doc.write_text("# Pre-registration\n")
    cfg = replace(unregistered, preregistration=f"{doc}#study")
    check_preregistration(tmp_path, cfg)  # the first launch records it
    record = json.loads((tmp_path / PREREGISTRATION).read_text())
    assert record["preregistration"] == f"{doc}#study" and record["settings"]["seeds"] == [0, 1, 2]
    check_preregistration(tmp_path, cfg)  # the same settings go on
    with pytest.raises(SystemExit):
        check_preregistration(tmp_path, replace(cfg, seeds=[0, 1]))
    assert "seeds: pre-registered [0, 1, 2], now [0, 1]" in capsys.readouterr().err


# -- a study that outlives its machine: its archive kept where it is committed (archive_to) --------
def _kept(folder, cfg, basis, runs=(("a", 0, "done"),)) -> None:
    """An archive as keep_archive leaves it: config, basis, the start's and each run's records."""
    from framework.eval.records import write_records

    folder.mkdir(parents=True)
    (folder / "study_config.json").write_text(
        json.dumps({"arms": cfg.arms, "eval": asdict(cfg.eval)})
    )
    (folder / BASIS).write_text(json.dumps(basis))
    row = {"qid": "q1", "sample": 0, "correct": 1.0}
    write_records(folder / "eval" / "start.jsonl.gz", [row])
    for arm, seed, status in runs:
        write_records(folder / "eval" / arm / f"seed{seed}.jsonl.gz", [row])
        rec = {"status": status, "seconds": 12.5, "config": {"optim": {"lr": 1e-5}}}
        (folder / "training" / arm).mkdir(parents=True, exist_ok=True)
        (folder / "training" / arm / f"seed{seed}.json").write_text(json.dumps(rec))


def test_a_basis_key_the_record_predates_is_recorded_not_refused(tmp_path):
    check_basis(tmp_path, {"data": "abc", "warm_start": "/cache/sft/1"})
    check_basis(tmp_path, {"questions_sha256": "q1"})  # added since: recorded from now on
    assert json.loads((tmp_path / BASIS).read_text()) == {
        "data": "abc",
        "warm_start": "/cache/sft/1",
        "questions_sha256": "q1",
    }
    with pytest.raises(SystemExit):
        check_basis(tmp_path, {"questions_sha256": "q2"})  # and checked


def test_a_kept_archive_on_another_basis_or_eval_is_refused(tmp_path, capsys):
    from framework.study.basis import check_kept_archive

    cfg = StudyConfig(arms={"a": []}, seeds=[0], eval=StudyEvalConfig(questions=100))
    basis = {"data": "abc", "warm_start_sha256": "w1"}
    check_kept_archive(tmp_path / "none", cfg, basis)  # nothing kept yet: nothing to check
    _kept(tmp_path / "kept", cfg, basis)
    check_kept_archive(tmp_path / "kept", cfg, basis)  # the same basis and eval: go on
    check_kept_archive(tmp_path / "kept", cfg, {"data": "abc"})  # before the SFT: config keys
    with pytest.raises(SystemExit) as exc:  # e.g. another machine's SFT came out differently
        check_kept_archive(tmp_path / "kept", cfg, {**basis, "warm_start_sha256": "w2"})
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"[archive_to] got {tmp_path / 'kept'}")
    assert "warm_start_sha256: recorded 'w1', now 'w2'" in err and "Fix: pass archive_to=" in err
    with pytest.raises(SystemExit):
        check_kept_archive(
            tmp_path / "kept", replace(cfg, eval=StudyEvalConfig(questions=50)), basis
        )
    assert "eval.questions: recorded 100, now 50" in capsys.readouterr().err
    (tmp_path / "kept" / BASIS).unlink()
    with pytest.raises(SystemExit):  # an archive without its basis cannot be trusted
        check_kept_archive(tmp_path / "kept", cfg, basis)


def test_a_refusal_caused_by_the_machine_says_so(tmp_path, capsys):
    # the archived runs trained in bf16 on a CPU with native bf16; here auto chose fp32, so the
    # auto-following keys (questions, warm start) differ: the message names the precision as the
    # cause and its fix, and a machine of the same precision gets the plain message
    from framework.study.basis import check_kept_archive
    from framework.training.precision import PrecisionChoice

    cfg = StudyConfig(arms={"a": []}, seeds=[0])
    basis = {"data": "abc", "warm_start": "/cache/sft/1"}
    _kept(tmp_path / "kept", cfg, basis)
    rec_path = tmp_path / "kept" / "training" / "a" / "seed0.json"
    rec = json.loads(rec_path.read_text())
    rec["versions"] = {"precision": "bf16-mixed", "cpu": "CPU Z4"}
    rec_path.write_text(json.dumps(rec))
    fp32 = PrecisionChoice("32-true", "auto: this CPU has no native bf16")
    bf16 = PrecisionChoice("bf16-mixed", "auto: this CPU has native bf16 (avx512_bf16)")
    check_kept_archive(tmp_path / "kept", cfg, basis, fp32)  # same basis: no refusal
    with pytest.raises(SystemExit):
        check_kept_archive(tmp_path / "kept", cfg, {**basis, "data": "def"}, fp32)
    err = capsys.readouterr().err
    assert (
        "\n  precision: the archived runs trained in bf16-mixed (on CPU Z4), this machine runs "
        "32-true (auto: this CPU has no native bf16)\n" in err
    )
    assert "Fix: resume on a machine that runs the archived runs' precision" in err
    assert "Or pass archive_to=<a new folder>" in err
    with pytest.raises(SystemExit):
        check_kept_archive(tmp_path / "kept", cfg, {**basis, "data": "def"}, bf16)
    err = capsys.readouterr().err
    assert "precision:" not in err and "Fix: pass archive_to=<a new folder>" in err
    assert "parts" not in err
    # a screen with a part made for such a machine (study=screen_fp32) points to it
    part = tmp_path / "part"
    _kept(part, cfg, basis)
    saved = json.loads((part / "study_config.json").read_text())
    (part / "study_config.json").write_text(json.dumps({**saved, "name": "s_fp32"}))
    screen = replace(cfg, screen=True, parts=[str(part), str(tmp_path / "later")])
    with pytest.raises(SystemExit):
        check_kept_archive(tmp_path / "kept", screen, {**basis, "data": "def"}, fp32)
    err = capsys.readouterr().err
    assert (
        "Or go on with this screen's parts, each on a basis of its own: seekrl-study "
        f"study=s_fp32 (records: {part}); the study whose archive_to is {tmp_path / 'later'}."
    ) in err
    with pytest.raises(SystemExit):  # not when the machine is not the cause
        check_kept_archive(tmp_path / "kept", screen, {**basis, "data": "def"}, bf16)
    assert "parts" not in capsys.readouterr().err


def test_a_screen_does_not_publish_over_records_of_another_basis(tmp_path, capsys):
    # a screen started afresh (new out_dir and archive_to) with the shipped page would copy its
    # archive over the committed records beside that page: refused before anything is built
    from framework.study.basis import check_kept_archive, check_publish_target
    from framework.training.precision import PrecisionChoice

    page = tmp_path / "docs" / "screen.md"
    records = tmp_path / "docs" / "screen" / "archive"
    cfg = StudyConfig(arms={"a": []}, seeds=[0], screen=True, publish=str(page))
    basis = {"data": "abc", "warm_start": "/cache/sft/1"}
    other = {**basis, "data": "def"}
    check_publish_target(cfg, None, other)  # nothing published yet: nothing to replace
    _kept(records, cfg, basis)
    rec_path = records / "training" / "a" / "seed0.json"
    rec_path.write_text(
        json.dumps(
            {
                **json.loads(rec_path.read_text()),
                "versions": {"precision": "bf16-mixed", "cpu": "CPU Z4"},
            }
        )
    )
    fp32 = PrecisionChoice("32-true", "auto: this CPU has no native bf16")

    check_publish_target(cfg, tmp_path / "mine", basis, fp32)  # the same basis: it may go on
    check_publish_target(cfg, records, other, fp32)  # resumed from there: check_kept_archive's
    check_publish_target(replace(cfg, screen=False), tmp_path / "mine", other, fp32)
    check_publish_target(replace(cfg, publish=""), tmp_path / "mine", other, fp32)
    with pytest.raises(SystemExit):
        check_publish_target(cfg, tmp_path / "mine", other, fp32)
    err = capsys.readouterr().err
    assert err.startswith(f"[publish] got {page}, whose records ({records}) were made on another")
    assert "\n  data: recorded 'abc', now 'def'\n" in err
    assert "\n  precision: the archived runs trained in bf16-mixed (on CPU Z4)" in err
    assert "Fix: pass publish=<another page> (or publish='' to write none)" in err
    # the kept archive's refusal names publish too when the study has a page
    with pytest.raises(SystemExit):
        check_kept_archive(records, cfg, other, fp32)
    assert "a screen then needs publish=<another page> too" in capsys.readouterr().err


def test_what_the_kept_archive_holds_is_restored_and_not_made_again(tmp_path):
    from framework.study.archive import restore_kept

    cfg = StudyConfig(arms={"a": [], "b": [], "c": []}, seeds=[0])
    kept = tmp_path / "kept"
    _kept(kept, cfg, {}, runs=(("a", 0, "done"), ("b", 0, "failed")))
    root = tmp_path / "study"
    jobs = [("a", 0), ("b", 0), ("c", 0)]
    restored = restore_kept(kept, root, jobs)
    # the start's evaluation and the finished run; a failed run or one never run is made here
    assert set(restored) == {None, ("a", 0)}
    assert restored[("a", 0)]["seconds"] == 12.5
    for rel in ("eval/start.jsonl.gz", "eval/a/seed0.jsonl.gz", "training/a/seed0.json"):
        assert (root / "archive" / rel).read_bytes() == (kept / rel).read_bytes()
    assert not (root / "archive" / "eval" / "b").exists()
    # a run evaluated on this machine keeps its own records
    (root / "eval" / "a" / "seed0").mkdir(parents=True)
    (root / "eval" / "a" / "seed0" / "results.json").write_text("{}")
    assert ("a", 0) not in restore_kept(kept, root, jobs)
    assert restore_kept(tmp_path / "nothing", root, jobs) == {}


def test_the_archive_is_kept_after_each_evaluation_without_deleting_there(tmp_path):
    from framework.eval.records import write_records
    from framework.study.archive import keep_archive
    from framework.study.runs import RunState

    root = tmp_path / "study"
    kept = tmp_path / "docs" / "archive"
    cfg = StudyConfig(arms={"a": [], "b": []}, seeds=[0], archive_to=str(kept))
    write_records(root / "eval" / "start" / "records.jsonl.gz", [{"qid": "q", "sample": 0}])
    (root / BASIS).write_text(json.dumps({"data": "abc"}))
    (kept / "eval" / "b").mkdir(parents=True)
    (kept / "eval" / "b" / "seed0.jsonl.gz").write_bytes(b"from another machine")
    keep_archive(root, cfg, [])
    assert (kept / "eval" / "start.jsonl.gz").is_file()
    assert json.loads((kept / BASIS).read_text()) == {"data": "abc"}
    assert json.loads((kept / "study_config.json").read_text())["arms"] == {"a": [], "b": []}
    assert (kept / "eval" / "b" / "seed0.jsonl.gz").read_bytes() == b"from another machine"
    # a run trained and evaluated here: its records and run record follow
    run = root / "runs" / "a" / "seed0"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"stages": [{"peak_gb": 3.0}]}))
    (run / "config.yaml").write_text("optim:\n  lr: 1.0e-05\n")
    write_records(root / "eval" / "a" / "seed0" / "records.jsonl.gz", [{"qid": "q", "sample": 0}])
    keep_archive(root, cfg, [RunState("a", 0, "done", 30.0)])
    record = json.loads((kept / "training" / "a" / "seed0.json").read_text())
    assert record["status"] == "done" and record["peak_gb"] == 3.0
    assert record["config"] == {"optim": {"lr": 1e-05}}
    assert (kept / "eval" / "a" / "seed0.jsonl.gz").is_file()
    # resumed from a checkpoint: its summary's stages are its last launch's, and the killed
    # launches' peak (kept in the checkpoint) counts too
    (run / "summary.json").write_text(
        json.dumps({"stages": [{"peak_gb": 3.0}], "earlier_launches_peak_gb": 4.5})
    )
    keep_archive(root, cfg, [RunState("a", 0, "done", 30.0)])
    record = json.loads((kept / "training" / "a" / "seed0.json").read_text())
    assert record["peak_gb"] == 4.5 and record["earlier_launches_peak_gb"] == 4.5
    keep_archive(root, replace(cfg, archive_to=""), [])  # '' keeps no copy: nothing happens


def test_an_archived_run_is_checked_against_its_arm_like_a_run_directory():
    assert config_drift({"optim": {"lr": 1e-5}}, _Train()) == []
    assert config_drift({"optim": {"lr": 3e-5}}, _Train()) == ["optim.lr: 3e-05 -> 1e-05"]
    assert config_drift(None, _Train()) == []  # an archive from before configs were kept


def test_archive_to_must_be_a_folder(tmp_path):
    f = tmp_path / "file.txt"
    f.write_text("x")
    problems = StudyConfig(arms={"a": []}, archive_to=str(f)).problems()
    assert any("archive_to" in str(p) for p in problems)
    assert not StudyConfig(arms={"a": []}, archive_to=str(tmp_path / "new")).problems()


def _finished_child(run, seconds, commands):
    """A stand-in for seekrl-train's process: it notes its command in ``commands``, writes the
    run's summary (``seconds``) and policy, and exits 0."""

    class FinishedChild:
        def __init__(self, cmd, *args, **kwargs):
            commands.append(cmd)
            (run / "policy").mkdir(parents=True)
            (run / "policy" / "config.json").write_text("{}")
            (run / "summary.json").write_text(json.dumps({"seconds": seconds}))
            self.returncode = 0

        def wait(self):
            return 0

        def send_signal(self, signum):
            pass

    return FinishedChild


def test_a_finished_run_has_the_time_its_summary_gives_now_and_on_a_later_start(
    tmp_path, monkeypatch
):
    """The archived record of a run must not change when the study restarts and finds it done."""
    import subprocess

    from framework.study import runs as study

    root = tmp_path / "study"
    run = study.run_dir_of(root, "a", 0)
    monkeypatch.setattr(subprocess, "Popen", _finished_child(run, 12.3, []))
    now = study.run_train(StudyConfig(arms={"a": []}), "a", 0, root)
    assert (now.status, now.seconds) == ("done", 12.3)  # not the study's own clock around it
    assert study.state_on_disk(root, "a", 0) == now
    assert now.earlier == ""  # trained from its start: it sets the study's pace
    # a later start finds it trained (cut off while evaluating, say): said so, no pace from it
    again = study.run_train(StudyConfig(arms={"a": []}), "a", 0, root)
    assert (again.status, again.seconds, again.earlier) == ("done", 12.3, study.TRAINED_BEFORE)


def test_a_run_that_went_on_from_a_checkpoint_says_so(tmp_path, monkeypatch):
    """Its time here is only its remainder, so the study's pace must not count it as a run."""
    import subprocess

    from framework.study import runs as study

    root = tmp_path / "study"
    run = study.run_dir_of(root, "a", 0)
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "step-4.ckpt").write_text("x")
    commands: list[list[str]] = []
    monkeypatch.setattr(subprocess, "Popen", _finished_child(run, 40.0, commands))
    st = study.run_train(StudyConfig(arms={"a": []}), "a", 0, root)
    assert any(a == f"resume={run}" for a in commands[0])
    assert (st.status, st.seconds, st.earlier) == ("done", 40.0, study.RESUMED)


# -- a dry run makes the config-level checks a real run makes first, and records nothing ----------
_TINY = [
    "warm_start.sft=false",
    "dataset=synth_small",
    "retriever=bm25",
    "rollout.policy.source=tiny",
]


def _dry_run(out, *extra):
    from framework.cli.app import run_app
    from framework.study.runner import study

    overrides = "overrides=[" + ",".join(f"'{a}'" for a in _TINY) + "]"
    argv = [f"out_dir={out}", overrides, "dry_run=true", f"hydra.run.dir={out}/.hydra", *extra]
    return run_app("study", study, argv=argv)


def test_a_dry_run_refuses_what_the_run_would_refuse_and_records_nothing(tmp_path, capsys):
    out = tmp_path / "study"
    assert _dry_run(out) == {}
    assert not out.exists() or not any(p.name != ".hydra" for p in out.iterdir())
    out_text = capsys.readouterr().out
    assert "seekrl-study: dry run: out_dir, archive_to and publish agree" in out_text
    assert "seekrl-study: of 6 run(s), 6 to run\n" in out_text  # 2 arms x 3 seeds
    out.mkdir(exist_ok=True)
    other = {"data": "0123456789abcdef", "warm_start": "tiny:None"}
    (out / "basis.json").write_text(json.dumps(other))
    with pytest.raises(SystemExit) as exc:
        _dry_run(out)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"[out_dir] got {out}, whose runs and evaluations were made on another basis" in err
    assert "data: recorded '0123456789abcdef'" in err
    assert json.loads((out / "basis.json").read_text()) == other  # left as it was


@pytest.mark.slow
def test_a_dry_run_of_a_test_split_study_checks_its_preregistration_and_freezes_nothing(
    tmp_path, study_checkout
):
    from framework.study.checks import PREREGISTRATION

    out = tmp_path / "study"
    with pytest.raises(SystemExit) as exc:  # names no file here
        _dry_run(out, "eval.split=test", f"preregistration={tmp_path}/missing.md")
    assert exc.value.code == 2
    plan = study_checkout.path / "plan.md"  # committed, as a test-split study's must be
    plan.write_text("# the study, written down first\n")
    study_checkout.commit("pre-register the study")
    assert _dry_run(out, "eval.split=test", f"preregistration={plan}") == {}
    assert not (out / PREREGISTRATION).exists()  # the first real launch freezes the settings
