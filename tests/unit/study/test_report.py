"""The study report's figures from hand-made evaluation directories."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from framework.study.archive import StudyArchive, archive_study
from framework.study.report import write_study
from framework.study.summary import summarize_study as summarize_archive


def summarize_study(root, arms, seeds, baseline, n_boot, min_effect=0.05):
    """Archive the study directory, then summarise from the archive (as write_study does)."""
    cfg = SimpleNamespace(
        name="t", arms={a: [] for a in arms}, seeds=list(seeds), baseline=baseline, eval={}
    )
    archive_study(root, cfg, [])
    archive = StudyArchive(root / "archive")
    return summarize_archive(archive, arms, seeds, baseline, n_boot, min_effect)


def _eval_dir(
    path: Path,
    correct: dict[str, list[bool]],
    tool_calls: int = 1,
    hops: dict[str, int] | None = None,
    answers: dict[str, str] | None = None,
) -> None:
    """An evaluation as seekrl-eval writes it: samples.jsonl and results.json (overall only)."""
    path.mkdir(parents=True)
    rows = [
        {
            "dataset": "synth/test",
            "question_id": q,
            "sample": i,
            "correct": c,
            "tool_calls": tool_calls,
            "turns": 2,
            "status": "ok",
            **({"hops": hops[q]} if hops else {}),
            **({"answer_key": answers[q]} if answers else {}),
        }
        for q, cs in correct.items()
        for i, c in enumerate(cs)
    ]
    (path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    n = sum(len(v) for v in correct.values())
    p1 = sum(sum(v) for v in correct.values()) / n
    overall = {
        "k": 2,
        "pass@1": p1,
        "pass@1_ci": [p1 - 0.1, p1 + 0.1],
        "pass@2": 0.5,
        "tool_calls": float(tool_calls),
        "turns": 2.0,
        "format_error_rate": 0.0,
        "entity": None,
    }
    (path / "results.json").write_text(
        json.dumps({"datasets": {"synth/test": {"overall": overall}}})
    )


@pytest.fixture
def study_dir(tmp_path):
    root = tmp_path / "study"
    qs = ["q1", "q2", "q3", "q4"]
    _eval_dir(root / "eval" / "start", {key: [False, False] for key in qs})
    # baseline: q1 right in both samples of seed 0, nothing in seed 1 -> per question 0.5, 0, 0, 0
    _eval_dir(
        root / "eval" / "base" / "seed0",
        {"q1": [True, True], **{key: [False, False] for key in qs[1:]}},
    )
    _eval_dir(root / "eval" / "base" / "seed1", {key: [False, False] for key in qs})
    # new arm: q1 and q2 always right in both seeds -> per question 1, 1, 0, 0; 2 tool calls
    new = {"q1": [True, True], "q2": [True, True], "q3": [False, False], "q4": [False, False]}
    _eval_dir(root / "eval" / "new" / "seed0", new, tool_calls=2)
    _eval_dir(root / "eval" / "new" / "seed1", new, tool_calls=2)
    return root


def test_pooled_pass1_and_paired_differences(study_dir):
    s = summarize_study(study_dir, ["base", "new"], [0, 1], "base", n_boot=2000)
    assert s["arms"]["base"]["pass@1"] == pytest.approx(0.125)  # (0.5 + 0 + 0 + 0) / 4
    assert s["arms"]["new"]["pass@1"] == pytest.approx(0.5)
    d = s["versus_baseline"]["new"]["Pass@1"]
    assert d["diff"] == pytest.approx(0.375)  # (0.5 + 1 + 0 + 0) / 4
    assert d["questions"] == 4 and d["ci"][0] <= 0.375 <= d["ci"][1]
    assert s["versus_baseline"]["new"]["tool calls"]["diff"] == pytest.approx(1.0)
    assert s["versus_start"]["new"]["Pass@1"]["diff"] == pytest.approx(0.5)
    assert s["start"]["pass@1"] == 0.0
    assert set(s["arms"]["new"]["per_seed"]) == {0, 1}
    assert s["by_hops"] == {}  # the rows carry no hop counts
    assert d["sd"] == pytest.approx(math.sqrt(0.6875 / 3))
    assert d["detectable"] == pytest.approx(2.801585 * math.sqrt(0.6875 / 3) / 2, rel=1e-6)


def test_seed_resampled_comparisons_and_per_seed_gains(study_dir):
    s = summarize_study(study_dir, ["base", "new"], [0, 1], "base", n_boot=4000)
    # each seed of `new` is right on q1 and q2: 0.5 over the warm start's 0, seed by seed
    for seed in (0, 1):
        assert s["arms"]["new"]["per_seed"][seed]["minus_start"]["diff"] == pytest.approx(0.5)
    assert s["arms"]["base"]["per_seed"][1]["minus_start"]["diff"] == 0.0
    # base minus the start, q1 only: base's seeds score q1 1 and 0. Seeds fixed, q1 pools to 0.5
    # and the resampled difference is 0.5 * c / 4 with c ~ Binomial(4, 1/4) draws of q1: upper
    # end 0.375 (P(c >= 3) = 0.051), p = 2 * P(c = 0) = 2 * 0.316. Seeds drawn too, q1 is w in
    # {0, 0.5, 1} (probabilities 1/4, 1/2, 1/4) and the difference w * c / 4: upper end 0.5
    # (P(w = 1, c >= 3) = 0.013 < 0.025 < P(>= 0.5) = 0.067), p = 2 * (1/4 + 3/4 * 0.316) = 0.975
    fixed, seeds = s["versus_start"]["base"]["Pass@1"], s["versus_start_seeds"]["base"]["Pass@1"]
    assert fixed["diff"] == seeds["diff"] == pytest.approx(0.125)
    assert fixed["ci"] == pytest.approx([0.0, 0.375]) and seeds["ci"] == pytest.approx([0.0, 0.5])
    assert fixed["p_value"] == pytest.approx(0.633, abs=0.04)
    assert seeds["p_value"] == pytest.approx(0.975, abs=0.04)
    # new's two seeds are identical, base's differ: the comparison with the baseline resamples both
    assert s["versus_baseline_seeds"]["new"]["Pass@1"]["diff"] == pytest.approx(0.375)
    assert set(s["versus_start_seeds"]) == {"base", "new"}


def test_one_seed_per_arm_adds_no_seed_resampled_tables(tmp_path):
    root = tmp_path / "study"
    qs = {"q1": [True, False], "q2": [False, False]}
    for d in ("start", "a/seed0", "b/seed0"):
        _eval_dir(root / "eval" / d, qs)
    s = summarize_study(root, ["a", "b"], [0], "a", n_boot=200)
    assert s["versus_baseline_seeds"] == {} and s["versus_start_seeds"] == {}


def test_pass1_by_hops_is_paired_within_each_hop_count(tmp_path):
    root = tmp_path / "study"
    hops = {"q1": 1, "q2": 1, "q3": 2, "q4": 2}
    start = {"q1": [True, False], "q2": [False, False], "q3": [False, False], "q4": [True, True]}
    _eval_dir(root / "eval" / "start", start, hops=hops)
    # seed 0: q1, q2 always right, q4 wrong; seed 1: q2 right once -> pooled per question
    # q1 (1 + 0) / 2 = 0.5, q2 (1 + 0.5) / 2 = 0.75, q3 0, q4 0
    _eval_dir(
        root / "eval" / "arm" / "seed0",
        {"q1": [True, True], "q2": [True, True], "q3": [False, False], "q4": [False, False]},
        hops=hops,
    )
    _eval_dir(
        root / "eval" / "arm" / "seed1",
        {"q1": [False, False], "q2": [True, False], "q3": [False, False], "q4": [False, False]},
        hops=hops,
    )
    s = summarize_study(root, ["arm"], [0, 1], "arm", n_boot=2000)
    one, two = s["by_hops"]["arm"]["1"], s["by_hops"]["arm"]["2"]
    assert one["questions"] == 2 and two["questions"] == 2
    assert one["a_mean"] == pytest.approx(0.25)  # start: q1 0.5, q2 0
    assert one["b_mean"] == pytest.approx(0.625)  # (0.5 + 0.75) / 2
    assert one["diff"] == pytest.approx(0.375)
    assert two["a_mean"] == pytest.approx(0.5) and two["diff"] == pytest.approx(-0.5)


def test_a_hop_count_with_one_question_is_left_out(tmp_path):
    root = tmp_path / "study"
    hops = {"q1": 1, "q2": 1, "q3": 2}
    correct = {"q1": [True, False], "q2": [False, False], "q3": [True, True]}
    _eval_dir(root / "eval" / "start", correct, hops=hops)
    _eval_dir(root / "eval" / "arm" / "seed0", correct, hops=hops)
    s = summarize_study(root, ["arm"], [0], "arm", n_boot=200)
    assert list(s["by_hops"]["arm"]) == ["1"]
    assert s["by_hops"]["arm"]["1"]["diff"] == 0.0


def test_the_archive_keeps_each_runs_step_seconds_and_curves(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    run = tmp_path / "runs" / "a" / "seed0"
    writer = SummaryWriter(log_dir=str(run / "tensorboard"))
    for step, seconds in [(1, 100.0), (2, 150.5), (3, 49.5)]:
        writer.add_scalar("train/step", float(step), step)
        writer.add_scalar("timing/step", seconds, step)
        writer.add_scalar("rollout/reward", step / 10, step)
    writer.close()
    cfg = SimpleNamespace(name="t", arms={"a": []}, seeds=[0, 1], baseline="a", eval={})
    states = [SimpleNamespace(arm="a", seed=s, status="done", seconds=9.0) for s in (0, 1)]
    archive = StudyArchive(archive_study(tmp_path, cfg, states))
    assert archive.run("a", 0)["train_seconds"] == pytest.approx(300.0)
    assert archive.run("a", 1)["train_seconds"] is None  # no TensorBoard directory
    curves = archive.curves("a", 0)
    assert list(curves) == ["rollout/reward"]  # only the curves the report draws
    assert [x for x, _ in curves["rollout/reward"]] == [1, 2, 3]
    assert [y for _, y in curves["rollout/reward"]] == pytest.approx([0.1, 0.2, 0.3])
    assert archive.config()["arms"] == {"a": []}


def _two_arm_cfg() -> SimpleNamespace:
    """The study config of the ``study_dir`` fixture: arms base and new, seeds 0 and 1."""
    return SimpleNamespace(
        name="t",
        arms={"base": ["algorithm=grpo"], "new": ["algorithm=e_grpo"]},
        seeds=[0, 1],
        baseline="base",
        bootstrap=500,
        min_effect=0.05,
        overrides=[],
        eval=SimpleNamespace(questions=4, split="test", samples_per_question=2, seed=0),
    )


def test_write_study_lists_failed_runs(study_dir):
    cfg = _two_arm_cfg()
    states = [
        SimpleNamespace(arm="base", seed=0, status="done", seconds=1.0),
        SimpleNamespace(arm="new", seed=2, status="failed", seconds=0.0),
    ]
    write_study(study_dir, cfg, states)
    md = (study_dir / "study.md").read_text()
    assert "Each arm minus `base`" in md and "Failed runs" in md and "new seed 2" in md
    assert "by hop count" not in md  # no hop counts in these rows
    # new - base per question: 0.5, 1, 0, 0 -> mean 0.375, SD sqrt(0.6875 / 3) = 0.4787;
    # detectable 2.8016 * 0.4787 / 2 = 0.671; (2.8016 * 0.4787 / 0.375) ** 2 = 12.8 -> 13
    assert "- new: per-question differences have SD 0.479 over 4 questions" in md
    assert "difference of 0.671 either way" in md and "would need about 13 questions" in md
    # new - start: 1, 1, 0, 0 -> SD sqrt(1 / 3) = 0.577; (2.8016 * 0.577 / 0.5) ** 2 = 10.5 -> 11
    assert "would need about 11 questions" in md
    assert json.loads((study_dir / "study.json").read_text())["arms"]["new"]["pass@1"] == 0.5


def test_report_only_writes_the_report_so_far_and_names_what_is_missing(study_dir, capsys):
    from framework.study.runner import study
    from framework.study.schema import StudyConfig, StudyEvalConfig

    # seed 2 of `new` was interrupted after a checkpoint; seed 2 of `base` never started
    ckpts = study_dir / "runs" / "new" / "seed2" / "checkpoints"
    ckpts.mkdir(parents=True)
    (ckpts / "step-000003.ckpt").write_bytes(b"")
    cfg = StudyConfig(
        name="t",
        out_dir=str(study_dir),
        arms={"base": ["algorithm=grpo"], "new": ["algorithm=e_grpo"]},
        baseline="base",
        seeds=[0, 1, 2],
        bootstrap=500,
        eval=StudyEvalConfig(questions=4, samples_per_question=2),
        report_only=True,
    )
    s = study(cfg)
    assert s["arms"]["new"]["seeds"] == [0, 1] and s["arms"]["base"]["seeds"] == [0, 1]
    assert [r["status"] for r in s["runs"]] == ["pending"] * 5 + ["unfinished"]
    md = (study_dir / "study.md").read_text()
    assert "**Partial report:** 2 of 6 runs not evaluated yet" in md
    assert "base seed 2 (pending), new seed 2 (unfinished)" in md
    assert not (study_dir / "study_config.json").exists()  # it wrote only the report
    assert "the report so far" in capsys.readouterr().out


def test_a_complete_report_is_not_called_partial(study_dir):
    cfg = _two_arm_cfg()
    write_study(study_dir, cfg, [])
    md = (study_dir / "study.md").read_text()
    assert "Partial report" not in md
    # two seeds per arm: the seed-resampled table, with a row per arm against the start and one
    # against the baseline; each seed's own gain over the start in the per-seed table
    assert "## Resampling seeds too" in md
    assert (
        "| new | `base` | +0.375 [" in md
        and "| base | the warm start | +0.125 [0.000, 0.500]" in md
    )
    # per seed: q1, q2 right, q3, q4 wrong: 0.5 +- 1.96 * 0.577 / 2, clipped to [0, 1]
    assert "| new | 0 | 0.500 [0.000, 1.000] | +0.500 [" in md


def test_report_only_without_evaluations_is_a_clear_error(tmp_path, capsys):
    from framework.study.runner import study
    from framework.study.schema import StudyConfig

    cfg = StudyConfig(arms={"a": ["algorithm=grpo"]}, baseline="a", out_dir=str(tmp_path))
    cfg.report_only = True
    with pytest.raises(SystemExit) as e:
        study(cfg)
    assert e.value.code == 2
    assert "[report_only] got no evaluated run" in capsys.readouterr().err


def test_dry_run_and_report_only_together_are_rejected():
    from framework.study.schema import StudyConfig

    cfg = StudyConfig(arms={"a": ["x=1"]}, baseline="a", dry_run=True, report_only=True)
    assert any(p.path == "report_only" for p in cfg.problems())


def test_answer_clusters_widen_the_interval_and_power_is_reported(tmp_path):
    # 6 questions, two answers: the new arm gets every question about answer X right (3 of them)
    # and none about Y. Resampling questions, P(no X question drawn) = 2^-6; resampling the two
    # answer clusters, P(only Y drawn) = 1/4, so the clustered p-value is 2 * 1/4 = 0.5
    root = tmp_path / "study"
    qs = [f"q{i}" for i in range(6)]
    answers = {q: ("X" if i < 3 else "Y") for i, q in enumerate(qs)}
    _eval_dir(root / "eval" / "start", {q: [False, False] for q in qs}, answers=answers)
    _eval_dir(
        root / "eval" / "a" / "seed0",
        {q: [answers[q] == "X"] * 2 for q in qs},
        answers=answers,
    )
    s = summarize_study(root, ["a"], [0], "a", n_boot=4000, min_effect=0.2)
    three = s["pass1_three_ways"]["a - start"]
    q, c = three["questions"], three["answer_clusters"]
    assert q["diff"] == c["diff"] == pytest.approx(0.5)
    assert q["p_value"] == pytest.approx(2 / 64, abs=0.015)
    assert c["p_value"] == pytest.approx(0.5, abs=0.04)
    assert c["ci"] == pytest.approx([0.0, 1.0])
    assert c["se"] > q["se"] and c["detectable"] > q["detectable"]
    assert 0 < c["power_at_min_effect"] < q["power_at_min_effect"] < 1
    assert "seeds" not in three  # one seed each


def _report_only_cfg(study_dir):
    """``report_only=true`` over the ``study_dir`` fixture, as the command line would build it."""
    from framework.study.schema import StudyConfig, StudyEvalConfig

    return StudyConfig(
        name="t",
        out_dir=str(study_dir),
        arms={"base": ["algorithm=grpo"], "new": ["algorithm=e_grpo"]},
        baseline="base",
        seeds=[0, 1],
        bootstrap=500,
        eval=StudyEvalConfig(questions=4, samples_per_question=2),
        report_only=True,
    )


def test_a_committed_archive_regenerates_the_report_exactly(study_dir, tmp_path, capsys):
    import shutil

    from framework.study.runner import study
    from framework.study.schema import StudyConfig

    cfg = _report_only_cfg(study_dir)
    first = study(cfg)
    published = tmp_path / "published"
    shutil.copytree(study_dir / "archive", published / "archive")  # what gets committed
    # reported from the archive alone, with other presets on the command line: the archive's
    # own study config is used
    again = study(
        StudyConfig(arms={"x": []}, baseline="x", out_dir=str(published), report_only=True)
    )
    assert "reporting from the archive" in capsys.readouterr().out
    for name in ("study.md", "study.json"):
        assert (published / name).read_text() == (study_dir / name).read_text()
    # a headline interval recomputed by hand from the archived records
    from framework.eval.paired import paired_bootstrap, pooled_per_question, question_means

    archive = StudyArchive(published / "archive")
    base = pooled_per_question([question_means(archive.records("base", s)) for s in (0, 1)])
    new = pooled_per_question([question_means(archive.records("new", s)) for s in (0, 1)])
    r = paired_bootstrap(base, new, n_boot=500)
    assert again["versus_baseline"]["new"]["Pass@1"]["ci"] == [r.low, r.high]
    assert first["versus_baseline"]["new"]["Pass@1"]["ci"] == [r.low, r.high]


def test_a_seed_subset_is_reported_beside_the_study_and_regenerates(study_dir, tmp_path, capsys):
    import shutil

    from framework.study.runner import study
    from framework.study.schema import StudyConfig

    cfg = _report_only_cfg(study_dir)
    main = study(cfg)
    main_md = (study_dir / "study.md").read_text()
    study(replace(cfg, only_seeds=[1]))
    assert (study_dir / "study.md").read_text() == main_md  # the study's own report is untouched
    sub = json.loads((study_dir / "study_seeds_1.json").read_text())
    # seed 1 alone: base never right, new right on q1 and q2 -> +0.5 (both seeds: +0.375)
    assert sub["versus_baseline"]["new"]["Pass@1"]["diff"] == pytest.approx(0.5)
    assert main["versus_baseline"]["new"]["Pass@1"]["diff"] == pytest.approx(0.375)
    assert set(sub["arms"]["new"]["per_seed"]) == {"1"}
    md = (study_dir / "study_seeds_1.md").read_text()
    assert "(seeds [1] only)" in md and "decides nothing" in md and "only_seeds=[1]" in md
    # from the committed archive alone, the same subset page
    published = tmp_path / "published"
    shutil.copytree(study_dir / "archive", published / "archive")
    study(
        StudyConfig(
            arms={"x": []}, baseline="x", out_dir=str(published), report_only=True, only_seeds=[1]
        )
    )
    for name in ("study_seeds_1.md", "study_seeds_1.json"):
        assert (published / name).read_text() == (study_dir / name).read_text()
    capsys.readouterr()
    with pytest.raises(SystemExit):
        study(replace(cfg, only_seeds=[7]))
    assert "[only_seeds] got [7]; expected some of the study's seeds [0, 1]" in (
        capsys.readouterr().err
    )
    assert StudyConfig(arms={"x": []}, baseline="x", only_seeds=[1]).problems()


def test_test_split_evaluations_are_counted_and_printed(study_dir):
    from framework.study.runs import count_test_evaluation

    count_test_evaluation(study_dir, "start")
    assert count_test_evaluation(study_dir, "start") == {"start": 2}
    write_study(study_dir, _two_arm_cfg(), [])
    md = (study_dir / "study.md").read_text()
    assert "Test-split evaluations (each counted when it finished): start 2." in md
    assert "## Pass@1 differences three ways" in md and "## Sizing the next evaluation" in md


def test_report_only_with_only_the_warm_start_evaluated(tmp_path, capsys):
    from framework.study.runner import study
    from framework.study.schema import StudyConfig, StudyEvalConfig

    root = tmp_path / "study"
    _eval_dir(root / "eval" / "start", {"q1": [True, False], "q2": [False, False]})
    cfg = StudyConfig(
        name="t",
        out_dir=str(root),
        arms={"grpo": ["algorithm=grpo"]},
        baseline="grpo",
        seeds=[0],
        bootstrap=200,
        eval=StudyEvalConfig(questions=2, samples_per_question=2),
        report_only=True,
    )
    s = study(cfg)
    assert s["start"]["pass@1"] == pytest.approx(0.25) and s["arms"] == {}
    md = (root / "study.md").read_text()
    assert "**Partial report:** 1 of 1 runs not evaluated yet" in md
    assert "| warm start | - | 2 | 0.250 [" in md
    assert (root / "archive" / "eval" / "start.jsonl.gz").is_file()


def test_the_decision_rule():
    from framework.study.render import _decision_lines, verdict

    assert verdict("e_grpo - grpo", {"ci": [0.01, 0.09]}) == "e_grpo beats grpo"
    assert verdict("e_grpo - grpo", {"ci": [-0.09, -0.001]}) == "grpo beats e_grpo"
    assert verdict("grpo - start", {"ci": [-0.01, 0.05]}) == "no difference shown"
    d = {
        "diff": 0.05,
        "ci": [0.02, 0.08],
        "p_value": 0.01,
        "excludes_zero": True,
        "power_at_min_effect": 0.9,
    }
    one_seed = {"questions": dict(d, ci=[-0.01, 0.11], excludes_zero=False)}
    lines = _decision_lines(
        {
            "min_effect": 0.05,
            "pass1_three_ways": {"b - a": {**one_seed, "seeds": d}, "c - a": one_seed},
        }
    )
    # the seed bootstrap decides where there is one, the question bootstrap otherwise
    assert lines[-2].startswith("| b - a | seeds | +0.050 [0.020, 0.080]") and lines[-2].endswith(
        "| 0.90 | b beats a |"
    )
    assert lines[-1].startswith("| c - a | questions |") and "no difference shown" in lines[-1]


def test_an_evaluation_counts_its_format_errors_and_its_samples_lost_to_the_budget(tmp_path):
    """Of 4 samples of one question, one broke the format and two ran out of budget: the
    records read back from the archive give shares 1/4 and 2/4, and Pass@1 counts only the
    answered sample that was right (1/4)."""
    from framework.eval.records import write_records
    from framework.study.summary import overall

    statuses = ["ok", "format_error", "over_budget", "over_budget"]
    rows = [
        {"dataset": "synth/validation", "question_id": "q", "sample": i, "correct": i == 0,
         "tool_calls": 1, "turns": 2, "status": status}
        for i, status in enumerate(statuses)
    ]  # fmt: skip
    write_records(tmp_path / "eval" / "a" / "seed0.jsonl.gz", rows)
    o = overall(StudyArchive(tmp_path).records("a", 0))
    assert o["format_error_rate"] == 0.25 and o["over_budget_rate"] == 0.5
    assert o["pass@1"] == 0.25
