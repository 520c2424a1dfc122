"""Group statistics over a flat, possibly non-contiguous ``group_index``."""

from __future__ import annotations

import math

import torch
from torch.testing import assert_close

from framework.algorithms.stats.group import (
    group_max,
    group_max_normalize,
    group_mean,
    group_size,
    group_std,
    group_sum,
)

F64 = torch.float64

# Three groups with non-contiguous ids: 7 -> {1, 3}, 3 -> {2, 4, 9}, 9 -> {5} (a group of one).
IDS = torch.tensor([7, 7, 3, 3, 3, 9])
VALUES = torch.tensor([1.0, 3.0, 2.0, 4.0, 9.0, 5.0], dtype=F64)


def test_group_size_non_contiguous_ids():
    assert_close(group_size(IDS).double(), torch.tensor([2.0, 2, 3, 3, 3, 1], dtype=F64))


def test_group_sum_and_mean():
    # group 7: 1 + 3 = 4, mean 2; group 3: 2 + 4 + 9 = 15, mean 5; group 9: 5, mean 5.
    assert_close(group_sum(VALUES, IDS), torch.tensor([4.0, 4, 15, 15, 15, 5], dtype=F64))
    assert_close(group_mean(VALUES, IDS), torch.tensor([2.0, 2, 5, 5, 5, 5], dtype=F64))


def test_group_std_unbiased():
    # group 7: deviations ±1, sum of squares 2, / (2 - 1) = 2 -> sqrt(2) = 1.41421.
    # group 3: deviations -3, -1, 4, sum of squares 26, / (3 - 1) = 13 -> sqrt(13) = 3.60555.
    # group 9: a single rollout -> 0 (never NaN).
    expected = torch.tensor([math.sqrt(2)] * 2 + [math.sqrt(13)] * 3 + [0.0], dtype=F64)
    out = group_std(VALUES, IDS)
    assert_close(out, expected)
    assert_close(group_std(VALUES, IDS, unbiased=True), expected)


def test_group_std_biased():
    # group 7: 2 / 2 = 1 -> 1; group 3: 26 / 3 = 8.6667 -> 2.94392; group 9: 0.
    expected = torch.tensor([1.0, 1.0] + [math.sqrt(26 / 3)] * 3 + [0.0], dtype=F64)
    assert_close(group_std(VALUES, IDS, unbiased=False), expected)


def test_group_of_one_std_is_zero_never_nan():
    for unbiased in (True, False):
        out = group_std(torch.tensor([3.5], dtype=F64), torch.tensor([42]), unbiased=unbiased)
        assert not torch.isnan(out).any()
        assert out.item() == 0.0


def test_identical_values_std_zero():
    out = group_std(torch.tensor([0.25, 0.25, 0.25], dtype=F64), torch.tensor([1, 1, 1]))
    assert torch.equal(out, torch.zeros(3, dtype=F64))


def test_group_max():
    assert_close(group_max(VALUES, IDS), torch.tensor([3.0, 3, 9, 9, 9, 5], dtype=F64))


def test_group_max_negative_values():
    # the maximum of {-4, -2} is -2 (the -inf initial value must not leak out).
    out = group_max(torch.tensor([-4.0, -2.0, 1.0], dtype=F64), torch.tensor([0, 0, 1]))
    assert_close(out, torch.tensor([-2.0, -2.0, 1.0], dtype=F64))


def test_group_max_normalize():
    # group 7: / 3 -> 1/3, 1; group 3: / 9 -> 2/9, 4/9, 1; group 9: 5 / 5 = 1.
    expected = torch.tensor([1 / 3, 1.0, 2 / 9, 4 / 9, 1.0, 1.0], dtype=F64)
    assert_close(group_max_normalize(VALUES, IDS), expected)


def test_group_max_normalize_all_zero_group_gives_zero():
    values = torch.tensor([0.0, 0.5, 0.0, 0.25, 0.0], dtype=F64)
    ids = torch.tensor([4, 1, 4, 1, 4])  # group 4 is all zero, interleaved with group 1
    out = group_max_normalize(values, ids)
    assert not torch.isnan(out).any()
    # group 1: max 0.5 -> 1, 0.5; group 4: max 0 -> 0 everywhere.
    assert_close(out, torch.tensor([0.0, 1.0, 0.0, 0.5, 0.0], dtype=F64))


def test_group_max_normalize_is_per_group():
    # The same value 0.2 normalises differently in different groups (max 0.4 vs max 0.2).
    values = torch.tensor([0.2, 0.4, 0.2, 0.1], dtype=F64)
    ids = torch.tensor([0, 0, 1, 1])
    assert_close(group_max_normalize(values, ids), torch.tensor([0.5, 1, 1, 0.5], dtype=F64))


def test_group_stats_match_loop_reference_on_random_batches():
    gen = torch.Generator().manual_seed(0)
    for _ in range(10):
        k = int(torch.randint(1, 6, (1,), generator=gen))
        sizes = torch.randint(1, 7, (k,), generator=gen).tolist()
        ids_per_group = torch.randperm(100, generator=gen)[:k].tolist()
        ids = torch.tensor([g for g, s in zip(ids_per_group, sizes) for _ in range(s)])
        ids = ids[torch.randperm(len(ids), generator=gen)]
        values = torch.randn(len(ids), generator=gen, dtype=F64)
        exp_mean, exp_std, exp_max = [], [], []
        for i in range(len(ids)):
            members = [values[j].item() for j in range(len(ids)) if ids[j] == ids[i]]
            m = sum(members) / len(members)
            var = sum((x - m) ** 2 for x in members) / max(len(members) - 1, 1)
            exp_mean.append(m)
            exp_std.append(math.sqrt(var) if len(members) > 1 else 0.0)
            exp_max.append(max(members))
        assert_close(group_mean(values, ids), torch.tensor(exp_mean, dtype=F64))
        assert_close(group_std(values, ids), torch.tensor(exp_std, dtype=F64))
        assert_close(group_max(values, ids), torch.tensor(exp_max, dtype=F64))
