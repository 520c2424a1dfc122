"""DAPO's soft overlong penalty: the shaping function, the ``overlong`` reward, its place in a
``weighted_sum`` and the token counts the reward batch carries (tool responses excluded)."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.rewards.shaping import overlong_penalty
from framework.data.schema import QAItem
from framework.registry import REWARDS, load_components
from framework.rewards.composite import WeightedSumConfig, reward_parts
from framework.rewards.length import OverlongRewardConfig, overlong_reward
from framework.rollout.scoring import reward_inputs, score
from framework.types import RewardInputs, Trajectory

load_components(plugins=False)


def test_penalty_hand_values():
    # L_max = 10, L_cache = 4: free up to 10 - 4 = 6 tokens; inside the window (6 - |y|) / 4;
    # -1 from L_max on.
    #   |y| = 0, 6 -> 0;  7 -> -1/4;  8 -> -2/4;  9 -> -3/4;  10 -> -4/4 = -1;  11, 100 -> -1
    lengths = torch.tensor([0, 6, 7, 8, 9, 10, 11, 100])
    expected = torch.tensor([0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0, -1.0])
    assert_close(overlong_penalty(lengths, 10, 4), expected)


def test_penalty_dapo_setting():
    # DAPO: L_max = 20480, L_cache = 4096 -> free up to 16384 tokens;
    #   18432: (16384 - 18432) / 4096 = -0.5;  20480: -1;  16385: -1/4096
    lengths = torch.tensor([16384, 16385, 18432, 20480, 20481])
    expected = torch.tensor([0.0, -1 / 4096, -0.5, -1.0, -1.0])
    assert_close(overlong_penalty(lengths, 20480, 4096), expected)


def test_penalty_invariants():
    lengths = torch.arange(0, 60)
    for max_length, cache in ((50, 1), (50, 10), (50, 50), (7, 3)):
        p = overlong_penalty(lengths, max_length, cache)
        assert ((p <= 0) & (p >= -1)).all()
        assert (p[1:] <= p[:-1]).all()  # longer is never better
        assert (p[: max_length - cache + 1] == 0).all()  # free up to L_max - L_cache
        assert (p[max_length:] == -1).all()  # -1 from L_max on (continuous at L_max)
        if cache > 1:  # one step in the window costs 1 / L_cache
            steps = p[max_length - cache : max_length + 1].diff()
            assert_close(steps, torch.full_like(steps, -1 / cache))


def _inputs(counts, completions=None, golds=None) -> RewardInputs:
    n = len(counts) if counts is not None else len(completions)
    completions = completions or ["<answer>x</answer>"] * n
    columns = {"golden_answers": golds} if golds is not None else {}
    return RewardInputs(
        group_index=torch.zeros(n, dtype=torch.long),
        completions=completions,
        columns=columns,
        generated_tokens=counts,
    )


def test_reward_registered_and_reads_generated_tokens():
    cfg = OverlongRewardConfig(name="overlong", max_length=10, cache_length=4)
    assert REWARDS.get("overlong").config_cls is OverlongRewardConfig
    got = REWARDS.bind(cfg)(_inputs([3, 8, 12]))
    # 3 -> 0; 8 -> (6 - 8) / 4 = -0.5; 12 -> -1
    assert_close(got, torch.tensor([0.0, -0.5, -1.0]))
    assert got.dtype == torch.get_default_dtype()


def test_reward_without_token_counts_is_refused():
    cfg = OverlongRewardConfig(name="overlong")
    with pytest.raises(ValueError, match="generated_tokens"):
        overlong_reward(_inputs(None, completions=["a", "b"]), cfg=cfg)
    with pytest.raises(ValueError, match="generated_tokens"):
        overlong_reward(
            RewardInputs(torch.zeros(2), ["a", "b"], generated_tokens=[1]),
            cfg=cfg,
        )


@pytest.mark.parametrize(
    "fields, path",
    [
        ({"max_length": 0}, "max_length"),
        ({"max_length": 10, "cache_length": 11}, "cache_length"),
        ({"cache_length": 0}, "cache_length"),
    ],
)
def test_config_problems(fields, path):
    assert path in [p.path for p in OverlongRewardConfig(name="overlong", **fields).problems()]
    assert OverlongRewardConfig(name="overlong").problems() == []


def test_weighted_sum_adds_the_penalty_to_the_main_reward():
    cfg = WeightedSumConfig(
        name="weighted_sum",
        terms=[
            {"name": "outcome", "weight": 1.0},
            {"name": "overlong", "weight": 1.0, "max_length": 10, "cache_length": 4},
        ],
    )
    assert cfg.problems() == []
    inputs = _inputs(
        [5, 9, 20],
        completions=["<answer>Paris</answer>", "<answer>Paris</answer>", "<answer>Rome</answer>"],
        golds=[["Paris"]] * 3,
    )
    total, parts, _ = reward_parts(inputs, cfg)
    # outcome 1, 1, 0; overlong: 5 -> 0, 9 -> (6 - 9) / 4 = -0.75, 20 -> -1
    assert_close(parts["outcome"], torch.tensor([1.0, 1.0, 0.0]))
    assert_close(parts["overlong"], torch.tensor([0.0, -0.75, -1.0]))
    assert_close(total, torch.tensor([1.0, 0.25, -1.0]))
    # a bad term field is reported under its term
    bad = WeightedSumConfig(name="weighted_sum", terms=[{"name": "overlong", "cache_length": 0}])
    assert "terms.0.cache_length" in [p.path for p in bad.problems()]


ITEM = QAItem("q0", "Where is the Louvre?", ("Paris",), None, 1, None, "test")


def _trajectory(prompt: int, spans: list[tuple[int, int]], answer: str) -> Trajectory:
    """Prompt tokens, then (generated, tool response) token spans; loss mask 1 on generated."""
    mask = [0] * prompt
    for generated, tool in spans:
        mask += [1] * generated + [0] * tool
    t = Trajectory(0, 0, [5] * len(mask), mask, prompt, answer=answer)
    t.response_text = f"<think>t</think><answer>{answer}</answer>"
    return t


def test_reward_batch_counts_generated_tokens_without_tool_responses():
    # 3 prompt tokens; 4 generated, 50 tool-response tokens, 2 generated: |y| = 6 (not 56)
    long_search = _trajectory(3, [(4, 50), (2, 0)], "Paris")
    # 2 prompt tokens; 9 generated, 1 tool-response token, 3 generated: |y| = 12
    verbose = _trajectory(2, [(9, 1), (3, 0)], "Paris")
    inputs = reward_inputs([long_search, verbose], [ITEM])
    assert list(inputs.generated_tokens) == [6, 12]
    cfg = WeightedSumConfig(
        name="weighted_sum",
        terms=[
            {"name": "outcome", "weight": 1.0},
            {"name": "overlong", "weight": 1.0, "max_length": 12, "cache_length": 8},
        ],
    )
    # free up to 12 - 8 = 4 tokens: 6 -> (4 - 6) / 8 = -0.25; 12 -> (4 - 12) / 8 = -1
    # totals: 1 - 0.25 = 0.75 and 1 - 1 = 0; the long tool response costs nothing
    scores = score([long_search, verbose], [ITEM], cfg)
    assert_close(scores.components["overlong"], torch.tensor([-0.25, -1.0]))
    assert_close(scores.total, torch.tensor([0.75, 0.0]))
