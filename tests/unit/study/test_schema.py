"""The study app's config: arms, seeds and overrides checked before anything runs."""

from __future__ import annotations

from framework.study.schema import StudyConfig, StudyEvalConfig


def fields(cfg) -> list[str]:
    return [p.path for p in cfg.problems()]


def test_defaults_are_valid():
    assert "arms" in fields(StudyConfig())  # the presets (conf/study/) name the arms
    assert StudyConfig(arms={"grpo": ["algorithm=grpo"]}, baseline="grpo").problems() == []
    assert StudyEvalConfig().problems() == []


def test_reserved_overrides_are_refused():
    cfg = StudyConfig(arms={"a": ["algorithm=grpo", "seed=3"]}, baseline="a")
    assert fields(cfg) == ["arms"]
    assert "seed=3" in str(cfg.problems()[0])
    ok = {"grpo": ["algorithm=grpo"]}
    assert fields(StudyConfig(arms=ok, baseline="grpo", overrides=["run_dir=x"])) == ["overrides"]


def test_baseline_must_be_an_arm_and_seeds_distinct():
    two = {"grpo": ["algorithm=grpo"], "e_grpo": ["algorithm=e_grpo"]}
    assert "baseline" in fields(StudyConfig(arms=two, baseline="nope"))
    assert "seeds" in fields(StudyConfig(arms=two, seeds=[0, 0]))
    assert "seeds" in fields(StudyConfig(arms=two, seeds=[]))
    assert "arms" in fields(
        StudyConfig(arms={"bad label": ["algorithm=grpo"]}, baseline="bad label")
    )


def test_eval_on_held_out_splits_only():
    assert fields(StudyEvalConfig(split="train")) == ["split"]
    assert fields(StudyEvalConfig(samples_per_question=0)) == ["samples_per_question"]
