"""Learning-rate schedule, rollout metrics and checkpoint lookup on hand-made values."""

from __future__ import annotations

import pytest
import torch

from framework.data.schema import QAItem
from framework.rollout.metrics import rollout_metrics, zero_variance_fraction
from framework.rollout.scoring import Scores
from framework.training.checkpoints import checkpoint_name, latest_checkpoint
from framework.training.schedule import lr_multiplier
from framework.types import Trajectory


def test_schedules_hand_values():
    const = lr_multiplier("constant", 3, 10)
    assert [const(s) for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    lin = lr_multiplier("linear", 0, 4)
    assert [lin(s) for s in range(5)] == [1.0, 0.75, 0.5, 0.25, 0.0]
    cos = lr_multiplier("cosine", 2, 6)
    assert (
        cos(2) == pytest.approx(1.0)
        and cos(4) == pytest.approx(0.5)
        and cos(6) == pytest.approx(0.0)
    )
    with pytest.raises(ValueError, match=r"\[optim.schedule\] got 'warm'"):
        lr_multiplier("warm", 0, 1)


def test_zero_variance_fraction_counts_constant_groups():
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.3, 0.3, 0.3, 0.5])
    groups = torch.tensor([0, 0, 4, 4, 7, 7, 9])  # ids need not be contiguous; group 9 has one
    assert zero_variance_fraction(rewards, groups) == pytest.approx(3 / 4)


def _traj(group, status, answer, think, calls=0, invalid=0, tokens=10):
    t = Trajectory(0, group, [1] * 5, [0] * 5, 3, status=status, answer=answer, think_text=think)
    t.stats = {
        "turns": 2,
        "tool_calls": calls,
        "queries": calls,
        "visits": 0,
        "invalid_calls": invalid,
        "truncated_turns": 0,
        "generated_tokens": tokens,
        "response_tokens": tokens + 5,
    }
    return t


def test_rollout_metrics_hand_values():
    items = [
        QAItem("q0", "?", ("Paris",), (("France",), ("Paris",)), 2, None, "t"),
        QAItem("q1", "?", ("Bach",), (("Leipzig",),), 1, None, "t"),
    ]
    trajs = [
        _traj(0, "ok", "paris", "France then Paris", calls=2),
        _traj(0, "ok", "Lyon", "France", calls=1, invalid=1),
        _traj(1, "format_error", None, "Leipzig", calls=1),
        _traj(1, "over_budget", None, "", calls=4, tokens=30),
    ]
    scores = Scores(
        torch.tensor([1.0, 0.15, 0.0, 0.0]), {"e_grpo": torch.tensor([1.0, 0.15, 0, 0])}
    )
    m = rollout_metrics(trajs, items, scores)
    assert m["accuracy"] == 0.25 and m["reward"] == pytest.approx(0.2875)
    assert m["format_valid"] == 0.5 and m["format_error"] == 0.25 and m["over_budget"] == 0.25
    assert m["entity_match_rate"] == pytest.approx((1.0 + 0.5 + 1.0 + 0.0) / 4)
    assert m["tool_calls"] == 2.0 and m["valid_action_ratio"] == pytest.approx(7 / 8)
    assert m["response_length"] == pytest.approx((15 + 15 + 15 + 35) / 4)
    assert m["reward/e_grpo"] == pytest.approx(0.2875)


def test_latest_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"\[resume\] got"):
        latest_checkpoint(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    for step in (2, 10, 4):
        (tmp_path / "checkpoints" / checkpoint_name(step)).write_bytes(b"x")
    assert latest_checkpoint(tmp_path).name == "step-000010.ckpt"
    assert latest_checkpoint(tmp_path / "checkpoints").name == "step-000010.ckpt"
    one = tmp_path / "checkpoints" / checkpoint_name(4)
    assert latest_checkpoint(one) == one
