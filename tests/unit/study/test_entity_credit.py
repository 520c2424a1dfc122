"""The distribution of E-GRPO's normalised entity rate over a run's wrong training rollouts,
recomputed from its saved trajectory records (framework/eval/entity_credit.py), by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from framework.registry import REWARDS, load_components
from framework.study.entity_credit import histogram, pooled, run_histogram, step_rates
from framework.study.render import _entity_rate_lines

load_components(plugins=False)
QUESTION = "Where was the director of Jaws born?"
ENTITIES = [["Jaws"], ["Steven Spielberg"], ["Cincinnati"]]


def record(answer, think, group=0, status="ok"):
    return {
        "question": QUESTION,
        "golden_answers": ["Cincinnati"],
        "entities": ENTITIES,
        "group": group,
        "status": status,
        "answer": answer,
        "think_text": think,
    }


STEP = [
    record("Cincinnati", "Steven Spielberg was born in Cincinnati"),  # right
    record("Ohio", "Jaws is by Steven Spielberg"),  # wrong, one hidden entity of two
    record("Boston", "no idea"),  # wrong, none
    record(None, "Steven Spielberg, Cincinnati", status="format_error"),  # invalid: 0
]


def egrpo(skip: bool):
    cls = REWARDS.get("e_grpo").config_cls
    return cls(name="e_grpo", skip_question_entities=skip)


def test_wrong_rollouts_rates_under_both_rules():
    # E_q without the entities the question names (Jaws): {Spielberg, Cincinnati}; the right
    # rollout names both (1.0, the group's best), the wrong ones 1/2 and 0, the invalid one 0
    assert step_rates(STEP, egrpo(True)) == pytest.approx([0.5, 0.0, 0.0])
    # the literal E_q (all three): right 2/3, wrong 2/3 (Jaws, Spielberg) and 0: over the best
    assert step_rates(STEP, egrpo(False)) == pytest.approx([1.0, 0.0, 0.0])
    # no config: the default rule (hidden entities) and exact match
    assert step_rates(STEP, None) == pytest.approx([0.5, 0.0, 0.0])
    assert step_rates([dict(r, entities=None) for r in STEP], None) == []


def test_histogram_and_pooling_by_hand():
    h = histogram([0, 0, 0.1, 0.25, 0.3, 0.5, 0.9, 1.0, 1.0])
    assert (h["n"], h["zero"], h["interior"], h["full"]) == (9, 2, [2, 2, 0, 1], 2)
    assert h["mean"] == pytest.approx(4.05 / 9)
    both = pooled([h, histogram([0.6, 0.0]), {}])
    assert (both["runs"], both["n"], both["zero"], both["interior"], both["full"]) == (
        2,
        11,
        3,
        [2, 2, 1, 1],
        2,
    )
    assert both["mean"] == pytest.approx(4.65 / 11)
    assert pooled([{}, None]) is None


def write_run(run: Path, steps, reward):
    (run / "trajectories").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create({"reward": reward, "seed": 0}), run / "config.yaml")
    for k, records in enumerate(steps, 1):
        with (run / "trajectories" / f"step-{k:06d}.jsonl").open("w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in records)


def test_a_run_directory_is_read_with_its_own_reward(tmp_path):
    literal = {"name": "e_grpo", "alpha": 0.3, "skip_question_entities": False}
    write_run(tmp_path / "a", [STEP, STEP], literal)
    h = run_histogram(tmp_path / "a")
    assert (h["n"], h["zero"], h["full"], h["steps"], h["rule"]) == (6, 4, 2, 2, "the run's reward")
    # a config that cannot be read: the defaults, said so
    write_run(tmp_path / "b", [STEP], {"name": "no_such_reward"})
    h = run_histogram(tmp_path / "b")
    assert (h["n"], h["zero"], h["interior"][1], h["rule"]) == (
        3,
        2,
        1,
        "defaults (config.yaml unreadable)",
    )
    (tmp_path / "c").mkdir()
    assert run_histogram(tmp_path / "c") is None


def test_the_report_table():
    lines = _entity_rate_lines({"e_grpo": pooled([histogram([0, 0, 0.5, 1.0])])})
    assert "| e_grpo | 1 | 4 | 0.375 | 0.500 | 0.500 | 0.000 | 0.250 | 0.000 | 0.000 | 0.250 |" in (
        lines
    )
    assert "| γ̂ = 0 | (0, 0.25] | (0.25, 0.5] | (0.5, 0.75] | (0.75, 1) | γ̂ = 1 |" in lines[5]
    assert _entity_rate_lines({}) == []
