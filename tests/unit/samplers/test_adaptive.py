"""VADE and XRPO-style allocation: posteriors and allocations by hand, the lag rule, exact resume."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from framework.samplers.adaptive import (
    VadeSampler,
    VadeSamplerConfig,
    XrpoSampler,
    XrpoSamplerConfig,
    _beta_sample,
)


def vade(n=6, qps=2, decay=1.0, seed=0) -> VadeSampler:
    cfg = VadeSamplerConfig(name="vade", questions_per_step=qps, group_size=4, decay=decay)
    return VadeSampler(range(n), seed, cfg=cfg)


def test_vade_posterior_by_hand():
    s = vade(n=5, decay=0.5)
    s.observe(0, [3], [[1.0, 0.0, 1.0]], [[True, False, True]])
    s.observe(1, [3], [[0.0, 0.0]], [[False, False]])
    s.next_groups()  # draw 0: nothing applied yet (needs steps <= -2)
    s.next_groups()  # draw 1: nothing (steps <= -1)
    assert s.alpha[3] == 1.0 and s.beta[3] == 1.0
    s.next_groups()  # draw 2: step 0 -> a = 1 + 0.5 * 0 + 2 = 3, b = 1 + 0 + 1 = 2
    assert (float(s.alpha[3]), float(s.beta[3])) == (3.0, 2.0)
    assert float(s.alpha[0]) == 1.0  # unseen questions keep the prior
    s.next_groups()  # draw 3: step 1 -> a = 1 + 0.5 * (3 - 1) = 2, b = 1 + 0.5 * (2 - 1) + 2 = 3.5
    assert (float(s.alpha[3]), float(s.beta[3])) == (2.0, 3.5)


def test_vade_picks_the_question_whose_outcome_varies():
    s = vade(n=3, qps=1)
    s.observe(0, [0, 1, 2], [[0.0] * 20] * 3, [[True] * 20, [False] * 20, [True, False] * 10])
    s.next_groups(), s.next_groups()
    # always right (Beta(21, 1)) and always wrong (Beta(1, 21)) have p(1-p) < 0.1; 10 of 20 ~ 0.25
    assert [s.next_groups()[0].question for _ in range(5)] == [2] * 5


def test_vade_draws_only_within_max_hops():
    from framework.data.schema import QAItem

    hops = [2, 1, 2, 1, 2, 1]
    rows = [QAItem(f"q{i}", "q", ("a",), None, h, None, "t") for i, h in enumerate(hops)]
    cfg = VadeSamplerConfig(name="vade", questions_per_step=2, group_size=4, max_hops=1)
    s = VadeSampler(rows, 0, cfg=cfg)
    # the most informative question (row 0, half right) is two-hop: it is never drawn
    s.observe(0, [0, 1], [[0.0] * 20] * 2, [[True, False] * 10, [True] * 20])
    drawn = [g.question for _ in range(6) for g in s.next_groups()]
    assert set(drawn) <= {1, 3, 5} and len(drawn) == 12
    big = VadeSampler(rows, 0, cfg=VadeSamplerConfig(name="vade", questions_per_step=5, max_hops=1))
    more = [g.question for g in big.next_groups()]  # 5 groups, 3 questions: 3 ranked + 2 walked
    assert sorted(more[:3]) == [1, 3, 5] and set(more[3:]) <= {1, 3, 5}


def test_the_draw_does_not_depend_on_when_an_observation_arrives():
    early, late = vade(seed=4), vade(seed=4)
    outcome = ([0, 1], [[1.0, 0.0]] * 2, [[True, False]] * 2)
    early.observe(0, *outcome)  # arrives before draw 1 ...
    a = [early.next_groups() for _ in range(2)]
    b = [late.next_groups() for _ in range(2)]
    late.observe(0, *outcome)  # ... or after it: draws 0 and 1 may not use it either way
    assert a == b
    assert early.next_groups() == late.next_groups()  # draw 2 uses it in both


@pytest.mark.parametrize("cls", ["vade", "xrpo"])
def test_resume_from_a_checkpoint_draws_what_the_uninterrupted_run_drew(cls):
    make = (lambda s: vade(n=7, qps=2, decay=0.8, seed=s)) if cls == "vade" else xrpo
    gen = torch.Generator().manual_seed(1)

    def outcome(groups):
        rewards = [torch.rand(g.size, generator=gen).round().tolist() for g in groups]
        return [g.question for g in groups], rewards, [[r > 0.5 for r in rs] for rs in rewards]

    # Lightning's order: draw d + 1 is fetched before step d trains and is observed
    ref = make(3)
    batches = [(ref.next_groups(), ref.state_dict())]
    saved = None
    for step in range(8):
        batches.append((ref.next_groups(), ref.state_dict()))
        ref.observe(step, *outcome(batches[step][0]))
        if step == 4:  # checkpoint after training step 4
            saved = copy.deepcopy(ref.state_after(batches[step][1]))
    expected = [g for g, _ in batches[5:]]
    resumed = make(99)
    resumed.load_state_dict(saved)
    got = [resumed.next_groups()]  # draw 5
    # the resumed run trains step 5 and observes it before draw 7, as the reference did
    got.append(resumed.next_groups())
    resumed.observe(5, *outcome_replay(ref, 5))
    got.append(resumed.next_groups())
    resumed.observe(6, *outcome_replay(ref, 6))
    got.append(resumed.next_groups())
    assert got == expected


def outcome_replay(sampler, step):
    (entry,) = [e for e in sampler.log if e["step"] == step]
    return entry["questions"], entry["rewards"], entry["correct"]


def test_steps_must_be_observed_in_order():
    s = vade()
    s.observe(3, [0], [[1.0]], [[True]])
    s.observe(3, [1], [[0.0]], [[False]])  # a repeat keeps the first record
    assert [e["questions"] for e in s.log] == [[0]]
    with pytest.raises(ValueError, match=r"\[sampler\] observed step 1 after step 3"):
        s.observe(1, [0], [[1.0]], [[True]])


def test_beta_draws_have_the_right_mean_and_follow_the_generator():
    a, b = (
        torch.full((20000,), 2.0, dtype=torch.float64),
        torch.full((20000,), 5.0, dtype=torch.float64),
    )
    x = _beta_sample(a, b, torch.Generator().manual_seed(0))
    assert abs(float(x.mean()) - 2 / 7) < 0.01 and float(x.min()) > 0 and float(x.max()) < 1
    small = torch.full((20000,), 0.5, dtype=torch.float64)  # shape < 1 takes the boost path
    assert (
        abs(float(_beta_sample(small, small, torch.Generator().manual_seed(1)).mean()) - 0.5) < 0.01
    )
    same = _beta_sample(a[:5], b[:5], torch.Generator().manual_seed(7))
    assert torch.equal(same, _beta_sample(a[:5], b[:5], torch.Generator().manual_seed(7)))


def xrpo(seed=0, n=4, qps=2, extra=2) -> XrpoSampler:
    cfg = XrpoSamplerConfig(
        name="xrpo", questions_per_step=qps, group_size=2, extra_rollouts=extra, shuffle=False
    )
    return XrpoSampler(range(n), seed, cfg=cfg)


def test_xrpo_gives_extra_rollouts_where_the_interval_shrinks_most():
    s = xrpo(qps=2, extra=2)  # no shuffle: steps draw questions 0,1 / 2,3 / 0,1
    s.observe(0, [0, 1], [[0.0, 1.0, 0.0, 1.0], [1.0] * 4], [[False, True] * 2, [True] * 4])
    assert [g.size for g in s.next_groups()] == [3, 3]  # draw 0: no statistics, prior std for both
    s.next_groups()  # draw 1 (questions 2, 3)
    groups = s.next_groups()  # draw 2 (questions 0, 1) uses step 0
    # question 0: std sqrt(1/3) = 0.577 over 4 rollouts; with its 2 this step n = 6:
    #   gain 0.577 * (1/sqrt(6) - 1/sqrt(7)) = 0.0174, then at n = 7: 0.0141; question 1: std 0
    assert [(g.question, g.size) for g in groups] == [(0, 4), (1, 2)]
    assert s.reward_std(0) == pytest.approx(math.sqrt(1 / 3))


def test_xrpo_respects_the_group_size_cap():
    cfg = XrpoSamplerConfig(
        name="xrpo", questions_per_step=1, group_size=2, extra_rollouts=10, max_group_size=5
    )
    assert [g.size for g in XrpoSampler(range(3), 0, cfg=cfg).next_groups()] == [5]


def test_adaptive_config_problems():
    assert VadeSamplerConfig(name="vade").problems() == []
    assert VadeSamplerConfig(name="vade", decay=1.5).problems()
    assert VadeSamplerConfig(name="vade", prior_success=0.0).problems()
    assert XrpoSamplerConfig(name="xrpo").problems() == []
    assert XrpoSamplerConfig(name="xrpo", max_group_size=4, group_size=8).problems()
