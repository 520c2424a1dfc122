"""Dynamic sampling, rejection and the hop curriculum: what each draws, keeps, and resumes."""

from __future__ import annotations

import copy

import pytest
import torch

from framework.cli.app import load_config
from framework.data.schema import QAItem
from framework.samplers.dynamic import (
    DynamicSampler,
    DynamicSamplerConfig,
    HopCurriculumConfig,
    HopCurriculumSampler,
    RejectionSampler,
    RejectionSamplerConfig,
)
from framework.samplers.uniform import UniformSampler, UniformSamplerConfig


def items(hops: list[int | None]) -> list[QAItem]:
    return [
        QAItem(f"q{i}", f"question {i}", ("a",), None, h, None, "t") for i, h in enumerate(hops)
    ]


def dynamic(n=8, qps=2, reserve=1.0, seed=0) -> DynamicSampler:
    cfg = DynamicSamplerConfig(name="dapo_dynamic", questions_per_step=qps, group_size=4)
    cfg.reserve = reserve
    return DynamicSampler(range(n), seed, cfg=cfg)


def test_dynamic_draws_reserve_groups_after_the_step_groups():
    groups = dynamic(qps=2, reserve=1.0).next_groups()
    assert [g.reserve for g in groups] == [False, False, True, True]
    assert all(g.size == 4 for g in groups)
    # the same walk as uniform: the step's and the reserve's questions are the next 4 of the epoch
    uniform = UniformSampler(
        range(8), 0, cfg=UniformSamplerConfig(name="uniform", questions_per_step=4, group_size=4)
    )
    assert [g.question for g in groups] == [g.question for g in uniform.next_groups()]
    assert len(dynamic(qps=3, reserve=0.5).next_groups()) == 3 + 2  # ceil(1.5) reserve groups


def test_dynamic_keeps_groups_whose_rewards_differ():
    s = dynamic()
    no = torch.zeros(3, dtype=torch.bool)
    assert not s.keep_group(torch.tensor([1.0, 1.0, 1.0]), ~no)  # all right: no signal
    assert not s.keep_group(torch.tensor([0.0, 0.0, 0.0]), no)  # all wrong, no credit
    assert s.keep_group(torch.tensor([0.0, 0.3, 0.0]), no)  # all wrong, E-GRPO credit differs
    assert s.keep_group(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([True, False, False]))


def test_rejection_drops_all_correct_and_all_wrong_groups_by_correctness():
    cfg = RejectionSamplerConfig(name="reinforce_rej", questions_per_step=2, group_size=2)
    s = RejectionSampler(range(6), 0, cfg=cfg)
    assert cfg.reserve == 0.0 and len(s.next_groups()) == 2  # by default nothing replaces them
    varied = torch.tensor([0.3, 0.0])
    assert not s.keep_group(varied, torch.tensor([False, False]))  # partial credit is not enough
    assert not s.keep_group(torch.ones(2), torch.tensor([True, True]))
    assert s.keep_group(torch.tensor([1.0, 0.0]), torch.tensor([True, False]))


@pytest.mark.parametrize("steps_before", [0, 1, 3, 5])
def test_dynamic_resume_matches_uninterrupted(steps_before):
    ref = dynamic(n=7, qps=2, reserve=1.0, seed=3)
    for _ in range(steps_before):
        ref.next_groups()
    state = copy.deepcopy(ref.state_dict())
    expected = [ref.next_groups() for _ in range(5)]
    resumed = dynamic(n=7, qps=2, reserve=1.0, seed=99)
    resumed.load_state_dict(state)
    assert [resumed.next_groups() for _ in range(5)] == expected


def test_dynamic_config_problems():
    assert DynamicSamplerConfig(name="dapo_dynamic").problems() == []
    assert DynamicSamplerConfig(name="dapo_dynamic", reserve=-1.0).problems()


def curriculum(hops, qps=2, start=1, per_stage=2, seed=0, max_hops=None) -> HopCurriculumSampler:
    cfg = HopCurriculumConfig(
        name="hop_curriculum",
        questions_per_step=qps,
        group_size=2,
        start_hops=start,
        steps_per_stage=per_stage,
        max_hops=max_hops,
    )
    return HopCurriculumSampler(items(hops), seed, cfg=cfg)


HOPS = [1, 2, 1, 3, 2, 1, 3, 2]


def test_curriculum_adds_one_hop_per_stage():
    s = curriculum(HOPS, qps=2, per_stage=2)
    drawn = [[g.question for g in s.next_groups()] for _ in range(8)]
    hop = [[HOPS[q] for q in step] for step in drawn]
    assert all(h == 1 for step in hop[:2] for h in step)  # steps 0-1: one-hop only
    assert all(h <= 2 for step in hop[2:4] for h in step)  # steps 2-3: up to two hops
    assert {h for step in hop[4:] for h in step} <= {1, 2, 3}
    # the first stage walks its three questions as an epoch: steps 0-1 draw 4 = all 3, then 1 more
    assert sorted(drawn[0] + drawn[1][:1]) == [0, 2, 5]
    # each stage starts its own walk: steps 2-3 draw 4 distinct of the 6 questions of <= 2 hops
    assert len(set(drawn[2] + drawn[3])) == 4


def test_curriculum_starts_at_the_easiest_question_and_stops_at_the_hardest():
    s = curriculum([2, 3, 2], qps=1, start=1, per_stage=1)
    assert s.stage_hops == 2  # no one-hop question: start at two
    for _ in range(6):
        s.next_groups()
    assert s.stage_hops == 3


def test_curriculum_names_questions_without_hops():
    with pytest.raises(ValueError, match=r"\[sampler.name\] got hop_curriculum with 1 of 3"):
        curriculum([1, None, 2])


def test_curriculum_stops_at_max_hops():
    s = curriculum([1, 2, 3, 1, 2, 3], qps=2, per_stage=1, max_hops=2)
    drawn = [g.question for _ in range(10) for g in s.next_groups()]
    assert s.stage_hops == 2 and set(drawn) == {0, 1, 3, 4}  # never a three-hop question


def test_dynamic_reserve_groups_respect_max_hops():
    cfg = DynamicSamplerConfig(name="dapo_dynamic", questions_per_step=2, group_size=4, max_hops=1)
    s = DynamicSampler(items([1, 2, 1, 2, 1, 2]), 0, cfg=cfg)
    groups = [g for _ in range(4) for g in s.next_groups()]
    assert any(g.reserve for g in groups)
    assert {g.question for g in groups} == {0, 2, 4}


def test_curriculum_config_problems():
    assert HopCurriculumConfig(name="hop_curriculum").problems() == []
    assert HopCurriculumConfig(name="hop_curriculum", start_hops=0).problems()
    assert HopCurriculumConfig(name="hop_curriculum", steps_per_stage=0).problems()


@pytest.mark.parametrize("name", ["dapo_dynamic", "reinforce_rej", "hop_curriculum"])
def test_samplers_compose_from_the_config(name):
    cfg = load_config("train", [f"sampler={name}", "sampler.questions_per_step=3"])
    assert cfg.sampler.name == name and cfg.sampler.questions_per_step == 3
