"""Issue 79's learning bar (framework/study/learning_bar.py): hand-derived figures, each criterion
failing when the behaviour it names is broken, and the section a study's report gets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from framework.study.learning_bar import (
    LearningBar,
    SeedRow,
    criteria,
    quarter_means,
    run_minutes,
    sample_sd,
    t_interval,
)
from framework.study.schema import LearningBarConfig, StudyConfig, StudyEvalConfig
from tests.unit.study.test_report import _eval_dir


def test_quarter_means_of_eight_steps_are_the_first_and_last_two():
    curve = [(s, float(s - 1)) for s in range(1, 9)]  # 0, 1, ..., 7
    assert quarter_means(curve) == (0.5, 6.5)  # (0 + 1) / 2, (6 + 7) / 2


def test_quarter_means_keep_a_resumed_steps_last_value_and_order_by_step():
    # step 2 logged twice (a resume), steps out of order: values by step 1: 0, 2: 4, 3: 1, 4: 3
    curve = [(3, 1.0), (1, 0.0), (2, 9.0), (4, 3.0), (2, 4.0)]
    assert quarter_means(curve) == (0.0, 3.0)  # 4 steps: one step per quarter
    assert quarter_means([(1, 2.0), (2, 5.0)]) == (2.0, 5.0)  # fewer than 4 steps: one each
    assert quarter_means([]) is None
    # the value logged last wins, even when it is the smaller one
    assert quarter_means([(1, 5.0), (1, 0.0)]) == (0.0, 0.0)


def test_the_seed_level_t_interval_by_hand():
    # mean 0.06, SD sqrt(0.004 / 4) = 0.031623; t(0.975, 4) = 2.776445; half-width
    # 2.776445 * 0.031623 / sqrt(5) = 0.039265
    lo, hi = t_interval([0.02, 0.04, 0.06, 0.08, 0.10])
    assert lo == pytest.approx(0.06 - 0.039265, abs=1e-6)
    assert hi == pytest.approx(0.06 + 0.039265, abs=1e-6)
    assert sample_sd([0.02, 0.04, 0.06, 0.08, 0.10]) == pytest.approx(0.0316228, abs=1e-7)
    # two values: t(0.975, 1) = 12.7062; SD of (0, 0.1) = 0.0707107; half 12.7062 * 0.05 = 0.6353
    assert t_interval([0.0, 0.1]) == pytest.approx((0.05 - 0.63531, 0.05 + 0.63531), abs=1e-5)
    assert t_interval([0.1]) is None


def test_a_runs_minutes_are_its_longer_training_time_plus_its_evaluation():
    assert run_minutes({"seconds": 1800.0, "train_seconds": 1700.0, "eval_seconds": 600.0}) == 40
    # resumed: the last launch's 600 s are fewer than its steps' 2400 s
    assert run_minutes({"seconds": 600.0, "train_seconds": 2400.0, "eval_seconds": 600.0}) == 50
    assert run_minutes({"seconds": 600.0, "train_seconds": 2400.0}) is None  # not evaluated
    assert run_minutes(None) is None


def _row(seed: int, **kw: float | None) -> SeedRow:
    row: SeedRow = {
        "seed": seed,
        "reward_first": 0.20,
        "reward_last": 0.35,
        "control_first": 0.21,
        "control_last": 0.18,
        "gain": 0.06,
        "gain_ci": [0.01, 0.11],
        "hop_pass1": 0.12,
        "minutes": 45.0,
        "control_minutes": 44.0,
    }
    row.update(kw)  # type: ignore[typeddict-item]
    return row


def _bar(rows: list[SeedRow], gain=0.06, ci=(0.02, 0.10), hop=0.11) -> LearningBar:
    return {
        "arm": "grpo",
        "control": "placebo",
        "seeds": [r["seed"] for r in rows],
        "hops": 2,
        "rows": rows,
        "gain": gain,
        "gain_ci": list(ci),
        "gain_interval": "seed bootstrap",
        "gain_t_ci": None,
        "gain_sd": None,
        "hop_pass1": hop,
        "hop_start": 0.05,
        "criteria": [],
        "met": None,
    }


def _met(rows, **kw) -> list[bool | None]:
    return [c["met"] for c in criteria(_bar(rows, **kw), LearningBarConfig(arm="grpo"))]


def test_five_seeds_that_learn_meet_every_criterion():
    assert _met([_row(s) for s in range(5)]) == [True] * 6


@pytest.mark.parametrize(
    ("broken", "index"),
    [
        ({"reward_last": 0.19}, 0),  # one seed's reward fell (0.20 -> 0.19)
        ({"control_last": 0.36}, 1),  # the placebo ended above it in one seed
        ({"minutes": 61.0}, 5),  # one run over the hour
        ({"control_minutes": 60.5}, 5),  # the control's run counts too
    ],
)
def test_one_bad_seed_fails_its_criterion_and_only_it(broken, index):
    rows = [_row(s) for s in range(4)] + [_row(4, **broken)]
    met = _met(rows)
    assert met[index] is False
    assert [m for i, m in enumerate(met) if i != index] == [True] * 5


def test_the_pooled_gain_needs_the_size_and_an_interval_above_zero():
    rows = [_row(s) for s in range(5)]
    assert _met(rows, gain=0.049)[2] is False  # under +0.05
    assert _met(rows, ci=(0.0, 0.1))[2] is False  # the interval reaches 0
    assert _met(rows, gain=0.05)[2] is True


def test_four_of_five_positive_seeds_suffice_three_do_not():
    four = [_row(s) for s in range(4)] + [_row(4, gain=-0.01)]
    three = [_row(s) for s in range(3)] + [_row(3, gain=0.0), _row(4, gain=-0.02)]
    assert _met(four)[3] is True
    assert _met(three)[3] is False  # a gain of exactly 0 is not positive


def test_two_hop_pass1_must_reach_the_floor():
    rows = [_row(s) for s in range(5)]
    assert _met(rows, hop=0.099)[4] is False
    assert _met(rows, hop=0.10)[4] is True


def test_unmeasured_seeds_leave_a_criterion_open_not_met():
    rows = [_row(0), _row(1, reward_last=None, gain=None, minutes=None)]
    met = _met(rows)
    assert met[0] is None and met[5] is None  # seed 1 has not trained or been evaluated yet
    assert met[3] is None  # ceil(0.8 x 2) = 2 needed: 1 positive, 1 still unknown
    # 4 of 5 positive decide it whatever the fifth gives
    assert _met([_row(s) for s in range(4)] + [_row(4, gain=None)])[3] is True
    rows = [_row(0, gain=-0.01), _row(1, gain=None)]
    assert _met(rows)[3] is False  # at most 1 of the 2 needed can be positive


def _study(tmp_path: Path) -> Path:
    """A study directory of arms grpo and placebo, seeds 0 and 1, on 4 questions (q1, q2 one-hop;
    q3, q4 two-hop), each run with a reward curve and evaluation times."""
    from torch.utils.tensorboard import SummaryWriter

    root = tmp_path / "study"
    hops = {"q1": 1, "q2": 1, "q3": 2, "q4": 2}
    none = {q: [False, False] for q in hops}
    _eval_dir(root / "eval" / "start", {**none, "q1": [True, False]}, hops=hops)
    # grpo seed 0: q1 both, q3 one of two -> Pass@1 3/8, two-hop (0.5 + 0) / 2 = 0.25
    # grpo seed 1: q1 both -> 2/8, two-hop 0
    g0 = {**none, "q1": [True, True], "q3": [True, False]}
    g1 = {**none, "q1": [True, True]}
    for arm, seed, rows in [("grpo", 0, g0), ("grpo", 1, g1), ("placebo", 0, none)]:
        ev = root / "eval" / arm / f"seed{seed}"
        _eval_dir(ev, rows, hops=hops)
        result = json.loads((ev / "results.json").read_text())
        (ev / "results.json").write_text(json.dumps({**result, "seconds": 300.0}))
    curves = {
        ("grpo", 0): [0.1, 0.2, 0.3, 0.5],
        ("grpo", 1): [0.2, 0.1, 0.2, 0.4],
        ("placebo", 0): [0.1, 0.2, 0.1, 0.1],
        ("placebo", 1): [0.2, 0.2, 0.1, 0.6],
    }
    for (arm, seed), values in curves.items():
        run = root / "runs" / arm / f"seed{seed}"
        (run / "policy").mkdir(parents=True)  # a finished run: its summary and exported policy
        (run / "policy" / "config.json").write_text("{}")
        (run / "summary.json").write_text(json.dumps({"seconds": 2400.0}))
        writer = SummaryWriter(log_dir=str(run / "tensorboard"))
        for step, v in enumerate(values, 1):
            writer.add_scalar("rollout/reward", v, step)
            writer.add_scalar("timing/step", 600.0, step)
        writer.close()
    return root


def test_an_unfinished_run_is_not_judged_on_its_steps_so_far(tmp_path):
    from framework.study.runner import study

    root = _study(tmp_path)
    (root / "runs" / "grpo" / "seed1" / "summary.json").unlink()  # still training
    rows = {r["seed"]: r for r in study(_cfg(root))["learning_bar"]["rows"]}
    assert rows[1]["reward_first"] is None and rows[1]["reward_last"] is None
    assert rows[0]["reward_last"] == pytest.approx(0.5)


def _cfg(root: Path) -> StudyConfig:
    return StudyConfig(
        name="bar",
        out_dir=str(root),
        arms={"grpo": ["algorithm=grpo"], "placebo": ["algorithm=placebo"]},
        baseline="grpo",
        seeds=[0, 1],
        bootstrap=500,
        eval=StudyEvalConfig(questions=4, samples_per_question=2),
        learning_bar=LearningBarConfig(arm="grpo", control="placebo"),
        report_only=True,
    )


def test_the_report_gives_the_bar_from_the_archive_and_regenerates_it(tmp_path, capsys):
    from framework.study.runner import study

    root = _study(tmp_path)
    s = study(_cfg(root))
    bar = s["learning_bar"]
    rows = {r["seed"]: r for r in bar["rows"]}
    # quarters of 4 steps are single steps
    assert (rows[0]["reward_first"], rows[0]["reward_last"]) == pytest.approx((0.1, 0.5))
    assert rows[1]["control_last"] == pytest.approx(0.6)  # placebo seed 1 ended above grpo's 0.4
    # start: q1 0.5 -> 1/8 Pass@1; seed 0 gains 3/8 - 1/8, seed 1 gains 2/8 - 1/8
    assert rows[0]["gain"] == pytest.approx(0.25) and rows[1]["gain"] == pytest.approx(0.125)
    assert rows[0]["hop_pass1"] == pytest.approx(0.25) and rows[1]["hop_pass1"] == 0.0
    assert bar["hop_pass1"] == pytest.approx(0.125)  # pooled over seeds: q3 0.25, q4 0
    assert rows[0]["minutes"] == pytest.approx((2400 + 300) / 60)  # 4 steps of 600 s + eval
    assert rows[1]["control_minutes"] is None  # placebo seed 1 trained, not evaluated
    assert bar["gain_sd"] == pytest.approx(0.0883883, abs=1e-6)  # SD of (0.25, 0.125)
    met = [c["met"] for c in bar["criteria"]]
    assert met[0] is True  # 0.1 -> 0.5 and 0.2 -> 0.4
    assert met[1] is False  # seed 1: 0.4 against the placebo's 0.6
    assert met[4] is True  # 0.125 >= 0.10
    assert met[5] is None  # a run's time not known yet
    assert bar["met"] is False
    md = (root / "study.md").read_text()
    assert "## Does `grpo` learn here? (the learning bar: **not met**)" in md
    assert "| 1 | 0.200 -> 0.400 | 0.200 -> 0.600 |" in md
    assert "between-seed SD 0.088" in md
    # the archive keeps the bar's settings: reported elsewhere with no bar given, it comes back
    published = tmp_path / "published"
    shutil.copytree(root / "archive", published / "archive")
    study(StudyConfig(arms={"x": []}, baseline="x", out_dir=str(published), report_only=True))
    assert (published / "study.md").read_text() == md


def test_without_a_bar_the_archive_and_report_are_as_before(tmp_path):
    from dataclasses import replace

    from framework.study.archive import study_settings
    from framework.study.runner import study

    root = _study(tmp_path)
    cfg = replace(_cfg(root), learning_bar=LearningBarConfig())
    assert "learning_bar" not in study_settings(cfg)  # older archives' settings, unchanged
    s = study(cfg)
    assert "learning_bar" not in s
    assert "learning bar" not in (root / "study.md").read_text()


def test_a_bar_naming_an_arm_the_study_lacks_is_refused():
    cfg = StudyConfig(
        arms={"grpo": ["algorithm=grpo"]},
        baseline="grpo",
        learning_bar=LearningBarConfig(arm="grpo", control="placebo"),
    )
    text = "\n".join(str(p) for p in cfg.problems())
    assert "learning_bar" in text and "placebo" in text and "Fix:" in text
