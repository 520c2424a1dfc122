"""seekrl-study end to end on the tiny policy: arms x seeds, evaluations, report, resume, crashes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TRAIN = [
    "warm_start.sft=false",
    "dataset=synth_small",
    "retriever=bm25",
    "rollout.policy.source=tiny",
    "trainer.max_steps=2",
    "trainer.checkpoint_every_n_steps=1",
    "trainer.val_at_end=false",
    "sampler.questions_per_step=2",
    "sampler.group_size=2",
    "agent.max_turns=1",
    "agent.max_new_tokens_per_turn=8",
    "optim.micro_batch_size=4",
    "optim.lr=1e-3",
    "logging.dump_trajectories=true",  # the archive reads them (the entity-rate histogram)
]


@pytest.fixture(autouse=True)
def _clean_checkout(study_checkout):
    """Every study below takes a clean git checkout for the code's (tests/conftest.py), whatever
    the state of the real one: a publishable study (archive_to, the test split) refuses an
    uncommitted tree."""
    return study_checkout


def study_in_process(out: Path, *overrides: str, train: list[str] = TRAIN):
    from framework.cli.app import run_app
    from framework.study.runner import study

    args = [
        f"out_dir={out}",
        "name=tiny",
        "overrides=[" + ",".join(f"'{a}'" for a in train) + "]",
        "eval.questions=4",
        "eval.samples_per_question=2",
        "eval.batch_questions=4",
        "bootstrap=200",
        *overrides,
        f"hydra.run.dir={out}/.hydra_run",
    ]
    return run_app("study", study, argv=args)


@pytest.mark.slow  # several tiny train and eval runs: about 25 s
def test_study_runs_arms_evaluates_reports_and_resumes(tmp_path, capsys):
    out = tmp_path / "study"
    result = study_in_process(out, "seeds=[0]")
    for arm in ("grpo", "e_grpo"):
        run = out / "runs" / arm / "seed0"
        assert (run / "policy" / "config.json").is_file()
        # trained and evaluated: its checkpoints are deleted (prune_checkpoints), its policy kept
        assert not list((run / "checkpoints").glob("*.ckpt"))
        versions = json.loads((run / "versions.json").read_text())
        assert versions["precision"] in ("32-true", "bf16-mixed") and "cpu" in versions
        assert (out / "eval" / arm / "seed0" / "samples.jsonl").is_file()
    assert (out / "eval" / "start" / "results.json").is_file()
    assert set(result["arms"]) == {"grpo", "e_grpo"}
    assert set(result["versus_baseline"]) == {"e_grpo"}
    assert set(result["versus_start"]) == {"grpo", "e_grpo"}
    d = result["versus_baseline"]["e_grpo"]["Pass@1"]
    assert d["questions"] == 4 and d["ci"][0] <= d["diff"] <= d["ci"][1]
    md = (out / "study.md").read_text()
    assert "Each arm minus `grpo`" in md and "Entity analysis on the hidden bridge" in md
    assert (out / "curves" / "rollout_reward.png").is_file()
    status = json.loads((out / "status.json").read_text())
    assert [s["status"] for s in status] == ["done", "done"]
    # every evaluation's records, archived with the runs' curves; the archive alone regenerates
    # the report exactly (what a committed study under docs/benchmarks does)
    for d in ("start", "grpo/seed0", "e_grpo/seed0"):
        assert (out / "eval" / d / "records.jsonl.gz").is_file()
    arc = out / "archive"
    assert (arc / "eval" / "start.jsonl.gz").is_file()
    assert (arc / "eval" / "e_grpo" / "seed0.jsonl.gz").is_file()
    record = json.loads((arc / "training" / "e_grpo" / "seed0.json").read_text())
    assert record["curves"]
    # the entity rate of the wrong training rollouts, from the run's saved trajectories
    hist = record["wrong_entity_rates"]
    assert hist["rule"] == "the run's reward" and hist["steps"] >= 1
    assert hist["zero"] + sum(hist["interior"]) + hist["full"] == hist["n"]
    import shutil

    published = tmp_path / "published"
    shutil.copytree(arc, published / "archive")
    study_in_process(published, "report_only=true")
    for name in ("study.md", "study.json"):
        assert (published / name).read_text() == (out / name).read_text()
    assert "Test-split evaluations: none" in md  # the default split is validation
    log = (out / "runs" / "grpo" / "seed0" / "train.log").read_text()
    assert "[rl] step 2/2" in log and "seekrl: precision" in log  # plain progress in the log

    # the same command again: nothing is retrained or re-evaluated
    mtime = (out / "eval" / "grpo" / "seed0" / "results.json").stat().st_mtime
    logs = (out / "runs" / "grpo" / "seed0" / "train.log").read_text()
    capsys.readouterr()
    study_in_process(out, "seeds=[0]")
    assert "seekrl-study: of 2 run(s), 2 finished\n" in capsys.readouterr().out
    assert (out / "eval" / "grpo" / "seed0" / "results.json").stat().st_mtime == mtime
    assert (out / "runs" / "grpo" / "seed0" / "train.log").read_text() == logs

    # an edited setting: the finished runs are no longer their arms' runs, and are not reused
    with pytest.raises(SystemExit) as exc:
        study_in_process(out, "seeds=[0]", train=[*TRAIN, "optim.lr=2e-3"])
    assert exc.value.code == 2
    assert (out / "runs" / "grpo" / "seed0" / "train.log").read_text() == logs


@pytest.mark.slow  # several tiny train and eval runs: about 25 s
def test_a_crashed_run_is_reported_and_the_others_go_on(tmp_path):
    out = tmp_path / "study"
    # study=learn_cpu has one arm (grpo); '+arms.<label>=[...]' adds one
    broken = "+arms.broken=['algorithm=grpo','loss.clip_low=-1']"
    result = study_in_process(out, "study=learn_cpu", "seeds=[0]", broken)
    status = {s["arm"]: s for s in json.loads((out / "status.json").read_text())}
    assert status["grpo"]["status"] == "done"
    assert status["broken"]["status"] == "failed"
    assert "clip_low" in (out / "runs" / "broken" / "seed0" / "study_error.txt").read_text()
    assert set(result["arms"]) == {"grpo"}
    assert "Failed runs" in (out / "study.md").read_text()


@pytest.mark.slow  # one tiny train and two evaluations: about 15 s
def test_a_test_split_study_needs_a_preregistration_and_counts_its_evaluations(
    tmp_path, capsys, study_checkout
):
    out = tmp_path / "study"
    one_arm = ["study=learn_cpu", "seeds=[0]", "eval.split=test"]  # learn_cpu: one arm, grpo
    with pytest.raises(SystemExit) as exc:  # refused before anything runs
        study_in_process(out, *one_arm)
    assert exc.value.code == 2
    assert "[preregistration]" in capsys.readouterr().err
    assert not (out / "eval").exists()
    doc = study_checkout.path / "prereg.md"
    doc.write_text("## Pre-registration: tiny\n")
    with pytest.raises(SystemExit):  # not committed yet: it does not precede the study
        study_in_process(out, *one_arm, f"preregistration='{doc}#tiny'")
    assert "whose file is not committed as it is" in capsys.readouterr().err
    registered = study_checkout.commit("pre-register tiny")
    study_in_process(out, *one_arm, f"preregistration='{doc}#tiny'")
    assert json.loads((out / "test_evaluations.json").read_text()) == {
        "grpo/seed0": 1,
        "start": 1,
    }
    md = (out / "study.md").read_text()
    assert "Test-split evaluations (each counted when it finished): grpo/seed0 1, start 1." in md
    assert json.loads((out / "preregistration.json").read_text())["preregistration"].endswith(
        "#tiny"
    )
    # committed before the first run began training, and an ancestor of its commit: said so
    assert f"Pre-registration: `{doc}#tiny` (sha256 " in md
    assert f"committed in `{registered[:12]}` at " in md
    assert "precedes the first run (`grpo` seed 0, training from " in md
    with pytest.raises(SystemExit):  # frozen: another design is another study
        study_in_process(
            out, *one_arm[:-2], "seeds=[0,1]", "eval.split=test", f"preregistration='{doc}#tiny'"
        )


@pytest.mark.slow  # two tiny train runs and their evaluations, then one more: about 30 s
def test_a_study_resumes_from_its_kept_archive_on_a_machine_without_its_runs(tmp_path, capsys):
    """archive_to: what a committed archive holds is not made again where out_dir is empty (a new
    checkout with an empty cache), and the report comes out the same."""
    kept = tmp_path / "docs" / "archive"
    first = study_in_process(tmp_path / "first", "seeds=[0]", f"archive_to={kept}")
    for rel in ("eval/start.jsonl.gz", "eval/e_grpo/seed0.jsonl.gz", "training/grpo/seed0.json"):
        assert (kept / rel).is_file()
    basis = json.loads((kept / "basis.json").read_text())
    assert {"data", "warm_start", "questions_sha256", "warm_start_sha256"} <= basis.keys()
    record = json.loads((kept / "training" / "grpo" / "seed0.json").read_text())
    assert record["config"]
    # when it trained and was evaluated, on which commit, from which questions
    prov = record["provenance"]
    assert prov["train_started"] <= prov["train_ended"] <= prov["evaluated"]
    assert prov["train_started"].endswith("Z") and prov["launches"][0]["changed"] == []
    assert prov["data_key"] == {
        "data": basis["data"],
        "questions_sha256": basis["questions_sha256"],
    }

    capsys.readouterr()
    again = study_in_process(tmp_path / "second", "seeds=[0]", f"archive_to={kept}")
    out = capsys.readouterr().out
    assert "3 evaluation(s) restored" in out and "training grpo" not in out
    assert "seekrl-study: of 2 run(s), 2 archived\n" in out
    assert not (tmp_path / "second" / "runs").exists()  # nothing trained
    assert not (tmp_path / "second" / "eval").exists()  # nothing evaluated
    assert again["versus_baseline"] == first["versus_baseline"]
    assert again["versus_start"] == first["versus_start"]

    # the kept archive lacks one run (say the session ended first): only that one is made
    import shutil

    shutil.rmtree(kept / "eval" / "e_grpo")
    capsys.readouterr()
    study_in_process(tmp_path / "third", "seeds=[0]", f"archive_to={kept}")
    assert "seekrl-study: of 2 run(s), 1 archived, 1 to run\n" in capsys.readouterr().out
    assert not (tmp_path / "third" / "runs" / "grpo").exists()
    assert (tmp_path / "third" / "runs" / "e_grpo" / "seed0" / "summary.json").is_file()
    assert (kept / "eval" / "e_grpo" / "seed0.jsonl.gz").is_file()  # and kept again

    # another basis (here: other questions) is refused rather than mixed in
    with pytest.raises(SystemExit) as exc:
        study_in_process(
            tmp_path / "fourth",
            "seeds=[0]",
            f"archive_to={kept}",
            train=[*TRAIN, "dataset.seed=7"],
        )
    assert exc.value.code == 2
    assert "[archive_to] got" in capsys.readouterr().err


@pytest.mark.slow  # two tiny train runs and their evaluations: about 30 s
def test_a_publishable_study_goes_on_only_from_a_committed_tree(
    tmp_path, capsys, monkeypatch, study_checkout
):
    """Refused before anything is built, and again before each run; allow_dirty=true goes on and
    the report marks the run made on the uncommitted tree."""
    from framework.study import runner as study_cli

    out, kept = tmp_path / "study", tmp_path / "kept"
    args = ("study=learn_cpu", "seeds=[0,1]", f"archive_to={kept}")  # learn_cpu: one arm, grpo
    code = study_checkout.path / "framework" / "code.py"
    code.write_text("x = 2\n")
    with pytest.raises(SystemExit) as exc:
        study_in_process(out, *args)
    assert exc.value.code == 2
    assert "[allow_dirty] got false, with 1 uncommitted change(s)" in capsys.readouterr().err
    assert not (out / "runs").exists() and not (out / "eval").exists() and not kept.exists()
    head = study_checkout.commit()

    # the code changes while the study runs: its next run is not launched on it
    train = study_cli.run_train

    def then_edit(*a, **k):
        state = train(*a, **k)
        code.write_text("x = 3\n")
        return state

    monkeypatch.setattr(study_cli, "run_train", then_edit)
    with pytest.raises(SystemExit) as exc:
        study_in_process(out, *args)
    assert exc.value.code == 2
    assert "M framework/code.py" in capsys.readouterr().err
    assert (out / "runs" / "grpo" / "seed0" / "summary.json").is_file()
    assert not (out / "runs" / "grpo" / "seed1").exists()

    monkeypatch.setattr(study_cli, "run_train", train)
    study_in_process(out, *args, "allow_dirty=true")
    assert "allow_dirty=true: going on" in capsys.readouterr().out
    md = (out / "study.md").read_text()
    assert (
        f"**Made on an uncommitted tree (`allow_dirty=true`):** `grpo` seed 1 (on `{head[:12]}`, "
        "1 uncommitted change: `M framework/code.py`)" in md
    )
    assert "Commits mixed" not in md  # one commit, two trees
    seed1 = json.loads((kept / "training" / "grpo" / "seed1.json").read_text())["provenance"]
    assert seed1["allow_dirty"] and seed1["launches"][0]["changed"] == ["M framework/code.py"]


@pytest.mark.slow  # six tiny one-step train runs, seven evaluations: about 2 min (3 on busy cores)
def test_a_screen_with_a_replicated_baseline_inert_arms_and_matched_compute(tmp_path, capsys):
    """study=screen_v2's machinery end to end on the tiny policy (issue 74): the baseline trained
    with seeds 0, 1, 2 (the noise band); DPPO (binary rewards, groups of 2) and CISPO (one
    on-policy step) found inert from their configs and not trained; LLDS's two epochs compared
    with the baseline at two epochs (grpo-epochs2); dynamic sampling's reserve rollouts
    unmatched; Holm and BH beside the raw p-values; the report regenerates from the archive
    alone. (The tiny policy never answers, so no run updates its weights: every evaluation is
    the baseline's, and LLDS's run is identical to it, no comparison.)"""
    out = tmp_path / "screen"
    keep = "only_arms=[llds,grpo-epochs2,sampler-dapo_dynamic,dppo,loss-cispo]"
    train = [*TRAIN, "trainer.max_steps=1"]
    result = study_in_process(out, "study=screen_v2", keep, train=train)
    log = capsys.readouterr().out
    assert "seekrl-study: 2 arm(s) inert at these settings, not trained" in log
    made = {"grpo": (0, 1, 2), "grpo-epochs2": (0,), "llds": (0,), "sampler-dapo_dynamic": (0,)}
    for arm, seeds in made.items():
        for seed in seeds:
            assert (out / "runs" / arm / f"seed{seed}" / "policy" / "config.json").is_file()
    assert not (out / "runs" / "dppo").exists() and not (out / "runs" / "loss-cispo").exists()
    rows = {r["arm"]: r for r in result["screen"]}
    assert "binary rewards in groups of 2" in rows["dppo"]["inert"]
    assert "importance ratio is exactly 1" in rows["loss-cispo"]["inert"]
    assert rows["dppo"]["pass@1"] is None and rows["dppo"]["verdict"].startswith(
        "inert at these settings, not trained (advantage=dppo:"
    )
    band = rows["grpo"]["noise_band"]
    assert band["seeds"] == [0, 1, 2] and len(band["pairs"]) == 3
    assert rows["grpo"]["seeds"] == [0, 1, 2] and rows["llds"]["seeds"] == [0]
    # compute per step: 2 questions x 2 rollouts; one optimiser step, two with two epochs
    assert rows["grpo"]["compute"]["rollouts"] == 4.0
    assert rows["grpo"]["compute"]["optimizer_steps"] == 1.0
    assert rows["grpo-epochs2"]["compute"]["optimizer_steps"] == 2.0
    assert rows["llds"]["compute"]["optimizer_steps"] == 2.0
    assert rows["llds"]["compared_with"] == "grpo-epochs2" and not rows["llds"]["unmatched"]
    assert rows["llds"]["identical_to_baseline"] and rows["llds"]["p_holm"] is None
    dynamic = rows["sampler-dapo_dynamic"]  # no group has a signal: the reserve is rolled out
    assert dynamic["compute"]["rollouts"] == 8.0 and "8.0 rollouts per step" in dynamic["unmatched"]
    assert dynamic["p_value"] is not None and dynamic["p_holm"] is not None
    assert rows["grpo-epochs2"]["reference"] and rows["grpo-epochs2"]["p_holm"] is None
    md = (out / "study.md").read_text()
    assert (
        "## Screening table (4 methods evaluated, 2 inert at these settings, baseline `grpo`)"
    ) in md
    assert "| p: raw, Holm, BH | within seed noise |" in md and "Noise band: the baseline" in md
    assert "vs `grpo-epochs2`" in md and "Inert at these settings: `dppo`, `loss-cispo`." in md
    assert "adjusted over the table's 1 comparison against the baseline" in md
    record = json.loads((out / "archive" / "training" / "grpo" / "seed2.json").read_text())
    assert record["compute"]["train/generated_rollouts"] == [[1, 4.0]]
    saved = json.loads((out / "archive" / "study_config.json").read_text())
    assert saved["baseline_seeds"] == [0, 1, 2]
    assert set(saved["inert_arms"]) == {"dppo", "loss-cispo"}

    import shutil

    published = tmp_path / "published"
    shutil.copytree(out / "archive", published / "archive")
    study_in_process(published, "report_only=true")
    for name in ("study.md", "study.json"):
        assert (published / name).read_text() == (out / name).read_text()
