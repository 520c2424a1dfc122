"""A plugin extends the framework's string vocabularies through ``add_entry``, and the new entry is
then accepted by config validation and used by the code, like a built-in one (done here the way a
plugin module does it, without touching framework/)."""

from __future__ import annotations

import pytest
import torch

from framework.algorithms.stats.aggregation import AGG_MODES, Aggregation, aggregate
from framework.cli.app import load_config
from framework.registry import DuplicateComponentError
from framework.registry.tables import add_entry
from framework.rewards.text import ANSWER_METRICS, AnswerMetric


def first_word(prediction: str, golds) -> float:
    """1 when the prediction's first word is some gold answer's first word."""
    head = prediction.split()[:1]
    return float(any(head and g.split()[:1] == head for g in golds))


@pytest.fixture
def plugin_entries():
    add_entry(ANSWER_METRICS, "test_first_word", AnswerMetric(first_word), table="ANSWER_METRICS")
    add_entry(
        AGG_MODES,
        "test_token_sum",
        Aggregation(lambda v, m, c: (v * m).sum(), lambda m: torch.ones(m.shape[0])),
        table="AGG_MODES",
    )
    yield
    del ANSWER_METRICS["test_first_word"], AGG_MODES["test_token_sum"]


def test_a_plugin_metric_and_aggregation_validate_and_run(plugin_entries):
    cfg = load_config(
        "train", ["reward=outcome", "reward.metric=test_first_word", "loss.agg=test_token_sum"]
    )
    assert cfg.reward.metric == "test_first_word" and cfg.loss.agg == "test_token_sum"
    assert ANSWER_METRICS["test_first_word"].score("Steven Allan Spielberg", ["Steven S."]) == 1.0
    values, mask = torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[1, 0], [1, 1]]).bool()
    assert float(aggregate(values, mask, "test_token_sum")) == 8.0


def test_without_the_plugin_the_names_are_config_errors():
    from framework.config import ConfigError

    with pytest.raises(ConfigError, match=r"\[reward.metric\] got 'test_first_word'"):
        load_config("train", ["reward=outcome", "reward.metric=test_first_word"])


def test_a_name_already_taken_is_refused_naming_the_table():
    with pytest.raises(DuplicateComponentError, match=r"\[ANSWER_METRICS\] got a second entry"):
        add_entry(ANSWER_METRICS, "em", AnswerMetric(first_word), table="ANSWER_METRICS")
    with pytest.raises(TypeError, match=r"\[AGG_MODES\] got entry name ''"):
        add_entry(AGG_MODES, "", AGG_MODES["token_mean"], table="AGG_MODES")
