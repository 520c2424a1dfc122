"""Turn-level advantage estimators ``igpo`` and ``matchtir`` on hand-built turn layouts.

Every expected number is derived by hand in the comments from the papers' formulas; the parity
tests restate the authors' released code as plain loops (IGPO's information-gain bookkeeping in
``scrl/llm_agent/generation.py``; MatchTIR's ``compute_grpo_outcome_advantage`` in its verl fork)
and check the estimators against them on worked examples.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.advantages.igpo import (
    IGPOAdvantageConfig,
    igpo_advantage,
    information_gain_rewards,
)
from framework.algorithms.advantages.matchtir import MatchTIRAdvantageConfig, matchtir_advantage
from framework.algorithms.advantages.turns import discounted_turn_returns
from framework.types import AdvantageInputs, TurnSpan


def layout(rollouts, groups, rewards, extras) -> AdvantageInputs:
    """Inputs of rollouts given as lists of turns ``(generated, observation)`` token counts."""
    width = max(sum(g + o for g, o in turns) for turns in rollouts)
    n = len(rollouts)
    mask = torch.zeros((n, width), dtype=torch.bool)
    index = torch.full((n, width), -1, dtype=torch.long)
    spans = []
    for i, turns in enumerate(rollouts):
        pos, mine = 0, []
        for k, (gen, obs) in enumerate(turns):
            mask[i, pos : pos + gen] = True
            index[i, pos : pos + gen + obs] = k
            observation = (pos + gen, pos + gen + obs) if obs else None
            mine.append(TurnSpan(pos, pos + gen, observation=observation))
            pos += gen + obs
        spans.append(mine)
    return AdvantageInputs(
        rewards=torch.tensor(rewards, dtype=torch.float32),
        group_index=torch.tensor(groups),
        token_mask=mask,
        turn_index=index,
        turns=spans,
        extras={k: torch.tensor(v, dtype=torch.float32) for k, v in extras.items()},
    )


def per_turn(adv: torch.Tensor, inputs: AdvantageInputs) -> list[list[float]]:
    """Each turn's advantage (its first generated token's), checking it covers the whole turn and
    that observations and padding get 0."""
    out = []
    for i, turns in enumerate(inputs.turns):
        row = []
        for t in turns:
            values = adv[i, t.start : t.end]
            assert torch.equal(values, values[:1].expand_as(values))
            if t.observation is not None:
                assert (adv[i, t.observation[0] : t.observation[1]] == 0).all()
            row.append(float(values[0]))
        out.append(row)
        assert (adv[i][inputs.turn_index[i] < 0] == 0).all()
    return out


# -- igpo ------------------------------------------------------------------------------------------
IGPO_CASE = dict(
    # group 0: A has 3 turns, B has 2; group 1: C has 2
    rollouts=[[(2, 2), (1, 1), (2, 0)], [(3, 1), (1, 0)], [(1, 2), (2, 0)]],
    groups=[0, 0, 1],
    rewards=[1.0, 0.0, 1.0],
    extras={"answer_probs": [[0.1, 0.3, 0.6], [0.1, 0.05, 0.0], [0.5, 0.5, 0.0]]},
)


def test_information_gain_rewards_by_hand():
    probs = torch.tensor(IGPO_CASE["extras"]["answer_probs"])
    r = information_gain_rewards(probs, torch.tensor([1.0, 0.0, 1.0]), torch.tensor([3, 2, 2]))
    # A: [0.3 - 0.1, 0.6 - 0.3, outcome 1]; B: [0.05 - 0.1, outcome 0, -]; C: [0, outcome 1, -]
    assert_close(r, torch.tensor([[0.2, 0.3, 1.0], [-0.05, 0.0, 0.0], [0.0, 1.0, 0.0]]))


def test_information_gain_matches_the_released_codes_bookkeeping():
    # the authors' loop: before the first turn gt_prob = p_0; after each later turn it appends
    # cur - previous and moves on; the answer turn's reward is the outcome (F1) instead
    probs = [[0.12, 0.40, 0.35, 0.90], [0.3, 0.7, 0.0, 0.0]]
    turns, outcome = [4, 2], [0.5, 1.0]
    expected = []
    for p, t, f1 in zip(probs, turns, outcome, strict=True):
        gains, prev = [], p[0]
        for step in range(1, t):
            gains.append(p[step] - prev)
            prev = p[step]
        row = [*gains[: t - 1], f1]
        expected.append(row + [0.0] * (4 - len(row)))
    got = information_gain_rewards(torch.tensor(probs), torch.tensor(outcome), torch.tensor(turns))
    assert_close(got, torch.tensor(expected))


def test_igpo_by_hand():
    inputs = layout(**IGPO_CASE)
    adv = igpo_advantage(inputs, cfg=IGPOAdvantageConfig(name="igpo"))  # gamma 1
    # group 0 turn rewards {0.2, 0.3, 1.0, -0.05, 0}: mean 0.29, deviations -0.09, 0.01, 0.71,
    # -0.34, -0.29, squares sum 0.712, unbiased std s = sqrt(0.712 / 4)
    s = math.sqrt(0.712 / 4) + 1e-6
    # gamma 1: A = [(-0.09 + 0.01 + 0.71), (0.01 + 0.71), 0.71] / s, B = [(-0.34 - 0.29), -0.29] / s
    # group 1: {0, 1}: mean 0.5, std sqrt(0.5); z = [-1, 1] / sqrt(2); returns [0, 1 / sqrt(2)]
    c = math.sqrt(0.5) + 1e-6
    expected = [[0.63 / s, 0.72 / s, 0.71 / s], [-0.63 / s, -0.29 / s], [0.0, 0.5 / c]]
    for got, want in zip(per_turn(adv, inputs), expected, strict=True):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6)


def test_igpo_discount():
    inputs = layout(**IGPO_CASE)
    adv = igpo_advantage(inputs, cfg=IGPOAdvantageConfig(name="igpo", gamma=0.5))
    s = math.sqrt(0.712 / 4) + 1e-6
    # A: k2 = 0.71; k1 = 0.01 + 0.5 * 0.71 = 0.365; k0 = -0.09 + 0.5 * 0.365 = 0.0925 (all / s)
    # B: k1 = -0.29; k0 = -0.34 + 0.5 * -0.29 = -0.485
    got = per_turn(adv, inputs)
    assert got[0] == pytest.approx([0.0925 / s, 0.365 / s, 0.71 / s], rel=1e-5)
    assert got[1] == pytest.approx([-0.485 / s, -0.29 / s], rel=1e-5)


@pytest.mark.parametrize("p", [0.0, 0.2, 0.7])
def test_igpo_with_an_unchanging_belief_is_the_outcome_alone(p):
    # the belief never moves: every turn but the last earns 0, the last the outcome; so A depends
    # on the outcomes only, whatever the (constant) probability. Hand values for group 0:
    # rewards {0, 0, 1, 0, 0} (A: 3 turns, outcome 1; B: 2 turns, outcome 0): mean 0.2, deviations
    # -0.2 x 4 and 0.8, squares sum 0.8, std sqrt(0.2); gamma 1: A = [0.4, 0.6, 0.8] / std,
    # B = [-0.4, -0.2] / std
    case = dict(IGPO_CASE, extras={"answer_probs": [[p] * 3] * 3})
    inputs = layout(**case)
    got = per_turn(igpo_advantage(inputs, cfg=IGPOAdvantageConfig(name="igpo")), inputs)
    s = math.sqrt(0.2) + 1e-6
    assert got[0] == pytest.approx([0.4 / s, 0.6 / s, 0.8 / s], rel=1e-5)
    assert got[1] == pytest.approx([-0.4 / s, -0.2 / s], rel=1e-5)


def test_igpo_without_discounting_each_groups_turn_advantages_sum_to_zero_at_gamma_zero():
    gen = torch.Generator().manual_seed(0)
    case = dict(IGPO_CASE, extras={"answer_probs": torch.rand(3, 3, generator=gen).tolist()})
    inputs = layout(**case)
    got = per_turn(igpo_advantage(inputs, cfg=IGPOAdvantageConfig(name="igpo", gamma=0.0)), inputs)
    assert sum(got[0]) + sum(got[1]) == pytest.approx(0.0, abs=1e-5)  # group 0's z-scores
    assert sum(got[2]) == pytest.approx(0.0, abs=1e-5)


def test_igpo_refuses_inputs_without_answer_probs():
    inputs = layout(**dict(IGPO_CASE, extras={}))
    with pytest.raises(ValueError, match=r"\[advantage.igpo\] got extras\['answer_probs'\] none"):
        igpo_advantage(inputs, cfg=IGPOAdvantageConfig(name="igpo"))
    inputs = layout(**dict(IGPO_CASE, extras={"answer_probs": [[0.1]] * 3}))  # too few columns
    assert igpo_advantage(inputs, cfg=IGPOAdvantageConfig(name="igpo")).shape == (3, 8)


# -- matchtir --------------------------------------------------------------------------------------
MATCH_CASE = dict(
    # one group: X 3 turns, Y 2 turns, Z 3 turns; rewards = sum of turn rewards (reward=matchtir)
    rollouts=[[(2, 1), (1, 1), (1, 0)], [(1, 2), (2, 0)], [(1, 1), (1, 1), (3, 0)]],
    groups=[0, 0, 0],
    rewards=[3.0, 1.0, 0.5],
    extras={"turn_rewards": [[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.5]]},
)


def released_matchtir(turn_rewards, counts, groups, rewards, gamma=0.9, eps=1e-6):
    """The authors' ``compute_grpo_outcome_advantage`` restated as loops: the GRPO z-score of the
    trajectory score, the z-score of each turn's discounted return among the group's turns with
    the same index (mean 0, std 1 for a lone one), and their mean per turn."""

    def stats(values):
        if len(values) == 1:
            return 0.0, 1.0
        m = sum(values) / len(values)
        return m, math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))

    by_group = {}
    for g, r in zip(groups, rewards, strict=True):
        by_group.setdefault(g, []).append(r)
    returns = []
    for row, t in zip(turn_rewards, counts, strict=True):
        acc, disc = 0.0, [0.0] * t
        for k in reversed(range(t)):
            acc = row[k] + gamma * acc
            disc[k] = acc
        returns.append(disc)
    by_step = {}
    for g, disc in zip(groups, returns, strict=True):
        for k, v in enumerate(disc):
            by_step.setdefault((g, k), []).append(v)
    out = []
    for g, r, disc in zip(groups, rewards, returns, strict=True):
        m, s = stats(by_group[g])
        traj = (r - m) / (s + eps)
        out.append(
            [
                (traj + (v - stats(by_step[g, k])[0]) / (stats(by_step[g, k])[1] + eps)) / 2
                for k, v in enumerate(disc)
            ]
        )
    return out


def test_matchtir_by_hand():
    inputs = layout(**MATCH_CASE)
    got = per_turn(matchtir_advantage(inputs, cfg=MatchTIRAdvantageConfig(name="m")), inputs)
    # A_traj: R = {3, 1, 0.5}, mean 1.5, deviations 1.5, -0.5, -1, squares 3.5, std sqrt(1.75)
    st = math.sqrt(1.75) + 1e-6
    traj = [1.5 / st, -0.5 / st, -1.0 / st]
    # returns (gamma 0.9): X [1 + 0.9 * 1.9, 1 + 0.9 * 1, 1] = [2.71, 1.9, 1]; Y [1, 0];
    # Z [0.9 * 0.45, 0.9 * 0.5, 0.5] = [0.405, 0.45, 0.5]
    # turn 2 (X, Z): {1, 0.5}, mean 0.75, std sqrt(0.125): X +0.25, Z -0.25 over it
    s2 = math.sqrt(0.125) + 1e-6
    assert got[0][2] == pytest.approx((traj[0] + 0.25 / s2) / 2, rel=1e-5)
    assert got[2][2] == pytest.approx((traj[2] - 0.25 / s2) / 2, rel=1e-5)
    # turn 1 (X, Y, Z): {1.9, 0, 0.45}, mean 2.35 / 3; Y's deviation -2.35 / 3
    m1 = 2.35 / 3
    s1 = math.sqrt(((1.9 - m1) ** 2 + m1**2 + (0.45 - m1) ** 2) / 2) + 1e-6
    assert got[1][1] == pytest.approx((traj[1] - m1 / s1) / 2, rel=1e-5)


def test_matchtir_matches_the_released_code_on_a_worked_example():
    case = dict(
        rollouts=[
            [(1, 1), (1, 1), (1, 1), (1, 0)],
            [(2, 1), (1, 0)],
            [(1, 1), (1, 1), (2, 0)],
            [(1, 1), (1, 0)],
            [(1, 1), (1, 1), (1, 0)],
        ],
        groups=[0, 0, 0, 1, 1],
        rewards=[2.5, 1.0, 0.2, 1.0, 2.0],
        extras={
            "turn_rewards": [
                [1.0, 0.0, 1.0, 0.5],
                [0.0, 1.0, 0.0, 0.0],
                [0.0, 0.0, 0.2, 0.0],
                [0.0, 1.0, 0.0, 0.0],
                [1.0, 0.0, 1.0, 0.0],
            ]
        },
    )
    inputs = layout(**case)
    counts = [len(t) for t in case["rollouts"]]
    got = per_turn(matchtir_advantage(inputs, cfg=MatchTIRAdvantageConfig(name="m")), inputs)
    # X's 4th turn is the only one at index 3 in group 0 and group 1's index 2 has one rollout:
    # the released code gives them their raw return (mean 0, std 1), this estimator 0. Compare
    # those separately and everything else with the released code.
    want = released_matchtir(
        case["extras"]["turn_rewards"], counts, case["groups"], case["rewards"]
    )
    lone = {(0, 3), (4, 2)}
    for i, (g_row, w_row) in enumerate(zip(got, want, strict=True)):
        for k, (g, w) in enumerate(zip(g_row, w_row, strict=True)):
            if (i, k) not in lone:
                assert g == pytest.approx(w, rel=1e-5, abs=1e-6), (i, k)
    traj = matchtir_advantage(
        layout(**dict(case, extras={"turn_rewards": torch.zeros(5, 4).tolist()})),
        cfg=MatchTIRAdvantageConfig(name="m"),
    )
    for i, k in lone:  # A_turn = 0: only the trajectory half is left
        t = inputs.turns[i][k]
        assert got[i][k] == pytest.approx(float(traj[i, t.start]), abs=1e-6)


def test_matchtir_with_no_turn_reward_is_half_the_trajectory_advantage():
    case = dict(MATCH_CASE, extras={"turn_rewards": torch.zeros(3, 3).tolist()})
    inputs = layout(**case)
    adv = matchtir_advantage(inputs, cfg=MatchTIRAdvantageConfig(name="m"))
    st = math.sqrt(1.75) + 1e-6
    expected = torch.tensor([1.5, -0.5, -1.0]) / st / 2  # A_traj / 2, see test_matchtir_by_hand
    assert_close(adv, expected.unsqueeze(-1) * inputs.token_mask.float())


def test_matchtir_lone_rollout_and_equal_turns_get_zero():
    # a group of one has no baseline at either level; two identical rollouts neither
    case = dict(
        rollouts=[[(1, 1), (1, 0)], [(1, 0)], [(1, 0)]],
        groups=[0, 1, 1],
        rewards=[2.0, 1.0, 1.0],
        extras={"turn_rewards": [[1.0, 1.0], [1.0, 0.0], [1.0, 0.0]]},
    )
    adv = matchtir_advantage(layout(**case), cfg=MatchTIRAdvantageConfig(name="m"))
    assert (adv == 0).all()


def test_matchtir_refuses_inputs_without_turn_rewards_naming_the_reward():
    inputs = layout(**dict(MATCH_CASE, extras={}))
    with pytest.raises(ValueError, match="reward=matchtir"):
        matchtir_advantage(inputs, cfg=MatchTIRAdvantageConfig(name="matchtir"))
    inputs.turns = ()
    with pytest.raises(ValueError, match="without the turn structure"):
        matchtir_advantage(inputs, cfg=MatchTIRAdvantageConfig(name="matchtir"))


def test_discounted_returns_stop_at_each_rollouts_last_turn():
    r = torch.tensor([[1.0, 2.0, 4.0], [1.0, 2.0, 99.0]])
    valid = torch.tensor([[True, True, True], [True, True, False]])
    # row 0: [1 + 0.5 * (2 + 0.5 * 4), 2 + 0.5 * 4, 4] = [3, 4, 4]; row 1 ignores its padding
    assert_close(discounted_turn_returns(r, valid, 0.5), torch.tensor([[3.0, 4, 4], [2, 2, 0]]))


def test_turn_estimator_configs_validate():
    assert IGPOAdvantageConfig(name="igpo").problems() == []
    assert MatchTIRAdvantageConfig(name="matchtir").problems() == []
    bad = IGPOAdvantageConfig(name="igpo", gamma=1.5, epsilon=-1, probe_batch_size=0).problems()
    assert sorted(p.path for p in bad) == ["epsilon", "gamma", "probe_batch_size"]
    assert [p.path for p in MatchTIRAdvantageConfig(name="m", gamma=-0.1).problems()] == ["gamma"]
