"""Uniform question sampler: determinism, epochs, resume."""

from __future__ import annotations

import copy

import pytest

from framework.samplers.uniform import GroupRequest, UniformSampler, UniformSamplerConfig


def make(num_questions=10, seed=0, qps=4, group_size=8, shuffle=True) -> UniformSampler:
    cfg = UniformSamplerConfig(
        name="uniform", questions_per_step=qps, group_size=group_size, shuffle=shuffle
    )
    return UniformSampler(range(max(num_questions, 0)), seed, cfg=cfg)


def questions(groups: list[GroupRequest]) -> list[int]:
    return [g.question for g in groups]


def test_group_requests_carry_group_size():
    groups = make(group_size=5).next_groups()
    assert len(groups) == 4
    assert all(isinstance(g, GroupRequest) and g.size == 5 for g in groups)


def test_deterministic_by_seed():
    a, b, c = make(seed=3), make(seed=3), make(seed=4)
    seq_a = [questions(a.next_groups()) for _ in range(6)]
    seq_b = [questions(b.next_groups()) for _ in range(6)]
    seq_c = [questions(c.next_groups()) for _ in range(6)]
    assert seq_a == seq_b
    assert seq_a != seq_c


def test_each_epoch_is_a_permutation():
    # 12 questions, 4 per step: epochs are steps {0,1,2}, {3,4,5}, ...
    s = make(num_questions=12, qps=4, seed=1)
    drawn = [q for _ in range(12) for q in questions(s.next_groups())]
    epochs = [drawn[i : i + 12] for i in range(0, len(drawn), 12)]
    assert len(epochs) == 4
    for ep in epochs:
        assert sorted(ep) == list(range(12))
    # reshuffled: not all epochs in the same order
    assert len({tuple(ep) for ep in epochs}) > 1


def test_epoch_boundary_inside_a_step():
    # 10 questions, 4 per step: step 2 takes the last 2 of epoch 0 and the first 2 of epoch 1.
    s = make(num_questions=10, qps=4, seed=2)
    steps = [questions(s.next_groups()) for _ in range(5)]  # 20 draws = exactly 2 epochs
    flat = [q for st in steps for q in st]
    assert sorted(flat[:10]) == list(range(10))
    assert sorted(flat[10:]) == list(range(10))
    # the boundary step mixes both epochs: its two halves each complete one of them
    assert set(steps[2][:2]) == set(range(10)) - set(flat[:8])
    assert s.epoch == 1


def test_no_shuffle_walks_in_order():
    s = make(num_questions=5, qps=3, shuffle=False)
    assert questions(s.next_groups()) == [0, 1, 2]
    assert questions(s.next_groups()) == [3, 4, 0]
    assert questions(s.next_groups()) == [1, 2, 3]


def test_more_questions_per_step_than_dataset():
    s = make(num_questions=3, qps=7, seed=5)
    q = questions(s.next_groups())
    assert len(q) == 7
    assert sorted(q[:3]) == [0, 1, 2] and sorted(q[3:6]) == [0, 1, 2]


@pytest.mark.parametrize("steps_before", [0, 1, 2, 3, 5, 7])
def test_resume_matches_uninterrupted(steps_before):
    # 9 questions, 4 per step: checkpoints fall at various epoch positions, including mid-step
    # boundaries; the resumed sampler must draw exactly what the uninterrupted one draws.
    reference = make(num_questions=9, qps=4, seed=11)
    for _ in range(steps_before):
        reference.next_groups()
    state = copy.deepcopy(reference.state_dict())
    expected = [reference.next_groups() for _ in range(6)]

    resumed = make(num_questions=9, qps=4, seed=999)  # wrong seed: the state must restore it
    resumed.next_groups()  # and its own position must be overwritten
    resumed.load_state_dict(state)
    assert [resumed.next_groups() for _ in range(6)] == expected


def test_resume_at_exact_epoch_end():
    # 8 questions, 4 per step: after 2 steps the position sits at the end of epoch 0.
    a = make(num_questions=8, qps=4, seed=6)
    a.next_groups()
    a.next_groups()
    state = a.state_dict()
    b = make(num_questions=8, qps=4, seed=6)
    b.load_state_dict(state)
    assert questions(a.next_groups()) == questions(b.next_groups())


def test_state_dict_round_trips_plain_values():
    s = make(num_questions=9, qps=4, seed=11)
    s.next_groups()
    s.next_groups()
    s.next_groups()  # 12 draws: epoch 1, position 3
    assert s.state_dict() == {"epoch": 1, "position": 3, "seed": 11}


@pytest.mark.parametrize("n", [0, -1])
def test_empty_dataset_raises(n):
    with pytest.raises(ValueError, match="questions"):
        make(num_questions=n)


def test_config_problems():
    assert UniformSamplerConfig(name="uniform").problems() == []
    assert UniformSamplerConfig(name="uniform", group_size=1).problems()
    assert UniformSamplerConfig(name="uniform", questions_per_step=0).problems()


def hop_items(hops):
    from framework.data.schema import QAItem

    return [
        QAItem(f"q{i}", f"question {i}", ("a",), None, h, None, "t") for i, h in enumerate(hops)
    ]


def test_max_hops_draws_only_questions_within_the_limit():
    hops = [1, 2, 1, 3, 2, 1, 2, 1]
    cfg = UniformSamplerConfig(name="uniform", questions_per_step=3, group_size=2, max_hops=1)
    s = UniformSampler(hop_items(hops), 0, cfg=cfg)
    assert s.pool == [0, 2, 5, 7]
    drawn = [q for _ in range(8) for q in questions(s.next_groups())]
    assert set(drawn) == {0, 2, 5, 7}  # 24 draws over 4 one-hop questions: every one, nothing else
    # an epoch is a permutation of the pool: the first 4 draws are the 4 questions
    fresh = UniformSampler(hop_items(hops), 0, cfg=cfg)
    first = [q for _ in range(2) for q in questions(fresh.next_groups())][:4]
    assert sorted(first) == [0, 2, 5, 7]


def test_max_hops_none_keeps_every_question_and_the_same_order():
    limited = UniformSamplerConfig(name="uniform", questions_per_step=4, max_hops=None)
    a = UniformSampler(hop_items([1, 2, 3, 4, 1, 2]), 5, cfg=limited)
    b = UniformSampler(range(6), 5, cfg=limited)
    assert [questions(a.next_groups()) for _ in range(3)] == [
        questions(b.next_groups()) for _ in range(3)
    ]


def test_max_hops_errors_name_the_setting():
    cfg = UniformSamplerConfig(name="uniform", questions_per_step=2, max_hops=1)
    with pytest.raises(ValueError, match=r"\[sampler.max_hops\] got 1 with 1 of 3 training"):
        UniformSampler(hop_items([1, None, 2]), 0, cfg=cfg)
    with pytest.raises(ValueError, match=r"\[sampler.max_hops\] got 1; .*easiest has 2 hops"):
        UniformSampler(hop_items([2, 3]), 0, cfg=cfg)
    assert cfg.problems() == []
    assert UniformSamplerConfig(name="uniform", max_hops=0).problems()[0].path == "max_hops"
