"""A publishable study's integrity (framework/study/integrity.py): the tree and commit its runs
are made on, their times and data key in the archive, the pre-registration's order, and the marks
the report gives a study let through with allow_dirty=true."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from framework.study import checks, runner, runs
from framework.study import integrity as si
from framework.study.archive import StudyArchive, archive_study
from framework.study.schema import StudyConfig, StudyEvalConfig

ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


# -- the tree ---------------------------------------------------------------------------------------
def test_a_clean_checkout_and_its_commit(study_checkout):
    tree = si.tree_state(study_checkout.path)
    assert tree.clean and tree.commit == study_checkout.git("rev-parse", "HEAD")
    assert tree.record() == {"commit": tree.commit, "changed": []}


def test_a_changed_tracked_file_makes_the_tree_dirty(study_checkout):
    (study_checkout.path / "framework" / "code.py").write_text("x = 2\n")
    tree = si.tree_state(study_checkout.path)
    assert not tree.clean and tree.changed == ("M framework/code.py",)
    study_checkout.git("add", "framework/code.py")  # staged is still uncommitted
    assert si.tree_state(study_checkout.path).changed == ("M framework/code.py",)
    study_checkout.commit()
    assert si.tree_state(study_checkout.path).clean


def test_untracked_files_count_only_where_the_runs_load_them(study_checkout):
    (study_checkout.path / "scratch.py").write_text("print(1)\n")  # a note, a scratch script
    (study_checkout.path / "docs").mkdir()
    (study_checkout.path / "docs" / "draft.md").write_text("d\n")
    assert si.tree_state(study_checkout.path).clean
    (study_checkout.path / "conf" / "new.yaml").write_text("b: 2\n")  # Hydra lists it
    (study_checkout.path / "framework" / "plugin.py").write_text("y = 1\n")
    assert si.tree_state(study_checkout.path).changed == (
        "?? conf/new.yaml",
        "?? framework/plugin.py",
    )


def test_the_studys_own_folders_do_not_make_the_tree_dirty(study_checkout):
    """archive_to (say docs/benchmarks/screen/archive) is committed, and rewritten as the study
    runs: its changes are the study's, not the code's."""
    kept = study_checkout.path / "docs" / "screen" / "archive"
    kept.mkdir(parents=True)
    (kept / "basis.json").write_text("{}\n")
    study_checkout.commit()
    (kept / "basis.json").write_text('{"data": 1}\n')
    (kept / "new.json").write_text("{}\n")
    assert not si.tree_state(study_checkout.path).clean
    assert si.tree_state(study_checkout.path, [kept]).clean
    cfg = StudyConfig(arms={"a": []}, archive_to=str(kept), out_dir="/elsewhere/study")
    assert si.tree_state(study_checkout.path, si.study_folders(cfg)).clean  # outside: no matter


def test_no_git_checkout_or_no_git_is_said_so(tmp_path, monkeypatch):
    alone = tmp_path / "not_a_checkout"
    alone.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # no checkout above tmp_path
    tree = si.tree_state(alone)
    assert tree.commit is None and "is not in a git checkout" in tree.error and not tree.clean

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", no_git)
    assert "git is not installed" in si.tree_state(alone).error


# -- the study's refusals ---------------------------------------------------------------------------
def _cfg(tmp_path: Path, **kw) -> StudyConfig:
    return StudyConfig(
        arms={"a": [], "b": []}, baseline="a", seeds=[0], out_dir=str(tmp_path / "study"), **kw
    )


JOBS = [("a", 0), ("b", 0)]


def test_publishable_is_publish_archive_to_or_the_test_split(tmp_path):
    assert si.publishable(_cfg(tmp_path)) == []
    assert si.publishable(_cfg(tmp_path, archive_to="kept")) == ["archive_to=kept"]
    assert si.publishable(_cfg(tmp_path, publish="docs/screen.md")) == ["publish=docs/screen.md"]
    test = _cfg(tmp_path, eval=StudyEvalConfig(split="test"), preregistration="p.md")
    assert si.publishable(test) == ["eval.split=test"]


def test_a_publishable_study_refuses_a_dirty_tree_unless_allowed(study_checkout, tmp_path, capsys):
    (study_checkout.path / "framework" / "code.py").write_text("x = 2\n")
    plain = _cfg(tmp_path)
    assert not checks.check_integrity(plain, plain.directory(), None, JOBS).clean  # not refused
    kept = tmp_path / "kept"
    cfg = _cfg(tmp_path, archive_to=str(kept))
    with pytest.raises(SystemExit) as exc:
        checks.check_integrity(cfg, cfg.directory(), kept, JOBS)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("[allow_dirty] got false, with 1 uncommitted change(s) in ")
    assert "M framework/code.py; expected a clean checkout for a publishable study " in err
    assert "(archive_to=" in err and "Fix: commit or stash the changes first" in err
    tree = checks.check_integrity(
        _cfg(tmp_path, archive_to=str(kept), allow_dirty=True), cfg.directory(), kept, JOBS
    )
    assert tree.changed == ("M framework/code.py",)  # what the runs' records will say
    assert "allow_dirty=true: going on, and the report marks" in capsys.readouterr().out


def test_a_publishable_study_outside_a_git_checkout_is_refused(tmp_path, monkeypatch, capsys):
    alone = tmp_path / "installed"
    alone.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.setattr(si, "code_checkout", lambda: alone)
    cfg = _cfg(tmp_path, publish=str(tmp_path / "screen.md"))
    with pytest.raises(SystemExit):
        checks.check_integrity(cfg, cfg.directory(), None, JOBS)
    err = capsys.readouterr().err
    assert "[allow_dirty] got false, and git cannot say what this study's runs are made on" in err
    assert "is not in a git checkout" in err and "Fix: run it from a git checkout" in err


def _archived_run(kept: Path, arm: str, seed: int, record: dict) -> None:
    """A run's record and evaluation in an archive (``archive_to``), as keep_archive leaves them."""
    from framework.eval.records import write_records

    (kept / "training" / arm).mkdir(parents=True, exist_ok=True)
    (kept / "training" / arm / f"seed{seed}.json").write_text(
        json.dumps({"status": "done", "seconds": 1.0, **record})
    )
    write_records(kept / "eval" / arm / f"seed{seed}.jsonl.gz", [{"qid": "q", "correct": 1.0}])
    (kept / "study_config.json").write_text(json.dumps({"arms": {"a": [], "b": []}}))


def test_runs_of_another_commit_in_the_table_are_refused(study_checkout, tmp_path, capsys):
    kept = tmp_path / "kept"
    head = study_checkout.git("rev-parse", "HEAD")
    cfg = _cfg(tmp_path, archive_to=str(kept))
    # made on this commit (the study's own record of it): b goes on
    _archived_run(kept, "a", 0, {"provenance": {"launches": [{"commit": head, "changed": []}]}})
    checks.check_integrity(cfg, cfg.directory(), kept, JOBS, {("a", 0)})
    # made on another (an old record: its train process's commit)
    _archived_run(kept, "a", 0, {"versions": {"git_commit": "0123456789ab"}})
    with pytest.raises(SystemExit) as exc:
        checks.check_integrity(cfg, cfg.directory(), kept, JOBS, {("a", 0)})
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "[allow_dirty] got false, with 1 run(s) of this table made on another commit" in err
    assert f"than this checkout's {head[:12]} (a seed 0: 0123456789ab)" in err
    assert "expected every run of a publishable study (archive_to=" in err
    assert "Fix: go on from the commit those runs were made on" in err
    # or this commit with uncommitted changes: another tree
    dirty = {"launches": [{"commit": head, "changed": ["M framework/code.py"]}]}
    _archived_run(kept, "a", 0, {"provenance": dirty})
    with pytest.raises(SystemExit):
        checks.check_integrity(cfg, cfg.directory(), kept, JOBS, {("a", 0)})
    assert f"(a seed 0: {head[:12]}-dirty)" in capsys.readouterr().err
    # allow_dirty=true mixes them (and the report says so); nothing left to make: no refusal
    allowed = _cfg(tmp_path, archive_to=str(kept), allow_dirty=True)
    checks.check_integrity(allowed, cfg.directory(), kept, JOBS, {("a", 0)})
    _archived_run(kept, "b", 0, {"versions": {"git_commit": "0123456789ab"}})
    write_start = kept / "eval" / "start.jsonl.gz"
    write_start.write_bytes((kept / "eval" / "a" / "seed0.jsonl.gz").read_bytes())
    checks.check_integrity(cfg, cfg.directory(), kept, JOBS, {("a", 0), ("b", 0)})


def test_a_run_directorys_own_launches_count(study_checkout, tmp_path, capsys):
    """An unfinished run trained on another commit would go on from its checkpoint on this one."""
    cfg = _cfg(tmp_path, archive_to=str(tmp_path / "kept"))
    run = runs.run_dir_of(cfg.directory(), "a", 0)
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "step-2.ckpt").write_text("x")
    (run / "versions.json").write_text(json.dumps({"git_commit": "fedcba987654"}))
    with pytest.raises(SystemExit):
        checks.check_integrity(cfg, cfg.directory(), None, JOBS)
    assert "(a seed 0: fedcba987654)" in capsys.readouterr().err
    head = study_checkout.git("rev-parse", "HEAD")
    si.record_launch(run, {"commit": head, "changed": []}, {})  # the study's record comes first
    checks.check_integrity(cfg, cfg.directory(), None, JOBS)


# -- the pre-registration ---------------------------------------------------------------------------
def test_a_pre_registration_file_and_its_commit(study_checkout):
    doc = study_checkout.path / "docs" / "prereg.md"
    doc.parent.mkdir()
    doc.write_text("## Pre-registration\n")
    untracked = si.file_record(doc)
    assert untracked["commit"] is None and not untracked["committed"]
    commit = study_checkout.commit("pre-register")
    record = si.file_record(doc)
    assert record["commit"] == commit and record["committed"]
    assert record["committed_at"].endswith("Z") and len(record["sha256"]) == 64
    doc.write_text("## Pre-registration, edited\n")
    assert not si.file_record(doc)["committed"]


def _test_cfg(tmp_path: Path, doc: Path, **kw) -> StudyConfig:
    return _cfg(tmp_path, eval=StudyEvalConfig(split="test"), preregistration=f"{doc}#study", **kw)


def test_a_test_split_study_refuses_a_pre_registration_not_committed(
    study_checkout, tmp_path, capsys
):
    doc = tmp_path / "outside.md"  # in no checkout
    doc.write_text("# plan\n")
    cfg = _test_cfg(tmp_path, doc)
    with pytest.raises(SystemExit):
        checks.check_integrity(cfg, cfg.directory(), None, JOBS)
    err = capsys.readouterr().err
    assert f"[preregistration] got '{doc}#study', whose file is not committed as it is" in err
    assert "Fix: commit it first" in err
    doc = study_checkout.path / "prereg.md"
    doc.write_text("# plan\n")
    study_checkout.commit()
    cfg = _test_cfg(tmp_path, doc)
    checks.check_integrity(cfg, cfg.directory(), None, JOBS)  # committed: goes on
    cfg.directory().mkdir(parents=True)
    checks.check_preregistration(cfg.directory(), cfg)  # the first launch freezes its file
    frozen = json.loads((cfg.directory() / checks.PREREGISTRATION).read_text())["file"]
    assert frozen["commit"] == study_checkout.git("rev-parse", "HEAD") and frozen["committed"]
    doc.write_text("# plan, changed after the study began\n")
    study_checkout.commit()
    with pytest.raises(SystemExit):
        checks.check_integrity(cfg, cfg.directory(), None, JOBS)
    assert "whose file changed since" in capsys.readouterr().err


def _records(prereg: dict, started: str, **launch) -> dict:
    return {
        ("a", 0): {
            "provenance": {
                "train_started": started,
                "launches": [{"commit": "c" * 40, "changed": [], **launch}],
                "preregistration": prereg,
            }
        }
    }


def test_the_pre_registration_must_precede_the_first_run():
    prereg = {
        "preregistration": "docs/study.md#x",
        "sha256": "ab" * 32,
        "commit": "d" * 40,
        "committed_at": "2026-01-01T10:00:00Z",
        "committed": True,
        "ancestor": True,
    }
    first = {"run": "`a` seed 0", "train_started": "2026-01-01T11:00:00Z"}
    ok = si.preregistration_order(_records(prereg, first["train_started"]), first)
    assert ok is not None and ok["precedes"] and ok["problems"] == [] and ok["ancestor"]
    late = {**first, "train_started": "2026-01-01T09:00:00Z"}  # trained before it was committed
    bad = si.preregistration_order(_records(prereg, late["train_started"]), late)
    assert bad is not None and not bad["precedes"]
    assert bad["problems"] == [
        "it was committed at 2026-01-01T10:00:00Z, after the first run (`a` seed 0) began "
        "training at 2026-01-01T09:00:00Z"
    ]
    uncommitted = {**prereg, "committed": False, "ancestor": False}
    bad = si.preregistration_order(_records(uncommitted, first["train_started"]), first)
    assert bad is not None and set(bad["problems"]) == {
        "it was not committed as it is when a run began",
        "its commit is not an ancestor of a run's commit",
    }
    assert si.preregistration_order({("a", 0): {"provenance": {}}}, first) is None


# -- the archive and the report ---------------------------------------------------------------------
def _evaluated(path: Path, correct: list[bool]) -> None:
    """An evaluation as seekrl-eval leaves it (samples.jsonl, results.json)."""
    path.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "dataset": "synth/validation",
            "question_id": f"q{i}",
            "sample": 0,
            "correct": c,
            "tool_calls": 1,
            "turns": 1,
            "status": "ok",
        }
        for i, c in enumerate(correct)
    ]
    (path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "results.json").write_text("{}")


class _FinishedChild:
    """seekrl-train's process, standing in: the run's summary and policy, exit 0."""

    def __init__(self, cmd, *args, **kwargs):
        run = Path(next(a for a in cmd if a.startswith("run_dir=")).split("=", 1)[1])
        (run / "policy").mkdir(parents=True)
        (run / "policy" / "config.json").write_text("{}")
        (run / "summary.json").write_text(json.dumps({"seconds": 3.0}))
        self.returncode = 0

    def wait(self):
        return 0

    def send_signal(self, signum):
        pass


def test_the_archive_records_each_runs_times_commit_and_data_key(
    study_checkout, tmp_path, monkeypatch
):
    """What run_train and evaluate_once stamp reaches the run's archived record."""
    doc = study_checkout.path / "prereg.md"
    doc.write_text("# plan\n")
    head = study_checkout.commit()
    cfg = _test_cfg(tmp_path, doc)
    root = cfg.directory()
    tree = si.tree_state(study_checkout.path)
    data_key = {"data": "0123abcd", "questions_sha256": "e" * 64}
    context = checks.launch_context(cfg, root, tree, data_key)
    assert context["preregistration"]["ancestor"] is True
    with monkeypatch.context() as m:  # (git runs by Popen too: only the train child stands in)
        m.setattr(subprocess, "Popen", _FinishedChild)
        state = runs.run_train(cfg, "a", 0, root, tree.record(), context)
    assert state.status == "done"

    def evaluated(target, out):  # the evaluation child, standing in
        _evaluated(out, [True, False])

    monkeypatch.setattr(runs, "eval_config", lambda *a, **k: a[3])
    monkeypatch.setattr(runs, "in_child", evaluated)
    cfg_val = _cfg(tmp_path)  # (a test-split evaluation would count itself too)
    run = runs.run_dir_of(root, "a", 0)
    runs.evaluate_once(None, cfg_val, run, root / "eval" / "a" / "seed0")
    archive_study(root, cfg, [state])
    record = StudyArchive(root / "archive").run("a", 0)
    assert record is not None
    prov = record["provenance"]
    for key in ("train_started", "train_ended", "evaluated"):
        assert re.fullmatch(ISO, prov[key]), key
    assert prov["train_started"] <= prov["train_ended"] <= prov["evaluated"]
    assert prov["launches"] == [{"started": prov["train_started"], "commit": head, "changed": []}]
    assert prov["data_key"] == data_key and prov["allow_dirty"] is False
    assert prov["preregistration"]["commit"] == head
    assert prov["preregistration"]["preregistration"] == f"{doc}#study"
    assert si.record_commits(record) == [head]
    # a run the study did not record (made before these records): no provenance, as before
    runs.run_dir_of(root, "b", 0).mkdir(parents=True)
    archive_study(root, cfg, [SimpleNamespace(arm="b", seed=0, status="done", seconds=1.0)])
    assert "provenance" not in (StudyArchive(root / "archive").run("b", 0) or {})


def _report_dir(tmp_path: Path, launches: dict[str, list[dict]], prereg: dict | None = None):
    """A study directory with the warm start and arms a, b (seed 0) evaluated, each run recorded
    with ``launches``."""
    root = tmp_path / "study"
    _evaluated(root / "eval" / "start", [False, False, True, False])
    for arm, arm_launches in launches.items():
        _evaluated(root / "eval" / arm / "seed0", [True, False, True, False])
        run = runs.run_dir_of(root, arm, 0)
        run.mkdir(parents=True)
        (run / si.PROVENANCE).write_text(
            json.dumps(
                {
                    "launches": arm_launches,
                    "trained": "2026-02-01T12:00:00Z",
                    "allow_dirty": True,
                    "data_key": {"data": "k"},
                    "preregistration": prereg,
                }
            )
        )
    return root


def _report_cfg(**kw) -> SimpleNamespace:
    base = {
        "name": "t",
        "arms": {"a": ["algorithm=grpo"], "b": ["algorithm=e_grpo"]},
        "seeds": [0],
        "baseline": "a",
        "bootstrap": 200,
        "min_effect": 0.05,
        "overrides": [],
        "eval": SimpleNamespace(questions=4, split="validation", samples_per_question=1, seed=0),
    }
    return SimpleNamespace(**{**base, **kw})


def _states():
    return [SimpleNamespace(arm=a, seed=0, status="done", seconds=1.0) for a in ("a", "b")]


def test_the_report_marks_mixed_commits_and_a_dirty_tree_per_run(tmp_path):
    from framework.study.report import write_study

    one, other = "1" * 40, "2" * 40
    root = _report_dir(
        tmp_path,
        {
            "a": [{"started": "2026-02-01T10:00:00Z", "commit": one, "changed": []}],
            "b": [
                {
                    "started": "2026-02-01T11:00:00Z",
                    "commit": other,
                    "changed": ["M framework/code.py", "?? conf/new.yaml"],
                }
            ],
        },
    )
    summary = write_study(root, _report_cfg(), _states())
    md = (root / "study.md").read_text()
    assert (
        "**Commits mixed in this table (`allow_dirty=true`):** its runs were made on 2 commits: "
        f"`{one[:12]}`: `a` seed 0; `{other[:12]}`: `b` seed 0." in md
    )
    assert (
        "**Made on an uncommitted tree (`allow_dirty=true`):** `b` seed 0 (on "
        f"`{other[:12]}`, 2 uncommitted changes: `M framework/code.py`, `?? conf/new.yaml`)" in md
    )
    assert "Provenance: every run" not in md
    info = summary["integrity"]
    assert info["mixed"] and info["dirty"] == ["`b` seed 0"]
    assert info["first_run"] == {
        "run": "`a` seed 0",
        "train_started": "2026-02-01T10:00:00Z",
        "commit": one[:12],
    }
    assert json.loads((root / "study.json").read_text())["integrity"]["commits"] == [
        one[:12],
        other[:12],
    ]


def test_a_clean_table_says_its_commit_and_an_old_archive_says_nothing(tmp_path):
    from framework.study.report import write_study

    one = "1" * 40
    launch = {"started": "2026-02-01T10:00:00Z", "commit": one, "changed": []}
    root = _report_dir(tmp_path / "new", {"a": [launch], "b": [launch]})
    write_study(root, _report_cfg(), _states())
    md = (root / "study.md").read_text()
    assert (
        f"Provenance: every run (2) was made on commit `{one[:12]}`, with no uncommitted change "
        "to the code; the first run, `a` seed 0, began training at 2026-02-01T10:00:00Z" in md
    )
    assert "**" not in md.split("## Pass@1 per arm")[0]  # nothing marked
    # runs without provenance records (an archive from before them): no line, no study.json key
    old = tmp_path / "old" / "study"
    _evaluated(old / "eval" / "start", [False, False, True, False])
    for arm in ("a", "b"):
        _evaluated(old / "eval" / arm / "seed0", [True, False, True, False])
        runs.run_dir_of(old, arm, 0).mkdir(parents=True)
    summary = write_study(old, _report_cfg(), _states())
    assert "integrity" not in summary and "Provenance" not in (old / "study.md").read_text()


def test_the_report_says_whether_the_pre_registration_precedes_the_first_run(tmp_path):
    from framework.study.report import write_study

    prereg = {
        "preregistration": "docs/study.md#plan",
        "sha256": "ab" * 32,
        "commit": "d" * 40,
        "committed_at": "2026-02-01T09:00:00Z",
        "committed": True,
        "ancestor": True,
    }
    launch = {"started": "2026-02-01T10:00:00Z", "commit": "1" * 40, "changed": []}
    root = _report_dir(tmp_path / "ok", {"a": [launch], "b": [launch]}, prereg)
    write_study(root, _report_cfg(), _states())
    assert (
        f"Pre-registration: `docs/study.md#plan` (sha256 `{'ab' * 6}`, committed in "
        f"`{'d' * 12}` at 2026-02-01T09:00:00Z) precedes the first run (`a` seed 0, training from "
        "2026-02-01T10:00:00Z); its commit is an ancestor of every run's."
        in (root / "study.md").read_text()
    )
    late = {**prereg, "committed_at": "2026-02-01T10:30:00Z"}
    root = _report_dir(tmp_path / "late", {"a": [launch], "b": [launch]}, late)
    write_study(root, _report_cfg(), _states())
    assert (
        "**Pre-registration not shown to precede the first run:** `docs/study.md#plan` (sha256 "
        f"`{'ab' * 6}`, committed in `{'d' * 12}` at 2026-02-01T10:30:00Z): it was committed at "
        "2026-02-01T10:30:00Z, after the first run (`a` seed 0) began training at "
        "2026-02-01T10:00:00Z." in (root / "study.md").read_text()
    )


def test_a_screens_table_and_page_carry_the_marks(tmp_path):
    from framework.study.report import write_study

    launches = {
        "a": [{"started": "2026-02-01T10:00:00Z", "commit": "1" * 40, "changed": []}],
        "b": [{"started": "2026-02-01T11:00:00Z", "commit": "2" * 40, "changed": []}],
    }
    root = _report_dir(tmp_path, launches)
    page = tmp_path / "docs" / "screen.md"
    cfg = _report_cfg(screen=True, publish=str(page), parts=[], only_arms=[])
    write_study(root, cfg, _states())
    mark = "**Commits mixed in this table (`allow_dirty=true`):**"
    for text in (page.read_text(), (root / "study.md").read_text()):
        assert text.count(mark) == 1
        assert text.index(mark) < text.index("## Screening table")  # above the table


# -- study() itself refuses before anything is built or trained -------------------------------------
_TINY = [
    "warm_start.sft=false",
    "dataset=synth_small",
    "retriever=bm25",
    "rollout.policy.source=tiny",
]


def _study(out: Path, *extra: str):
    from framework.cli.app import run_app
    from framework.study.runner import study

    overrides = "overrides=[" + ",".join(f"'{a}'" for a in _TINY) + "]"
    argv = [f"out_dir={out}", overrides, "seeds=[0]", f"hydra.run.dir={out}/.hydra", *extra]
    return run_app("study", study, argv=argv)


@pytest.mark.slow
def test_study_refuses_a_dirty_tree_before_any_training(study_checkout, tmp_path, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("a refused study built or trained something")

    for name in ("run_train", "in_child", "content_basis", "evaluate_once"):
        monkeypatch.setattr(runner, name, never)
    popen = subprocess.Popen

    def git_only(cmd, *args, **kwargs):  # git answers; any other process (a train run) fails
        return popen(cmd, *args, **kwargs) if cmd[0] == "git" else never()

    monkeypatch.setattr(subprocess, "Popen", git_only)
    (study_checkout.path / "framework" / "code.py").write_text("x = 2\n")
    out = tmp_path / "study"
    with pytest.raises(SystemExit) as exc:
        _study(out, f"archive_to={tmp_path / 'kept'}")
    assert exc.value.code == 2
    assert not (out / "study_config.json").exists()  # refused before the config was even written
    assert not (tmp_path / "kept").exists()
    # allowed: it goes on (here to the end of a dry run, which checks and builds nothing)
    assert _study(out, f"archive_to={tmp_path / 'kept'}", "allow_dirty=true", "dry_run=true") == {}
    # a study that publishes nothing is not refused (its records still say the tree was dirty)
    assert _study(out, "dry_run=true") == {}
