"""The screening table (framework/eval/screen.py): its arms come from the registries, and its rows
from a study's archive."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from types import SimpleNamespace

import pytest
import torch

from framework.cli.app import load_config
from framework.config import ComponentConfig
from framework.eval.records import EvalRecord
from framework.registry import ADVANTAGES, load_components
from framework.study.archive import StudyArchive
from framework.study.arms import screen_arms
from framework.study.report import write_report, write_study
from framework.study.runs import STUDY_TRAIN_ARGS
from framework.study.screen import screen_rows, shared_fall
from framework.study.screen_render import screen_markdown
from framework.study.summary import summarize_study

from .test_report import _eval_dir, study_dir  # noqa: F401  (fixture)

load_components(plugins=False)


@dataclass
class ScreenProbeConfig(ComponentConfig):
    pass


@pytest.mark.slow
def test_every_bundle_and_every_unbundled_component_is_an_arm():
    arms = screen_arms("grpo")
    assert next(iter(arms)) == "grpo" and arms["grpo"] == ["algorithm=grpo"]
    assert arms["e_grpo"] == ["algorithm=e_grpo"] and arms["llds"] == ["algorithm=llds"]
    assert arms["advantage-rloo"] == ["algorithm=grpo", "advantage=rloo"]
    assert arms["loss-gspo"] == ["algorithm=grpo", "loss=gspo"]
    assert "sampler-vade" in arms
    # a component a bundle selects is screened through its bundle only
    assert "advantage-grpo" not in arms and "loss-ppo_clip" not in arms
    with pytest.raises(ValueError, match=r"\[baseline\] got 'nope'; expected an algorithm bundle"):
        screen_arms("nope")


@pytest.mark.slow
def test_every_arm_of_the_shipped_screen_composes_and_validates():
    # the arms run hours apart: an arm whose config cannot compose (a sampler without the shared
    # curriculum's fields, say) must fail here, not when the study reaches it
    study = load_config("study", ["study=screen"])
    arms = screen_arms(study.baseline, overrides=study.overrides)
    assert len(arms) > 30
    for arm, args in arms.items():
        cfg = load_config("train", [*study.overrides, *args, *STUDY_TRAIN_ARGS])
        assert cfg.sampler.start_hops == 2, arm  # every arm draws from the same stage


def test_a_component_registered_later_appears_without_editing_the_study():
    def probe(inputs, *, cfg):
        return torch.zeros(len(inputs.rewards))

    ADVANTAGES.add("screen_probe", probe, config=ScreenProbeConfig)
    try:
        arms = screen_arms("grpo")
        assert arms["advantage-screen_probe"] == ["algorithm=grpo", "advantage=screen_probe"]
    finally:
        ADVANTAGES.remove("screen_probe")


def _screen_cfg(**kw):
    """A screen's study config over the study_dir fixture's arms, ``kw`` replacing fields."""
    fields = dict(
        name="s",
        arms={"base": [], "new": []},
        seeds=[0, 1],
        baseline="base",
        bootstrap=500,
        min_effect=0.05,
        overrides=[],
        screen=True,
        publish="",
        eval=SimpleNamespace(questions=4, split="validation", samples_per_question=2, seed=0),
    )
    return SimpleNamespace(**{**fields, **kw})


def test_rows_from_the_archive(study_dir, tmp_path):  # noqa: F811
    run = study_dir / "runs" / "new" / "seed0"
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(run / "tensorboard"))
    for step in (1, 2):
        writer.add_scalar("timing/step", 30.0, step)
        writer.add_scalar("health/reward_collapse/alarm", float(step == 2), step)
        writer.add_scalar("health/entropy/alarm", 0.0, step)
    writer.close()
    (run / "summary.json").write_text(
        json.dumps({"stages": [{"name": "RL", "peak_gb": 6.4}, {"name": "x", "peak_gb": 2.0}]})
    )
    cfg = _screen_cfg(publish=str(tmp_path / "screen.md"))
    states = [SimpleNamespace(arm="new", seed=0, status="done", seconds=70.0)]
    write_study(study_dir, cfg, states)
    archive = StudyArchive(study_dir / "archive")
    summary = summarize_study(archive, ["base", "new"], [0, 1], "base", 500)
    rows = {r["arm"]: r for r in screen_rows(summary, archive, ["base", "new"], "base")}
    new = rows["new"]
    assert new["seconds_per_step"] == pytest.approx(30.0) and new["peak_gb"] == 6.4
    assert new["monitors_fired"] == ["reward_collapse"]
    assert new["machines"] == []  # the fixture's runs recorded no versions
    two = [{**new, "machines": ["cpu X"]}, {**rows["base"], "machines": ["cpu Y", "cpu X"]}]
    table = screen_markdown(cfg, two)
    assert "Machines (the CPU each run trained on" in table and "A = cpu X; B = cpu Y." in table
    assert "A part of the screen" not in table  # every method of the study ran here
    assert "| 30.0 | 6.4 | A |" in table and "| B, A |" in table
    # the training time in all and per machine: 2 steps x 30 s here, a made-up hour for the base
    assert new["train_seconds"] == pytest.approx(60.0)
    timed = [two[0], {**two[1], "train_seconds": 3600.0}]
    assert (
        "Training time: 1.0 h for the runs of 2 methods (A: 0.0 h; B, A: 1.0 h; every launch"
    ) in screen_markdown(cfg, timed)
    assert "Training time" not in screen_markdown(cfg, [{**two[1], "train_seconds": None}])
    # how often each monitor fired, and whether the baseline raised it too
    assert "Monitors fired: `reward_collapse` on 1 of 2 (not the baseline)." in table
    both = [two[0], {**two[1], "monitors_fired": ["entropy", "reward_collapse"]}]
    assert (
        "Monitors fired: `entropy` on 1 of 2 (the baseline among them); "
        "`reward_collapse` on 2 of 2 (the baseline among them)."
    ) in screen_markdown(cfg, both)
    assert "Monitors fired" not in screen_markdown(cfg, [{**two[1], "monitors_fired": []}])
    # a screen part way names the methods its table lacks yet; a whole one says nothing
    assert "Not evaluated yet" not in table
    assert (
        "Not evaluated yet (1 of 2 methods): `base`. `seekrl-study study=s` trains and evaluates "
        "them, skipping what is archived; until then the table is partial."
    ) in screen_markdown(cfg, [two[0]])
    # the questions the records hold, and the shares of samples with a format error and over
    # budget
    assert new["questions"] == 4 and new["format_errors"] == 0.0 and new["over_budget"] == 0.0
    assert "4 validation questions x 2 samples;" in table and "| 2.00 | 0.000 | 0.000 | " in table
    fewer = [
        {**two[0], "questions": 3, "format_errors": 72 / 392, "over_budget": 343 / 392},
        {**two[1], "questions": 3},
    ]
    table = screen_markdown(cfg, fewer)
    assert (
        "3 validation questions (the evaluated records; `eval.questions` asks for up to 4) "
        "x 2 samples;"
    ) in table
    assert "| 2.00 | 0.184 | 0.875 | " in table
    assert new["minus_baseline"]["diff"] == pytest.approx(0.375)
    assert new["detectable"] == new["minus_baseline"]["detectable"] > 0
    assert rows["base"]["detectable"] is None
    assert rows["base"]["verdict"] == "baseline" and rows["base"]["minus_baseline"] is None
    md = (tmp_path / "screen.md").read_text()
    assert "| `new` |  | 0.500" in md and "reward_collapse" in md
    # published with its records: the archive beside the page, and the report made from that copy
    records = tmp_path / "screen"
    assert f"records in `{records}/archive`" in md
    assert f"the training curves: `{records}/curves/`" in md
    assert (records / "archive" / "study_config.json").is_file()
    assert (records / "study.md").read_text() == (study_dir / "study.md").read_text()
    # reporting from the records folder rewrites the page only, and the same
    stamp = (records / "archive" / "study_config.json").stat().st_mtime_ns
    write_report(records, cfg)
    assert (tmp_path / "screen.md").read_text() == md
    assert (records / "archive" / "study_config.json").stat().st_mtime_ns == stamp
    assert "## Screening table (2 methods evaluated, baseline `base`)" in md
    assert "## Screening table" in (study_dir / "study.md").read_text()
    assert screen_markdown(cfg, list(rows.values())).count("\n| `") == 2


def test_a_screen_may_start_without_arms():
    from framework.cli.app import load_config

    cfg = load_config("study", ["study=screen"])
    assert cfg.screen and cfg.arms == {} and cfg.eval.split == "validation"


def test_an_arm_is_labelled_by_its_least_faithful_component():
    from framework.study.screen import arm_fidelity

    arena = {"section": "advantage", "name": "arena", "fidelity": "partial"}
    dppo = {"section": "advantage", "name": "dppo", "fidelity": "reconstructed"}
    sapo = {"section": "loss", "name": "sapo_search", "fidelity": "exact"}
    assert arm_fidelity([sapo, arena]) == "partial (arena)"
    assert arm_fidelity([arena, dppo, sapo]) == "RECONSTRUCTED (dppo)"
    assert arm_fidelity([sapo]) == "exact (sapo_search)"
    assert arm_fidelity([]) == ""


def test_a_run_records_the_papers_of_its_components(tmp_path):
    from framework.study.archive import run_methods

    (tmp_path / "config.yaml").write_text(
        "reward:\n  name: outcome\nadvantage:\n  name: dppo\nloss:\n  name: seeupo\n"
        "sampler:\n  name: uniform\n"
    )
    got = {m["name"]: m["fidelity"] for m in run_methods(tmp_path)}
    assert got == {"dppo": "reconstructed", "seeupo": "partial"}
    assert run_methods(tmp_path / "missing") == []


def test_a_published_archive_reported_elsewhere_leaves_the_page_alone():
    from dataclasses import replace

    from framework.study.archive import archived_config

    cfg = replace(load_config("study", ["study=screen"]), publish="")
    saved = {"publish": "docs/benchmarks/screen.md", "seeds": [1]}
    got = archived_config(saved, cfg)
    assert got.seeds == [1] and got.publish == ""  # the analysis is the archive's; the page is not


class _Archive:
    """An archive's reading side: each (arm, seed) run's record and its evaluation records."""

    def __init__(self, runs, records):
        self._runs, self._records = runs, records

    def run(self, arm, seed):
        return self._runs.get((arm, seed))

    def has_eval(self, arm, seed=None):
        return (arm, seed) in self._records

    def records(self, arm, seed=None):
        return self._records[(arm, seed)]


def test_a_method_whose_runs_are_the_baselines_exactly_is_marked_so():
    """DPPO's pruning never acts on binary GRPO advantages of groups of 4: its screen run was
    GRPO's to the bit, and "no difference shown" would have misread it."""
    from framework.study.screen import IDENTICAL, same_as_baseline

    curves = {"rollout/reward": [[1, 0.25], [2, 0.5]], "loss/entropy": [[1, 0.1], [2, 0.2]]}
    recs = [EvalRecord(dataset="d", question_id="q1", sample=0, correct=True, response_tokens=40)]
    other = {**curves, "loss/entropy": [[1, 0.1], [2, 0.21]]}  # one figure at one step
    runs = {(a, 0): {"curves": c, "steps": 2} for a, c in [("base", curves), ("same", curves)]}
    runs[("curve", 0)] = {"curves": other, "steps": 2, "peak_gb": 7.0, "config": {"resume": "r"}}
    runs[("sample", 0)] = {"curves": curves, "steps": 2}
    # resumed from a checkpoint that kept the earlier launches' peak: its peak covers them all
    runs[("same", 0)] |= {"config": {"resume": "r"}, "earlier_launches_peak_gb": 6.0}
    runs[("bare", 0)] = {"steps": 2}  # no curves recorded: nothing is assumed
    changed = [replace(recs[0], response_tokens=41)]
    archive = _Archive(
        runs,
        {(a, 0): changed if a == "sample" else recs for a in ("base", "same", "curve", "sample")}
        | {("bare", 0): recs},
    )
    assert same_as_baseline(archive, "same", "base", [0])
    assert not same_as_baseline(archive, "curve", "base", [0])
    assert not same_as_baseline(archive, "sample", "base", [0])
    assert not same_as_baseline(archive, "bare", "base", [0])
    assert not same_as_baseline(archive, "same", "base", [])

    arms = ["base", "same", "curve"]
    diff = {"diff": 0.0, "ci": [0.0, 0.0]}
    figures = {"seeds": [0], "pass@1": 1.0, "pass@1_ci": [1.0, 1.0], "tool_calls": 1.0}
    summary = {
        "arms": {a: figures for a in arms},
        "versus_baseline": {a: {"Pass@1": diff} for a in arms[1:]},
    }
    rows = {r["arm"]: r for r in screen_rows(summary, archive, arms, "base")}
    assert rows["same"]["verdict"] == IDENTICAL and rows["same"]["identical_to_baseline"]
    assert rows["curve"]["verdict"] == "no difference shown"
    assert not rows["base"]["identical_to_baseline"] and rows["base"]["verdict"] == "baseline"
    cfg = SimpleNamespace(
        baseline="base",
        eval=SimpleNamespace(questions=1, split="validation", samples_per_question=1),
    )
    table = screen_markdown(cfg, list(rows.values()))
    assert "Identical to the baseline: `same`. Every training curve" in table
    assert "Identical to the baseline" not in screen_markdown(cfg, [rows["base"], rows["curve"]])
    # a run resumed from a checkpoint: its peak is its last launch's, and the table says so
    assert rows["curve"]["peak_last_launch"] and not rows["same"]["peak_last_launch"]
    assert "| 7.0 (last launch) |" in table and "Peak GB (last launch): the run was" in table
    assert "(last launch)" not in screen_markdown(cfg, [rows["base"], rows["same"]])


def test_the_table_says_what_the_screen_can_detect_and_what_chance_alone_gives():
    """The median and range of the differences the comparisons find with 80% power, and the
    candidates expected by chance if no method differed: 4 comparisons x 2.5% = 0.1. An arm
    identical to the baseline, or without a figure, is no comparison."""
    cfg = SimpleNamespace(
        baseline="base",
        eval=SimpleNamespace(questions=1, split="validation", samples_per_question=1),
    )
    base = {
        "arm": "base", "seeds": [0], "pass@1": 0.1, "pass@1_ci": [0.0, 0.2], "minus_baseline": None,
        "detectable": None, "tool_calls": 1.0, "response_tokens": None, "seconds_per_step": None,
        "peak_gb": None, "monitors_fired": [], "stopped_by": [], "verdict": "baseline",
    }  # fmt: skip
    diff = {"diff": 0.0, "ci": [-0.1, 0.1]}

    def arm(name, detectable, **extra):
        return {**base, "arm": name, "minus_baseline": diff, "detectable": detectable, **extra}

    rows = [base, arm("a", 0.07), arm("b", 0.04), arm("c", 0.06), arm("d", 0.05)]
    rows += [arm("same", 0.0, identical_to_baseline=True), arm("nan", float("nan"))]
    table = screen_markdown(cfg, rows)
    assert (
        "when the true Pass@1 difference is 0.055 or more either way (the median of the "
        "4 comparisons; 0.040 to 0.070)"
    ) in table
    assert "chance alone would still put about 0.1 of the 4 intervals above 0 (2.5% each)" in table
    assert "(the median of the 1 comparison; 0.050 to 0.050)" in screen_markdown(
        cfg, [base, arm("d", 0.05)]
    )
    assert "What the screen can detect" not in screen_markdown(cfg, [base, rows[5], rows[6]])


def test_the_table_says_when_the_shared_questions_alone_trip_reward_collapse():
    """Three curves over steps 1-4 (worked by hand): A = .4 .6 .2 0, B = .6 .4 0 .2,
    C = .5 .5 .1 .1. Pearson r: A-B .12 / .2 = 0.6, A-C and B-C .16 / sqrt(.2 x .16) = 0.8944;
    mean 0.7963. Mean curve .5 .5 .1 .1; 2-step means .5 (steps 1-2), .3 (40% down), .1 (steps
    3-4, 80% down): a 50% rule trips at steps 3-4. An arm identical to the baseline is left
    out (its curve is the baseline's), and so is one without a curve."""

    def row(arm, values, **extra):
        return {"arm": arm, "accuracy_curve": [[i + 1, v] for i, v in enumerate(values)], **extra}

    a, b, c = [0.4, 0.6, 0.2, 0.0], [0.6, 0.4, 0.0, 0.2], [0.5, 0.5, 0.1, 0.1]
    rows = [row("a", a), row("b", b), row("c", c), row("same", a, identical_to_baseline=True)]
    rows.append({"arm": "none", "accuracy_curve": None})
    shared = shared_fall(rows, window=2, drop=0.5)
    assert shared["methods"] == 3
    assert shared["correlation"] == pytest.approx((0.6 + 2 * 0.16 / (0.2 * 0.16) ** 0.5) / 3)
    assert shared["mean"] == pytest.approx([0.5, 0.5, 0.1, 0.1])
    fall = shared["fall"]
    assert fall["best"][:2] == (1, 2) and fall["best"][2] == pytest.approx(0.5)
    assert fall["low"][:2] == (3, 4) and fall["low"][2] == pytest.approx(0.1)
    assert fall["drop"] == pytest.approx(0.8)
    assert shared_fall(rows, window=2, drop=0.9)["fall"] is None
    assert shared_fall(rows[:2], window=2, drop=0.5) is None  # two curves: nothing shared to say
    assert shared_fall(rows, window=5, drop=0.5) is None  # fewer steps than the window

    # under the table, with the monitor's own rule (4 steps, 50%), when reward_collapse fired
    cfg = SimpleNamespace(
        baseline="a", eval=SimpleNamespace(questions=1, split="validation", samples_per_question=1)
    )
    base = {
        "seeds": [0], "pass@1": 0.1, "pass@1_ci": [0.0, 0.2], "minus_baseline": None,
        "detectable": None, "tool_calls": 1.0, "response_tokens": None, "seconds_per_step": None,
        "peak_gb": None, "monitors_fired": ["reward_collapse"], "stopped_by": [], "verdict": "",
    }  # fmt: skip
    # mean curve .8 .8 .6 .4 .2 .2 .2 .2; 4-step means .65 (steps 1-4, the best), .5, .35 (46%
    # down), .25 (steps 4-7, 62% down: trips)
    falling = [[0.8, 0.8, 0.8, 0.8, 0.2, 0.2, 0.2, 0.2][i:] + [0.2] * i for i in range(3)]
    table = screen_markdown(cfg, [{**base, **row(f"m{i}", v)} for i, v in enumerate(falling)])
    assert "Training curves: the per-step training accuracy of two methods correlates" in table
    assert "from a 4-step mean of 0.65 (steps 1-4) to 0.25 (steps 4-7), 62% down" in table
    steady = [[0.3, 0.2, 0.3, 0.2, 0.3, 0.2], [0.2, 0.3, 0.2, 0.3, 0.2, 0.3], [0.3] * 5 + [0.2]]
    table = screen_markdown(cfg, [{**base, **row(f"m{i}", v)} for i, v in enumerate(steady)])
    assert "does not trip `reward_collapse`'s rule (50% below the best 4-step mean)" in table
    quiet = [{**base, **row(f"m{i}", v), "monitors_fired": []} for i, v in enumerate(falling)]
    assert "Training curves" not in screen_markdown(cfg, quiet)


def test_only_arms_keeps_those_methods_and_the_baseline(capsys):
    from dataclasses import replace

    from framework.study.arms import selected_arms

    cfg = load_config("study", ["study=screen"])
    cfg = replace(cfg, arms=screen_arms(cfg.baseline, overrides=cfg.overrides))
    kept = selected_arms(replace(cfg, only_arms=["sampler-vade", "e_grpo"]))
    # the baseline first, then the study's own order (bundles before swapped-in components)
    assert list(kept) == ["grpo", "e_grpo", "sampler-vade"]
    assert kept["sampler-vade"] == cfg.arms["sampler-vade"]
    with pytest.raises(SystemExit) as stop:
        selected_arms(replace(cfg, only_arms=["sampler-vade", "sampler-nope"]))
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "[only_arms] got ['sampler-nope']; expected arms of study 'screen':" in err
    assert "sampler-vade" in err and "Fix:" in err


def test_only_arms_is_checked_where_the_arms_are_known():
    from framework.study.schema import StudyConfig

    def fields(cfg):
        return [p.path for p in cfg.problems()]

    plain = StudyConfig(arms={"grpo": [], "e_grpo": ["algorithm=e_grpo"]})
    assert "only_arms" not in fields(plain)
    assert "only_arms" not in fields(StudyConfig(arms=plain.arms, only_arms=["e_grpo"]))
    assert "only_arms" in fields(StudyConfig(arms=plain.arms, only_arms=["nope"]))
    assert "only_arms" in fields(StudyConfig(arms=plain.arms, only_arms=["e_grpo", "e_grpo"]))
    # a screen's arms are found at run time (selected_arms checks them then)
    assert "only_arms" not in fields(StudyConfig(screen=True, only_arms=["anything"]))


@pytest.mark.slow
def test_the_fp32_part_of_the_screen_runs_its_four_samplers_on_its_own_basis():
    """study=screen_fp32: the samplers screen.md still lacks, with a GRPO of their own, in fp32
    whatever the CPU (set, not auto), so its basis is the same on every machine."""
    from dataclasses import replace

    from framework.sft.warm_start import warm_start_sft
    from framework.study.arms import selected_arms

    main = load_config("study", ["study=screen"])
    part = load_config("study", ["study=screen_fp32"])
    assert part.screen and part.eval == main.eval and part.seeds == main.seeds
    assert part.publish != main.publish and part.archive_to != main.archive_to
    arms = selected_arms(replace(part, arms=screen_arms(part.baseline, overrides=part.overrides)))
    assert list(arms) == ["grpo", *sorted(part.only_arms)]
    full = screen_arms(main.baseline, overrides=main.overrides)
    assert all(arms[a] == full[a] for a in arms)  # each arm as the screen runs it
    cfg = load_config("train", [*part.overrides, *arms["grpo"], *STUDY_TRAIN_ARGS])
    assert cfg.trainer.precision_choice().precision == "32-true"
    assert cfg.retriever.encoder.dtype == "float32" and cfg.sampler.start_hops == 2
    assert cfg.rollout.compute_dtype == "float32"  # rollouts too, on a bf16 CPU as well
    # the same SFT settings as the screen's, so only the precision separates the warm starts
    base = load_config("train", [*main.overrides, *arms["grpo"], *STUDY_TRAIN_ARGS])
    a, b = warm_start_sft(cfg)[0], warm_start_sft(base)[0]
    assert (a.expert, a.optim, a.eval_questions) == (b.expert, b.optim, b.eval_questions)


def test_a_row_names_the_precision_its_machine_ran_and_a_part_says_so():
    runs = {
        ("base", 0): {"versions": {"cpu": "cpu X", "precision": "bf16-mixed"}},
        ("new", 0): {"versions": {"cpu": "cpu X", "precision": "32-true"}},
        ("old", 0): {"versions": {"cpu": "cpu Y"}},  # recorded before runs kept their precision
    }
    recs = [EvalRecord(dataset="d", question_id="q1", sample=0, correct=True, response_tokens=40)]
    archive = _Archive(runs, {(a, 0): recs for a in ("base", "new", "old")})
    figures = {"seeds": [0], "pass@1": 1.0, "pass@1_ci": [1.0, 1.0], "tool_calls": 1.0}
    diff = {"diff": 0.0, "ci": [0.0, 0.0]}
    summary = {
        "arms": {a: figures for a in ("base", "new", "old")},
        "versus_baseline": {a: {"Pass@1": diff} for a in ("new", "old")},
    }
    rows = screen_rows(summary, archive, ["base", "new", "old"], "base")
    assert [r["machines"] for r in rows] == [
        ["cpu X, bf16-mixed"],
        ["cpu X, 32-true"],
        ["cpu Y"],
    ]
    cfg = SimpleNamespace(
        name="part",
        baseline="base",
        overrides=["trainer.precision=32-true"],
        only_arms=["new", "old"],
        eval=SimpleNamespace(questions=1, split="validation", samples_per_question=1),
    )
    table = screen_markdown(cfg, rows)
    assert "A = cpu X, bf16-mixed; B = cpu X, 32-true; C = cpu Y." in table
    assert (
        "A part of the screen: `only_arms` keeps 2 methods and the baseline `base`, trained "
        "with the overrides `trainer.precision=32-true`. Its rows compare with this table's "
        "baseline only"
    ) in table


def test_an_archive_keeps_only_arms_and_settings_frozen_before_it_still_match():
    from dataclasses import replace

    from framework.study.archive import study_settings
    from framework.study.schema import StudyConfig

    whole = study_settings(StudyConfig(arms={"grpo": []}))
    # a test-split study frozen before the field existed compares equal to it still
    assert "only_arms" not in whole
    part = study_settings(replace(StudyConfig(arms={"grpo": []}), only_arms=["grpo"]))
    assert part["only_arms"] == ["grpo"]  # a report from the archive says it was a part


def test_a_screen_shows_its_parts_below_it_each_against_its_own_baseline(study_dir, tmp_path):  # noqa: F811
    """A part of the screen (an only_arms study on a basis of its own, fp32 say) is listed as
    evaluated there, not as missing, and its table follows the screen's with its own baseline."""
    from framework.study.screen import screen_parts
    from framework.study.screen_render import parts_markdown

    part_cfg = _screen_cfg(
        name="s_part", only_arms=["new"], overrides=["trainer.precision=32-true"]
    )
    write_study(study_dir, part_cfg, [])  # the part's archive: base and new
    part_archive = study_dir / "archive"
    main = _screen_cfg(arms={"base": [], "new": [], "gone": []}, parts=[str(part_archive)])
    (found,) = screen_parts(main)
    assert found["name"] == "s_part" and found["cfg"].only_arms == ["new"]
    assert [r["arm"] for r in found["rows"]] == ["base", "new"]
    new = found["rows"][1]["minus_baseline"]
    assert new["diff"] == pytest.approx(0.375)  # against the part's own base, as summarize_study
    # the screen itself evaluated only its base here (a row of its own machine)
    mine = [{**found["rows"][0], "machines": ["cpu A, bf16-mixed"]}]
    table = screen_markdown(main, mine, in_parts={"new": "s_part"})
    assert (
        "Evaluated in a part of the screen on a basis of its own (1 of 3 methods; its table, with "
        "its own baseline, is below this one): `new` (`s_part`)."
    ) in table
    assert "Not evaluated yet (1 of 3 methods): `gone`." in table
    assert "(1 method evaluated, baseline `base`)" in table  # one, in the singular
    below = parts_markdown(
        [{**found, "rows": [{**r, "machines": ["cpu B, 32-true"]} for r in found["rows"]]}],
        ["cpu A, bf16-mixed"],
    )
    assert "## A part of the screen on a basis of its own: `s_part` (2 methods evaluated" in below
    assert "B = cpu B, 32-true." in below  # the letters go on from the screen's
    assert "A part of the screen: `only_arms` keeps 1 method and the baseline" in below
    assert (
        f"Its records: `{part_archive}` (`seekrl-study study=s_part` runs the part; "
        f"`seekrl-study study=s_part out_dir={study_dir} report_only=true` writes its full report"
    ) in below
    # a part that has not run yet says so
    empty = screen_parts(_screen_cfg(parts=[str(tmp_path / "none")]))
    assert empty[0]["rows"] == [] and "No records there yet" in parts_markdown(empty, [])


def test_parts_belong_to_a_screen():
    from framework.study.schema import StudyConfig

    bad = StudyConfig(arms={"grpo": []}, parts=["docs/benchmarks/screen_fp32/archive"])
    assert "parts" in [p.path for p in bad.problems()]
    assert "parts" not in [p.path for p in StudyConfig(screen=True, parts=["x"]).problems()]
