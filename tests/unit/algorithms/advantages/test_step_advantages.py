"""GiGPO and HGPO step-level advantages: hand-derived values from the papers' formulas, the public
code's numbers on the same worked examples, invariants (GRPO limits, zero on tool responses,
HGPO's K = 0 is GiGPO's step part), config checks and the trainer's token layout."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.advantages.gigpo import GiGPOAdvantageConfig, gigpo_advantage
from framework.algorithms.advantages.grpo import GRPOAdvantageConfig, grpo_advantage
from framework.algorithms.advantages.hgpo import HGPOAdvantageConfig, hgpo_advantage
from framework.algorithms.advantages.steps import (
    STATE_KEYS,
    agent_steps,
    calls_state,
    last_calls_state,
    observations_state,
)
from framework.data.schema import QAItem
from framework.registry import ADVANTAGES, load_components
from framework.rl.batch import RolloutBatch, check_advantages
from framework.rollout.scoring import Scores
from framework.training.tokens import pack, right_aligned
from framework.types import AdvantageInputs, ToolCall, Trajectory, TurnSpan

F64 = torch.float64
R2 = math.sqrt(2.0)


def search(*queries: str) -> ToolCall:
    return ToolCall("search", queries=queries)


def batch(rollouts, rewards, ids, gen_len=2, obs_len=1) -> AdvantageInputs:
    """Rollouts as lists of turns, a turn being its list of calls (``[]``: the answer) or
    ``(calls, invalid_calls)``; each turn generates ``gen_len`` tokens, and each turn but the
    last is followed by ``obs_len`` tool-response tokens (token mask 0)."""
    turns, masks = [], []
    for spec in rollouts:
        spans, mask = [], []
        for j, turn in enumerate(spec):
            calls, invalid = turn if isinstance(turn, tuple) else (turn, 0)
            g = gen_len if isinstance(gen_len, int) else gen_len[len(masks)][j]
            start = len(mask)
            mask += [1] * g
            obs = None
            if j < len(spec) - 1:
                obs = (len(mask), len(mask) + obs_len)
                mask += [0] * obs_len
            spans.append(TurnSpan(start, start + g, tuple(calls), invalid, obs))
        turns.append(spans)
        masks.append(mask)
    width = max(max(len(m) for m in masks), 1)
    token_mask = torch.zeros(len(masks), width, dtype=torch.bool)
    for i, m in enumerate(masks):
        token_mask[i, : len(m)] = torch.tensor(m, dtype=torch.bool)
    return AdvantageInputs(
        torch.tensor(rewards, dtype=F64), torch.tensor(ids), token_mask=token_mask, turns=turns
    )


def gigpo(inp, **kw):
    return gigpo_advantage(inp, cfg=GiGPOAdvantageConfig(name="gigpo", **kw))


def hgpo(inp, **kw):
    return hgpo_advantage(inp, cfg=HGPOAdvantageConfig(name="hgpo", **kw))


def grpo(inp, **kw):
    return grpo_advantage(inp, cfg=GRPOAdvantageConfig(name="grpo", **kw))


def per_step(adv: torch.Tensor, inp: AdvantageInputs) -> list[list[float]]:
    """Each turn's advantage (read on its first generated token), rollout by rollout."""
    return [[adv[i, turn.start].item() for turn in turns] for i, turns in enumerate(inp.turns)]


def flat(values: list[list[float]]) -> torch.Tensor:
    return torch.tensor([v for row in values for v in row], dtype=F64)


def _close(actual, expected, atol=1e-6):
    assert_close(flat(actual), flat(expected), rtol=1e-5, atol=atol)


# GiGPO's worked example: one question, three rollouts; r0 and r1 share their first call (the
# same anchor state before turn 1) and then differ; r2 starts elsewhere.
#   r0: search(a) | search(b) | answer    R = 1    returns 0.95^2, 0.95, 1 = 0.9025, 0.95, 1
#   r1: search(a) | answer                R = 0    returns 0, 0
#   r2: search(c) | answer                R = 1    returns 0.95, 1
GIGPO_EXAMPLE = ([[[search("a")], [search("b")], []], [[search("a")], []], [[search("c")], []]],)


def gigpo_example() -> AdvantageInputs:
    return batch(*GIGPO_EXAMPLE, [1.0, 0.0, 1.0], [0, 0, 0])


# HGPO's worked example: four rollouts; with the latest-observation state, r0, r1 and r2 all stand
# after search(b) at turn 2, but r2 came there from search(c).
#   r0: search(a) | search(b) | answer    R = 1    returns 0.9025, 0.95, 1
#   r1: search(a) | search(b) | answer    R = 0    returns 0, 0, 0
#   r2: search(c) | search(b) | answer    R = 1    returns 0.9025, 0.95, 1
#   r3: search(c) | answer                R = 0    returns 0, 0
def hgpo_example() -> AdvantageInputs:
    a, b, c = [search("a")], [search("b")], [search("c")]
    return batch([[a, b, []], [a, b, []], [c, b, []], [c, []]], [1.0, 0.0, 1.0, 0.0], [5] * 4)


# --------------------------------------------------------------------------- state keys


def test_state_keys_calls_and_last_calls():
    t0 = TurnSpan(0, 2, (search("a", "b"),))
    t1 = TurnSpan(3, 5, (ToolCall("visit", title="Paris", goal="find the mayor"),), 1)
    # before the first turn every rollout is in the same (initial) state
    assert calls_state([]) == calls_state(()) == ()
    assert last_calls_state([]) == ()
    call_ab = ("search", ("a", "b"), None, None)
    assert calls_state([t0]) == (((call_ab,), 0),)
    # the visit goal does not change the page, so it does not change the state; the invalid
    # call (answered with an error message) does
    same_page = TurnSpan(9, 12, (ToolCall("visit", title="Paris", goal="other"),), 1)
    assert calls_state([t0, t1]) == calls_state([t0, same_page])
    assert calls_state([t0, t1]) != calls_state([t0, TurnSpan(3, 5, t1.calls, 0)])
    # query order matters (the observation lists results query by query)
    assert calls_state([TurnSpan(0, 2, (search("b", "a"),))]) != calls_state([t0])
    # last_calls forgets how the agent got there
    other = TurnSpan(0, 2, (search("z"),))
    assert last_calls_state([t0, t1]) == last_calls_state([other, t1])
    assert calls_state([t0, t1]) != calls_state([other, t1])
    assert set(STATE_KEYS) >= {"calls", "last_calls", "observations"}


def test_observations_state_splits_equal_calls_that_saw_different_pages():
    page_a, page_b = TurnSpan.digest("[1] Paris: capital"), TurnSpan.digest("[1] Paris: Texas")
    assert page_a != page_b and len(page_a) == 16
    seen_a = TurnSpan(0, 2, (search("paris"),), 0, (2, 4), page_a)
    seen_b = TurnSpan(0, 2, (search("paris"),), 0, (2, 4), page_b)
    again_a = TurnSpan(5, 9, (search("paris"),), 0, (9, 12), page_a)  # positions do not matter
    assert observations_state([]) == ()
    assert calls_state([seen_a]) == calls_state([seen_b])
    assert observations_state([seen_a]) != observations_state([seen_b])
    assert observations_state([seen_a]) == observations_state([again_a])
    assert seen_a.shifted(3).observation_digest == page_a
    # GiGPO under it, rewards 0 and 1: search(paris) then answer, the same call seeing page a in
    # one rollout and page b in the other. A_E = -+1/sqrt(2). Turn 0 (the initial state, one
    # group): returns 0, 0.95 -> A_S = -+1/sqrt(2). Turn 1: under ``calls`` one anchor group with
    # returns 0, 1 -> A_S = -+1/sqrt(2); under ``observations`` two groups of one step -> A_S = 0.
    inp = batch([[[search("paris")], []]] * 2, [0.0, 1.0], [0, 0])
    inp = replace(
        inp,
        turns=[
            [replace(t[0], observation_digest=d), t[1]] for t, d in zip(inp.turns, (page_a, page_b))
        ],
    )
    h = 2**-0.5
    _close(per_step(gigpo(inp, state_key="calls"), inp), [[-2 * h, -2 * h], [2 * h, 2 * h]])
    _close(per_step(gigpo(inp, state_key="observations"), inp), [[-2 * h, -h], [2 * h, h]])


def test_agent_steps_discounted_returns_and_states():
    inp = gigpo_example()
    steps = agent_steps(inp, gamma=0.95, state_key=calls_state, name="test")
    assert steps.rollout.tolist() == [0, 0, 0, 1, 1, 2, 2]
    assert steps.turn.tolist() == [0, 1, 2, 0, 1, 0, 1]
    # G(i, t) = 0.95^(T_i - 1 - t) R_i
    assert_close(steps.returns, torch.tensor([0.9025, 0.95, 1, 0, 0, 0.95, 1], dtype=F64))
    a = ((("search", ("a",), None, None),), 0)
    assert steps.states[1] == steps.states[4] == (a,)  # r0 and r1 after search(a)
    assert steps.states[0] == steps.states[3] == steps.states[5] == ()


# --------------------------------------------------------------------------- GiGPO


def test_gigpo_hand_values_std_normalised():
    # epsilon 0 for closed forms. Episode level: R = [1, 0, 1], mean 2/3, Bessel std
    # sqrt((1/9 + 4/9 + 1/9) / 2) = sqrt(1/3) -> A_E = [1/√3, -2/√3, 1/√3] = [0.57735, -1.15470, .]
    # Anchor groups (state = calls so far):
    #   U0 = turn 0 of all: G = [0.9025, 0, 0.95], mean 0.6175, dev [0.285, -0.6175, 0.3325],
    #        std = sqrt(0.5730875 / 2) = 0.535297 -> A_S = [0.532415, -1.153567, 0.621152]
    #   U1 = {r0 t1, r1 t1} (both after search(a)): G = [0.95, 0] -> A_S = [1/√2, -1/√2]
    #   r2 t1 (after search(c)) and r0 t2 (after a, b) are alone -> A_S = 0
    # A = A_E + 1 * A_S
    a_e = [1 / math.sqrt(3), -2 / math.sqrt(3), 1 / math.sqrt(3)]
    std0 = math.sqrt((0.285**2 + 0.6175**2 + 0.3325**2) / 2)
    u0 = [0.285 / std0, -0.6175 / std0, 0.3325 / std0]
    expected = [
        [a_e[0] + u0[0], a_e[0] + 1 / R2, a_e[0]],
        [a_e[1] + u0[1], a_e[1] - 1 / R2],
        [a_e[2] + u0[2], a_e[2]],
    ]
    inp = gigpo_example()
    got = per_step(gigpo(inp, epsilon=0.0), inp)
    _close(got, expected)
    _close(got, [[1.109765, 1.284457, 0.577350], [-2.308268, -1.861808], [1.198502, 0.577350]])


def test_gigpo_hand_values_mean_norm():
    # scale_by_std off (the code's mean_norm): A_E = R - 2/3 = [1/3, -2/3, 1/3];
    # U0: G - 0.6175 = [0.285, -0.6175, 0.3325]; U1: G - 0.475 = [0.475, -0.475]
    inp = gigpo_example()
    got = per_step(gigpo(inp, scale_by_std=False), inp)
    expected = [
        [1 / 3 + 0.285, 1 / 3 + 0.475, 1 / 3],
        [-2 / 3 - 0.6175, -2 / 3 - 0.475],
        [1 / 3 + 0.3325, 1 / 3],
    ]
    _close(got, expected)
    # omega scales the step part only
    half = per_step(gigpo(inp, scale_by_std=False, omega=0.5), inp)
    _close(
        half,
        [
            [1 / 3 + 0.1425, 1 / 3 + 0.2375, 1 / 3],
            [-2 / 3 - 0.30875, -2 / 3 - 0.2375],
            [1 / 3 + 0.16625, 1 / 3],
        ],
    )


@pytest.mark.parametrize(
    ("scale_by_std", "expected"),
    [
        (True, [[1.117952, 1.292645, 0.585539], [-2.617409, -2.170953], [1.206687, 0.585539]]),
        (False, [[0.570714, 0.760714, 0.285714], [-1.331786, -1.189286], [0.618214, 0.285714]]),
    ],
)
def test_gigpo_matches_verl_agent_code_on_the_worked_example(scale_by_std, expected):
    """verl-agent's ``gigpo/core_gigpo.py`` (``compute_gigpo_outcome_advantage``: episode and
    step levels, anchor groups by identical ``anchor_obs``, ``step_advantage_w = 1``), transcribed
    and run out of tree on this example (one row per step, each row carrying its rollout's reward
    and its discounted return, anchors = our ``calls`` keys), gave these numbers for
    ``mode=mean_std_norm`` and ``mean_norm``; ours agree with ``episode_stats_per_step=true``, the
    code's default of counting a rollout once per step in the episode mean and std.

    By hand for mean_norm: per-step episode mean = (1 + 1 + 1 + 0 + 0 + 1 + 1) / 7 = 5/7, so
    A_E = [2/7, -5/7, 2/7]; r0 t0 = 2/7 + 0.285 = 0.570714, r1 t0 = -5/7 - 0.6175 = -1.331786.
    """
    inp = gigpo_example()
    got = per_step(gigpo(inp, scale_by_std=scale_by_std, episode_stats_per_step=True), inp)
    _close(got, expected, atol=2e-6)
    assert abs(2 / 7 + 0.285 - 0.570714) < 1e-6 and abs(-5 / 7 - 0.6175 + 1.331786) < 1e-6


def test_gigpo_single_turn_group_is_scaled_grpo():
    # one turn per rollout: every step is turn 0, whose state (the question) the whole group
    # shares, so the anchor group is the question's group and G = 0.95^0 R = R: A_S = A_E and
    # A = (1 + omega) GRPO on every generated token.
    for inp in random_batches(max_turns=1):
        for omega in (1.0, 0.3):
            expected = (1 + omega) * grpo(inp).unsqueeze(-1) * inp.token_mask
            assert_close(gigpo(inp, omega=omega), expected, atol=1e-9, rtol=1e-9)


def test_gigpo_omega_zero_is_episode_grpo_per_token():
    for inp in random_batches():
        for std in (True, False):
            expected = grpo(inp, scale_by_std=std).unsqueeze(-1) * inp.token_mask
            assert_close(gigpo(inp, omega=0.0, scale_by_std=std), expected, atol=1e-9, rtol=0)


def test_gigpo_step_part_has_zero_mean_in_every_anchor_group():
    # mean_norm: A_S = G - mean_U G sums to 0 over each anchor group (question, calls so far)
    for inp in random_batches():
        step = gigpo(inp, scale_by_std=False) - gigpo(inp, scale_by_std=False, omega=0.0)
        sums: dict = {}
        for i, turns in enumerate(inp.turns):
            for t, turn in enumerate(turns):
                key = (int(inp.group_index[i]), calls_state(turns[:t]))
                sums[key] = sums.get(key, 0.0) + step[i, turn.start].item()
        assert all(abs(v) < 1e-9 for v in sums.values()), sums


# --------------------------------------------------------------------------- HGPO


def test_hgpo_hand_values():
    # epsilon 0, population std, K = 2, alpha = 1: w = (k + 1) = 1, 2, 3.
    # Level 0 (latest observation):  turn 0 of all: G = [0.9025, 0, 0.9025, 0] -> ±1;
    #   after a: [0.95, 0] -> ±1; after c: [0.95, 0] -> ±1;
    #   after b (r0, r1, r2 at turn 2): [1, 0, 1], mean 2/3, std √2/3 -> [1/√2, -√2, 1/√2]
    # Level 1 (two states): (start, a) r0 r1 ±1; (start, c) r2 r3 ±1; (a, b) r0 r1 ±1;
    #   (c, b) r2 alone. Level 2: (start, a, b) r0 r1 ±1; (start, c, b) r2 alone.
    # Turns 0 and 1: every level they have gives ±1 -> ±1.
    # r0 t2 = (1/√2 + 2·1 + 3·1) / 6 = 0.951184; r1 t2 = (-√2 - 2 - 3) / 6 = -1.069036;
    # r2 t2 has a baseline only at level 0 -> 1/√2.
    inp = hgpo_example()
    expected = [[1, 1, (1 / R2 + 5) / 6], [-1, -1, (-R2 - 5) / 6], [1, 1, 1 / R2], [-1, -1]]
    got = per_step(hgpo(inp, epsilon=0.0), inp)
    _close(got, expected)
    assert abs((1 / R2 + 5) / 6 - 0.951184) < 1e-6 and abs((-R2 - 5) / 6 + 1.069036) < 1e-6
    # alpha = 0: uniform weights -> r0 t2 = (1/√2 + 1 + 1) / 3 = 0.902369
    uniform = per_step(hgpo(inp, epsilon=0.0, alpha=0.0), inp)
    _close(uniform, [[1, 1, (1 / R2 + 2) / 3], [-1, -1, (-R2 - 2) / 3], [1, 1, 1 / R2], [-1, -1]])
    # K = 0: level 0 alone
    _close(
        per_step(hgpo(inp, epsilon=0.0, K=0), inp),
        [[1, 1, 1 / R2], [-1, -1, -R2], [1, 1, 1 / R2], [-1, -1]],
    )


def test_hgpo_matches_public_code_on_the_worked_example():
    """``recipe/hgpo/core_hgpo.py`` (``hgpo_advantage_estimate``, the ICLR 2026 recipe of
    verl-agent as mirrored in SERL), transcribed and run out of tree on this example with its
    script defaults (``history_length=2``, ``mode=mean_std_norm``, ``length_weight_alpha=1``,
    ``base_group=False``) and our ``last_calls`` keys as ``anchor_obs``, gave these numbers. The
    code weighs a window of L states by (L + 1)^alpha, i.e. level k by (k + 2)^alpha, which
    ``weight_offset=2`` reproduces: r0 t2 = (2/√2 + 3 + 4) / 9 = 0.934913, r1 t2 =
    (-2√2 - 3 - 4) / 9 = -1.092047 (eps 1e-6 shifts the sixth decimal)."""
    inp = hgpo_example()
    code = [
        [0.999997, 0.999998, 0.934911],
        [-0.999997, -0.999998, -1.092045],
        [0.999997, 0.999998, 0.707105],
        [-0.999997, -0.999998],
    ]
    _close(per_step(hgpo(inp, weight_offset=2), inp), code, atol=5e-6)
    assert abs((R2 + 7) / 9 - 0.934913) < 1e-6


def test_hgpo_k0_equals_gigpo_step_part():
    for inp in random_batches():
        for key in ("calls", "last_calls"):
            for std, unbiased in ((True, True), (True, False), (False, False)):
                kw = dict(state_key=key, scale_by_std=std, unbiased_std=unbiased)
                step = gigpo(inp, **kw) - gigpo(inp, omega=0.0, **kw)
                assert_close(hgpo(inp, K=0, **kw), step, atol=1e-9, rtol=0)


def test_hgpo_full_history_key_collapses_to_level_zero():
    # with the state = every call so far, equal states mean equal histories: every level's group
    # is level 0's (or the level is missing), so the weighted mean is A_0 whatever K and alpha
    for inp in random_batches():
        base = hgpo(inp, state_key="calls", K=0)
        for k, alpha in ((1, 1.0), (3, 2.0)):
            assert_close(hgpo(inp, state_key="calls", K=k, alpha=alpha), base, atol=1e-9, rtol=0)


# --------------------------------------------------------------------------- both


@pytest.mark.parametrize("estimator", [gigpo, hgpo])
def test_tool_responses_and_padding_get_zero_and_turns_are_constant(estimator):
    for inp in random_batches():
        adv = estimator(inp)
        assert adv.shape == inp.token_mask.shape
        assert torch.all(adv[~inp.token_mask] == 0)
        for i, turns in enumerate(inp.turns):
            for turn in turns:
                values = adv[i, turn.start : turn.end]
                assert torch.all(values == values[0])


@pytest.mark.parametrize(("estimator", "z"), [(gigpo, 1 / R2), (hgpo, 1.0)])
def test_equal_rewards_prefer_the_shorter_path_and_failures_give_zero(estimator, z):
    rollouts = [[[search("a")], []], [[]], []]  # two turns; one turn; no turn at all
    # all wrong: every return is 0, so is every advantage
    inp = batch(rollouts, [0.0, 0.0, 0.0], [1, 1, 1])
    assert torch.equal(estimator(inp), torch.zeros_like(inp.token_mask, dtype=F64))
    # equal rewards: A_E = 0, but at the shared first turn G = [0.95 * 0.5, 0.5]: the rollout that
    # answered at once is ahead: ±1/√2 with GiGPO's Bessel std, ±1 with HGPO's population std
    # (its second turn is alone at every level); without discount every advantage is 0
    inp = batch(rollouts, [0.5, 0.5, 0.5], [1, 1, 1])
    _close(per_step(estimator(inp, epsilon=0.0), inp)[:2], [[-z, 0.0], [z]])
    assert torch.equal(estimator(inp, gamma=1.0), torch.zeros_like(inp.token_mask, dtype=F64))
    # the rollout without turns has no token to carry an advantage
    assert torch.all(estimator(batch(rollouts, [1.0, 0.0, 0.0], [1, 1, 1]))[2] == 0)


def test_missing_turns_or_token_mask_is_reported():
    inp = AdvantageInputs(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match=r"\[advantage.gigpo\].*Fix:"):
        gigpo(inp)
    inp.token_mask = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"\[advantage.hgpo\] .*turns for 0 of 2 rollouts"):
        hgpo(inp)


def test_config_problems_name_every_bad_field():
    bad = GiGPOAdvantageConfig(name="gigpo", gamma=0.0, state_key="nope", omega=-1.0)
    assert {p.path for p in bad.problems()} == {"gamma", "state_key", "omega"}
    bad = HGPOAdvantageConfig(name="hgpo", gamma=1.5, K=-1, alpha=math.inf, weight_offset=0)
    assert {p.path for p in bad.problems()} == {"gamma", "K", "alpha", "weight_offset"}
    assert GiGPOAdvantageConfig(name="gigpo").problems() == []
    assert HGPOAdvantageConfig(name="hgpo").problems() == []
    # the defaults: the papers' and their code's
    g, h = GiGPOAdvantageConfig(name="gigpo"), HGPOAdvantageConfig(name="hgpo")
    assert (g.gamma, g.omega, g.state_key, g.scale_by_std) == (0.95, 1.0, "calls", True)
    assert (h.gamma, h.K, h.alpha, h.state_key, h.unbiased_std) == (
        0.95,
        2,
        1.0,
        "last_calls",
        False,
    )


def test_a_new_state_key_is_selectable_by_name(monkeypatch):
    # the extension point: a key by turn number alone puts r2's turn 1 (after search(c)) in the
    # anchor group of r0 and r1's turn 1 (after search(a))
    monkeypatch.setitem(STATE_KEYS, "turn_number", len)
    cfg = GiGPOAdvantageConfig(name="gigpo", state_key="turn_number", scale_by_std=False)
    assert cfg.problems() == []
    inp = gigpo_example()
    step = per_step(gigpo_advantage(inp, cfg=cfg) - gigpo(inp, omega=0.0, scale_by_std=False), inp)
    # turn 1: G = [0.95, 0, 1], mean 0.65 -> [0.3, -0.65, 0.35]
    _close([[step[0][1], step[1][1], step[2][1]]], [[0.3, -0.65, 0.35]])


def test_registered_and_in_the_trainer_layout():
    """Trajectories -> RolloutBatch -> ``gigpo`` through the registry -> the trainer's shape
    check -> pack's right-aligned layout: generated tokens carry their turn's value, the prompt
    and the tool response none."""
    load_components(plugins=False)
    assert {"gigpo", "hgpo"} <= set(ADVANTAGES.names())
    # prompt 2 tokens; turn 0 generates 2 tokens and calls search(a), the tool answers with 3
    # tokens, turn 1 generates 2 and answers. Second rollout answers at once (2 tokens).
    t0 = TurnSpan(2, 4, (search("a"),), 0, (4, 7))
    trajs = [
        Trajectory(
            0, 0, list(range(10, 19)), [0, 0, 1, 1, 0, 0, 0, 1, 1], 2, turns=[t0, TurnSpan(7, 9)]
        ),
        Trajectory(0, 0, [10, 11, 12, 13], [0, 0, 1, 1], 2, turns=[TurnSpan(2, 4)]),
    ]
    item = QAItem("q0", "who?", ("x",), None, None, None, "synth")
    scores = Scores(torch.tensor([1.0, 0.0]), {})
    inputs = RolloutBatch.build(trajs, [item], scores, pad_id=0).advantage_inputs()
    cfg = GiGPOAdvantageConfig(name="gigpo", scale_by_std=False)
    adv = check_advantages(ADVANTAGES.bind(cfg)(inputs), inputs, "gigpo")
    # A_E = ±0.5; turn 0: G = [0.95, 0] -> ±0.475; turn 1 of r0 alone -> 0
    assert_close(
        adv, torch.tensor([[0.975, 0.975, 0, 0, 0, 0.5, 0.5], [-0.975, -0.975, 0, 0, 0, 0, 0]])
    )
    packed = right_aligned(adv, trajs, width=7)
    loss_mask = pack(trajs, pad_id=0).loss_mask.bool()
    assert torch.all(packed[~loss_mask] == 0)
    assert_close(packed[loss_mask], torch.tensor([0.975, 0.975, 0.5, 0.5, -0.975, -0.975]))


# --------------------------------------------------------------------------- random batches


def random_batches(n_batches=12, seed=2026, max_turns=4):
    """Non-contiguous, interleaved groups of 1..5 rollouts with 1..max_turns turns, calls drawn
    from a small vocabulary (so states repeat), some invalid calls, binary or continuous rewards,
    turns of 1..3 generated tokens."""
    gen = torch.Generator().manual_seed(seed)

    def draw(high: int) -> int:
        return int(torch.randint(0, high, (1,), generator=gen))

    vocab = [[search("a")], [search("b")], [search("a", "b")], [ToolCall("visit", title="P")]]
    for b in range(n_batches):
        ids = [g * 7 + 3 for g in range(1 + draw(4)) for _ in range(1 + draw(5))]
        order = torch.randperm(len(ids), generator=gen).tolist()
        ids = [ids[o] for o in order]
        rollouts, lengths = [], []
        for _ in ids:
            n = 1 + draw(max_turns)
            turns = [(vocab[draw(len(vocab))], draw(4) // 3) for _ in range(n - 1)] + [[]]
            rollouts.append(turns)
            lengths.append([1 + draw(3) for _ in range(n)])
        if b % 2:
            rewards = torch.rand(len(ids), generator=gen, dtype=F64).tolist()
        else:
            rewards = torch.randint(0, 2, (len(ids),), generator=gen).double().tolist()
        yield batch(rollouts, rewards, ids, gen_len=lengths, obs_len=2)
