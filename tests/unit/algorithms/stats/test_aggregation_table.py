"""The aggregation table: a new mode is one entry; validation, reduce and weights all follow it."""

from __future__ import annotations

import pytest
import torch

from framework.algorithms.losses.ppo_clip import ClipLossConfig
from framework.algorithms.stats.aggregation import AGG_MODES, Aggregation, aggregate, chunk_weights
from framework.cli.app import load_config
from framework.config import ConfigError

#: mean over all rows of each row's token sum (token_sum_norm with C = 1): weight one per row
ROW_MEAN_TOKEN_SUM = Aggregation(
    lambda v, m, nc: v.sum() / v.shape[0], lambda m: torch.ones(m.shape[0])
)


@pytest.fixture
def new_mode(monkeypatch):
    monkeypatch.setitem(AGG_MODES, "row_mean_token_sum", ROW_MEAN_TOKEN_SUM)
    return "row_mean_token_sum"


def test_unknown_mode_is_rejected_everywhere():
    assert ClipLossConfig(name="ppo_clip", agg="row_mean_token_sum").problems()
    with pytest.raises(ValueError, match=r"\[loss.agg\] got 'row_mean_token_sum'"):
        aggregate(torch.zeros(1, 1), torch.ones(1, 1), "row_mean_token_sum")
    with pytest.raises(ValueError, match=r"\[loss.agg\] got 'row_mean_token_sum'"):
        chunk_weights(torch.ones(1, 1), [torch.tensor([0])], "row_mean_token_sum")


def test_a_new_mode_is_validated_reduced_and_weighted(new_mode):
    assert ClipLossConfig(name="ppo_clip", agg=new_mode).problems() == []
    v = torch.tensor([[1.0, 2.0, 3.0], [4.0, 100.0, 5.0], [7.0, 7.0, 7.0]])
    m = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])
    # row sums 6, 4, 0 over 3 rows: 10 / 3
    assert aggregate(v, m, new_mode).item() == pytest.approx(10 / 3)
    # one weight per row: chunk {0, 2} holds 2 of 3 rows, chunk {1} 1 of 3
    chunks = [torch.tensor([0, 2]), torch.tensor([1])]
    w = chunk_weights(m, chunks, new_mode)
    assert w == [pytest.approx(2 / 3), pytest.approx(1 / 3)]
    parts = sum(wk * aggregate(v[c], m[c], new_mode) for wk, c in zip(w, chunks, strict=True))
    assert parts.item() == pytest.approx(10 / 3)


def test_a_new_mode_is_accepted_by_the_composed_config(new_mode):
    cfg = load_config("train", [f"loss.agg={new_mode}"])
    assert cfg.loss.agg == new_mode
    with pytest.raises(ConfigError, match=r"\[loss.agg\] got 'no_such_mode'"):
        load_config("train", ["loss.agg=no_such_mode"])


def test_a_mode_that_needs_the_norm_constant_says_so(monkeypatch):
    scaled = Aggregation(
        lambda v, m, nc: v.sum() / nc, lambda m: torch.ones(m.shape[0]), needs_norm_constant=True
    )
    monkeypatch.setitem(AGG_MODES, "token_sum_over_c", scaled)
    (problem,) = ClipLossConfig(name="ppo_clip", agg="token_sum_over_c").problems()
    assert problem.path == "norm_constant" and "agg=token_sum_over_c" in problem.expected
    with pytest.raises(ValueError, match=r"\[loss.norm_constant\] got None"):
        aggregate(torch.ones(1, 2), torch.ones(1, 2), "token_sum_over_c")
    assert aggregate(torch.ones(1, 2), torch.ones(1, 2), "token_sum_over_c", 4.0).item() == 0.5
