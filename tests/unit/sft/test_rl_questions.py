"""``warm_start.rl_questions=unseen``: RL draws only the train questions the cold-start SFT's expert
was not handed (the same draw as the SFT run's), and says how many; refused where it cannot hold."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from framework.data.schema import DatasetError, QAItem
from framework.rl.stages import unseen_by_cold_start
from framework.sft.config import WarmStartConfig
from framework.sft.expert import ExpertConfig
from framework.sft.questions import expert_questions


def _train(n: int) -> list[QAItem]:
    return [
        QAItem(
            id=f"q{i}",
            question=f"Question {i}?",
            golden_answers=(f"A{i}",),
            entities=None,
            hops=1,
            chain=None,
            data_source="t",
        )
        for i in range(n)
    ]


def _cfg(questions: int, seed: int = 0) -> SimpleNamespace:
    return SimpleNamespace(
        warm_start=WarmStartConfig(
            sft=True, expert=ExpertConfig(questions=questions, seed=seed), rl_questions="unseen"
        )
    )


@pytest.mark.parametrize("seed", [0, 7])
def test_rl_keeps_exactly_the_questions_the_expert_was_not_handed(seed):
    train = _train(10)
    kept, line = unseen_by_cold_start(_cfg(6, seed), train, "train.jsonl")
    handed = {q.id for q in expert_questions(train, ExpertConfig(questions=6, seed=seed), seed)}
    assert len(handed) == 6 and len(kept) == 4
    assert {q.id for q in kept} == {q.id for q in train} - handed
    assert [q.id for q in kept] == [q.id for q in train if q.id not in handed]  # train order
    assert line.startswith("RL questions: 4 of 10 train questions")


def test_an_expert_handed_every_question_leaves_rl_none_and_is_refused():
    with pytest.raises(DatasetError, match=r"\[warm_start.rl_questions\].*Fix:"):
        unseen_by_cold_start(_cfg(0), _train(5), "train.jsonl")  # 0 = all of them


def test_unseen_needs_the_runs_own_cold_start():
    text = "\n".join(str(p) for p in WarmStartConfig(sft=False, rl_questions="unseen").problems())
    assert "rl_questions" in text and "Fix:" in text
    assert WarmStartConfig(sft=True, rl_questions="unseen").problems() == []
    bad = "\n".join(str(p) for p in WarmStartConfig(rl_questions="some").problems())
    assert "all or unseen" in bad
