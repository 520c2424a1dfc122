import json
from dataclasses import asdict, dataclass, field, replace

import pytest
from omegaconf import OmegaConf

from framework.cli.study import (
    BASIS,
    EVAL_SETTINGS,
    check_basis,
    check_evals_match,
    check_runs_match_arms,
    config_drift,
    eval_settings,
)
from framework.config.study import StudyConfig, StudyEvalConfig


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

    from framework.cli.study import in_child

    out = tmp_path / "pid.txt"
    in_child(Path.write_text, out, "written by the child")
    assert out.read_text() == "written by the child"


def test_in_child_passes_on_a_failed_childs_exit_status():
    import os

    from framework.cli.study import in_child

    with pytest.raises(SystemExit) as exc:
        in_child(os._exit, 2)  # e.g. a config or dataset error in the evaluation
    assert exc.value.code == 2


def test_sigterm_to_the_study_goes_on_to_the_child_and_reads_as_interrupted(capsys):
    import os
    import signal
    import threading
    import time

    from framework.cli.study import INTERRUPTED, in_child

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
    from framework.cli.study import PREREGISTRATION, check_preregistration

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
