"""The hop curriculum belongs to every sampler (``sampler.start_hops``): each draws only from the
current stage's questions, ``hop_curriculum`` is ``uniform`` with it on, and a study's shared
curriculum composes with any sampler (the screen swaps samplers under ``experiment=learn_cpu``)."""

from __future__ import annotations

import copy

import pytest

from framework.cli.app import load_config
from framework.data.schema import QAItem
from framework.registry import ALL, load_components
from framework.samplers.dynamic import HopCurriculumConfig, HopCurriculumSampler
from framework.samplers.uniform import UniformSampler, UniformSamplerConfig

HOPS = [1, 2, 1, 3, 2, 1, 3, 2, 1, 2]


def items(hops: list[int]) -> list[QAItem]:
    return [
        QAItem(f"q{i}", f"question {i}", ("a",), None, h, None, "t") for i, h in enumerate(hops)
    ]


def sampler_names() -> list[str]:
    load_components()
    return sorted(e.name for e in ALL["sampler"] if e.origin.startswith("framework."))


def make(name: str, seed: int = 0, **fields):
    load_components()
    (entry,) = [e for e in ALL["sampler"] if e.name == name]
    cfg = entry.config_cls(name=name, questions_per_step=2, group_size=2, **fields)
    return entry.target(items(HOPS), seed, cfg=cfg)


@pytest.mark.parametrize("name", sampler_names())
def test_every_sampler_draws_only_from_the_stage(name):
    s = make(name, start_hops=1, steps_per_stage=2)
    for step in range(6):
        limit = 1 + step // 2
        groups = s.next_groups()  # reserve groups included
        assert groups and all(HOPS[g.question] <= limit for g in groups), (step, groups)
        assert s.stage_hops == limit
    assert {HOPS[q] for q in s.pool} == {1, 2, 3}


@pytest.mark.parametrize("name", [n for n in sampler_names() if n != "hop_curriculum"])
def test_without_start_hops_no_sampler_has_a_curriculum(name):
    s = make(name)
    assert not s.curriculum and s.pool == list(range(len(HOPS)))
    assert "stage_hops" not in s.state_dict()  # checkpoints of earlier runs load unchanged


def test_hop_curriculum_is_uniform_with_start_hops():
    cfg = dict(questions_per_step=3, group_size=2, start_hops=1, steps_per_stage=2)
    a = HopCurriculumSampler(items(HOPS), 7, cfg=HopCurriculumConfig(name="hop_curriculum", **cfg))
    b = UniformSampler(items(HOPS), 7, cfg=UniformSamplerConfig(name="uniform", **cfg))
    assert [a.next_groups() for _ in range(9)] == [b.next_groups() for _ in range(9)]


@pytest.mark.parametrize("steps_before", [0, 1, 3, 4, 7])
@pytest.mark.parametrize("name", ["hop_curriculum", "vade", "xrpo", "dapo_dynamic"])
def test_a_resumed_curriculum_draws_what_the_uninterrupted_run_drew(name, steps_before):
    ref = make(name, seed=3, start_hops=1, steps_per_stage=2)
    for _ in range(steps_before):  # 3 and 4: into the second stage; 7: into the last
        ref.next_groups()
    state = copy.deepcopy(ref.state_dict())
    expected = [ref.next_groups() for _ in range(5)]
    resumed = make(name, seed=9, start_hops=1, steps_per_stage=2)
    resumed.next_groups()
    resumed.load_state_dict(state)
    assert [resumed.next_groups() for _ in range(5)] == expected


def test_curriculum_settings_are_checked():
    assert UniformSamplerConfig(name="uniform", start_hops=0).problems()
    assert UniformSamplerConfig(name="uniform", steps_per_stage=0).problems()
    problems = HopCurriculumConfig(name="hop_curriculum", start_hops=None).problems()
    assert problems and "sampler=uniform" in str(problems[0])


def test_a_curriculum_needs_hop_counts():
    cfg = UniformSamplerConfig(name="uniform", start_hops=1)
    with pytest.raises(ValueError, match=r"\[sampler.start_hops\] got 1 with 1 of 2"):
        UniformSampler([items([1])[0], QAItem("x", "y", ("a",), None, None, None, "t")], 0, cfg=cfg)


@pytest.mark.parametrize("name", sampler_names())
def test_learn_cpu_composes_with_every_sampler(name):
    # experiment=learn_cpu sets sampler.steps_per_stage; the screen swaps the sampler under it
    cfg = load_config("train", ["experiment=learn_cpu", f"sampler={name}", "sampler.start_hops=2"])
    assert cfg.sampler.name == name
    assert (cfg.sampler.start_hops, cfg.sampler.steps_per_stage) == (2, 32)
