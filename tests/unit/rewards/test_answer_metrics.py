"""The answer-metric table: rewards, judges and the training accuracy read one entry per metric."""

from __future__ import annotations

import pytest
import torch

from framework.data.schema import QAItem
from framework.eval.judge import JudgeInputs, RuleJudge, RuleJudgeConfig
from framework.rewards.common import answer_scores
from framework.rewards.composite import WeightedSumConfig
from framework.rewards.entity import EntityRewardConfig
from framework.rewards.outcome import OutcomeRewardConfig, outcome_reward
from framework.rewards.text import ANSWER_METRICS, AnswerMetric, normalize_answer, verdict_metrics
from framework.rollout.metrics import correctness_metric, rollout_metrics
from framework.rollout.scoring import Scores
from framework.types import RewardInputs, Trajectory

ANSWERS = ["Paris", "Paris, France", "the city of Paris", "Lyon"]
GOLD = "Paris"


def starts_with_gold(prediction: str, golds) -> bool:
    """A 0/1 toy metric: the normalised prediction starts with a normalised gold answer."""
    pred = normalize_answer(prediction)
    return any(normalize_answer(g) and pred.startswith(normalize_answer(g)) for g in golds)


def char_overlap(prediction: str, golds) -> float:
    """A graded toy metric: the best share of a gold answer's letters found in the prediction."""
    pred = set(normalize_answer(prediction))
    return max(len(pred & set(normalize_answer(g))) / len(set(normalize_answer(g))) for g in golds)


@pytest.fixture
def prefix(monkeypatch):
    monkeypatch.setitem(ANSWER_METRICS, "prefix", AnswerMetric(starts_with_gold))
    return "prefix"


@pytest.fixture
def overlap(monkeypatch):
    monkeypatch.setitem(ANSWER_METRICS, "overlap", AnswerMetric(char_overlap, graded=True))
    return "overlap"


def reward_inputs() -> RewardInputs:
    completions = [f"<answer>{a}</answer>" for a in ANSWERS]
    golds = [[GOLD]] * len(ANSWERS)
    return RewardInputs(
        torch.zeros(len(ANSWERS), dtype=torch.long), completions, {"golden_answers": golds}
    )


def accuracy(reward_cfg: object) -> float:
    items = [QAItem("q0", "?", (GOLD,), None, None, None, "t")]
    trajs = []
    for answer in ANSWERS:
        t = Trajectory(0, 0, [1] * 5, [0] * 5, 3, status="ok", answer=answer, think_text="")
        t.stats = {"response_tokens": 2, "generated_tokens": 2}
        trajs.append(t)
    scores = Scores(torch.zeros(len(trajs)), {})
    return rollout_metrics(trajs, items, scores, reward_cfg=reward_cfg)["accuracy"]


def test_unknown_metric_is_rejected_by_every_user():
    assert OutcomeRewardConfig(name="outcome", metric="prefix").problems()
    assert RuleJudgeConfig(name="rule", metric="prefix").problems()
    with pytest.raises(ValueError, match=r"\[reward.metric\] got 'prefix'"):
        answer_scores(reward_inputs(), "prefix", "outcome")


def test_a_new_metric_is_used_by_the_reward(prefix):
    assert OutcomeRewardConfig(name="outcome", metric=prefix).problems() == []
    r = outcome_reward(reward_inputs(), cfg=OutcomeRewardConfig(name="outcome", metric=prefix))
    # "paris", "paris france" start with "paris"; "city of paris" and "lyon" do not
    assert r.tolist() == [1.0, 1.0, 0.0, 0.0]


def test_a_new_metric_is_used_by_the_judge(prefix, overlap):
    inputs = JudgeInputs(["q"] * 4, ["Paris, France", "Pars", "Lyon", None], [[GOLD]] * 4)
    assert RuleJudgeConfig(name="rule", metric=prefix).problems() == []
    judge = RuleJudge(cfg=RuleJudgeConfig(name="rule", metric=prefix))
    assert judge(inputs) == [True, False, False, False]  # "paris france" starts with "paris"
    # graded: "pars" has 4 of the 5 letters of "paris" (0.8), "lyon" none of them
    judge = RuleJudge(cfg=RuleJudgeConfig(name="rule", metric=overlap, f1_threshold=0.8))
    assert judge(inputs) == [True, True, False, False]
    judge = RuleJudge(cfg=RuleJudgeConfig(name="rule", metric=overlap, f1_threshold=0.9))
    assert judge(inputs) == [True, False, False, False]


def test_a_new_verdict_metric_is_used_by_the_training_accuracy(prefix, overlap):
    assert prefix in verdict_metrics() and overlap not in verdict_metrics()
    # em: only "Paris"; prefix: also "Paris, France"; substring: all but "Lyon"
    assert accuracy(OutcomeRewardConfig(name="outcome", metric=prefix)) == 0.5
    # a graded metric is a reward shape, not a verdict: accuracy stays exact match
    assert accuracy(OutcomeRewardConfig(name="outcome", metric=overlap)) == 0.25


def test_training_accuracy_follows_the_reward_config():
    assert correctness_metric(None) == "em" and accuracy(None) == 0.25
    # the default configs (reward=e_grpo with correctness=em, reward=outcome with metric=em)
    assert correctness_metric(EntityRewardConfig(name="e_grpo")) == "em"
    assert correctness_metric(OutcomeRewardConfig(name="outcome")) == "em"
    assert accuracy(EntityRewardConfig(name="e_grpo", correctness="substring")) == 0.75
    assert accuracy(OutcomeRewardConfig(name="outcome", metric="substring")) == 0.75
    assert accuracy(OutcomeRewardConfig(name="outcome", metric="f1")) == 0.25
    terms = [{"name": "format", "weight": 0.1}, {"name": "outcome", "metric": "substring"}]
    assert correctness_metric(WeightedSumConfig(name="weighted_sum", terms=terms)) == "substring"
    assert correctness_metric(WeightedSumConfig(name="weighted_sum")) == "em"


def test_metrics_read_what_a_reward_reports_not_its_field_names():
    """A plugin reward says by which metric it judges answers (``verdict_metric``) and how it
    matches entities (``entity_rule``); the logged figures follow it, whatever its fields are
    called."""
    from dataclasses import dataclass

    from framework.config import ComponentConfig
    from framework.rollout.metrics import entity_rule

    @dataclass
    class JudgingReward(ComponentConfig):
        correctness: str = "em"  # a field name the metrics must not guess from

        def verdict_metric(self) -> str | None:
            return "substring"

    assert correctness_metric(JudgingReward(name="plugin")) == "substring"
    assert accuracy(JudgingReward(name="plugin")) == 0.75
    # a weighted sum's entity rule is its e_grpo term's (it used to fall back to the defaults)
    rule = EntityRewardConfig(name="e_grpo", skip_question_entities=False)
    terms = [{"name": "format"}, {"name": "e_grpo", "skip_question_entities": False}]
    assert entity_rule(WeightedSumConfig(name="weighted_sum", terms=terms)) == rule
    default = entity_rule(OutcomeRewardConfig(name="outcome"))  # E-GRPO's defaults
    e_grpo = EntityRewardConfig(name="e_grpo")
    assert default.matching() == e_grpo.matching()
    assert default.skip_question_entities == e_grpo.skip_question_entities
