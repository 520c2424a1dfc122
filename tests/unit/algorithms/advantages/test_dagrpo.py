"""DaGRPO's first part (reconstructed; framework/algorithms/advantages/dagrpo.py) against
../shared/METHODS-2.md item 15."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.advantages.dagrpo import DaGRPOAdvantageConfig, dagrpo_advantage, jaccard
from framework.algorithms.advantages.grpo import grpo_advantage
from framework.registry import INPUT_PROVIDERS, load_components
from framework.types import AdvantageInputs

load_components(plugins=False)
CFG = DaGRPOAdvantageConfig(name="dagrpo")
SAME = "search the director of jaws then answer with his name now please"


def inputs(rewards, groups, texts):
    return AdvantageInputs(
        torch.tensor(rewards, dtype=torch.float64),
        torch.tensor(groups),
        extras={"think_texts": list(texts)},
    )


def test_jaccard_by_hand():
    assert jaccard("a b c", "b c d") == pytest.approx(2 / 4)
    assert jaccard("A b", "a B") == 1.0 and jaccard("", "") == 1.0


def test_a_wrong_twin_of_a_correct_rollout_is_masked():
    # rollout 1 is wrong with the correct rollout 0's text plus one word (Jaccard 11/12 > 0.9);
    # rollout 2 is wrong and distinct; group 1's near twin of rollout 0 is in another question
    texts = [SAME, SAME + " maybe", "no idea what to do", SAME + " maybe"]
    x = inputs([1.0, 0.0, 0.0, 0.0], [0, 0, 0, 1], texts)
    got = dagrpo_advantage(x, cfg=CFG)
    grpo = grpo_advantage(x, cfg=CFG)
    assert float(got[1]) == 0.0 and float(grpo[1]) < 0
    assert_close(got[[0, 2, 3]], grpo[[0, 2, 3]])


def test_without_near_twins_it_is_grpo():
    x = inputs([1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], ["a b", "c d", "e f", "g h"])
    assert_close(dagrpo_advantage(x, cfg=CFG), grpo_advantage(x, cfg=CFG))
    assert "think_texts" in INPUT_PROVIDERS
    assert DaGRPOAdvantageConfig(name="dagrpo", threshold=2.0).problems()
