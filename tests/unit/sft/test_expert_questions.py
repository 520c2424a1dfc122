"""Which questions the cold-start SFT's expert can follow, and the refusal before anything loads."""

from __future__ import annotations

import json
import random

import pytest

from framework.data.schema import DatasetError, QAItem
from framework.sft.expert import ExpertConfig, usable_questions
from framework.sft.questions import ExpertQuestions, expert_questions, require_expert_questions


def walk(i: int, hops: int = 2, **kw) -> QAItem:
    """A question with the walk the expert follows (anchor, one entity per hop, clues, mentions)."""
    fields = {
        "id": f"q{i}",
        "question": f"The article on Anchor {i} mentions a town. Which river is in that town's article?",
        "golden_answers": (f"River {i}",),
        "entities": tuple((f"E{i}-{k}",) for k in range(hops + 1)),
        "hops": hops,
        "chain": tuple(f"doc-{i}-{k}" for k in range(hops + 1)),
        "data_source": "mine",
        "extra": {"clues": ["town", "river"][:hops], "mentions": [f"T{i}", f"R{i}"][:hops]},
    }
    fields.update(kw)
    return QAItem(**fields)


def test_usable_questions_names_every_drop_reason():
    items = [
        walk(0),
        walk(1, entities=None, chain=None),  # plain QA
        walk(2, entities=(("Only",),)),  # one entity: no hop to follow
        walk(3, chain=("doc-3-0",)),  # 2 hops, one document
        walk(4, extra={"clues": ["town"], "mentions": ["T4"]}),  # one clue for two hops
        walk(5, extra={"clues": ["town", "river"], "mentions": ["T5", 7]}),  # not a name
        walk(6, extra={}),  # entity-annotated, no walk (not from seekrl-synth)
        walk(7, question=walk(0).question),  # the same question again
        walk(
            8,
            hops=1,
            entities=(("A",), ("B",)),
            chain=("a", "b"),
            extra={"clues": ["river"], "mentions": ["B"]},
        ),
    ]
    usable, dropped = usable_questions(items)
    assert [it.id for it in usable] == ["q0", "q8"]
    assert dropped == {
        "fewer than 2 entities": 2,
        "chain shorter than its hops": 1,
        "no clues or mentions (not a seekrl-synth question)": 3,
        "duplicate question": 1,
    }


def test_expert_questions_draws_as_the_sft_run_did():
    items = [walk(i) for i in range(10)]
    cfg = ExpertConfig(questions=4)
    # the draw run_sft made before it was factored out: Random(seed).sample(train, min(n, len))
    assert expert_questions(items, cfg, 3) == random.Random(3).sample(items, 4)
    assert (
        sorted(expert_questions(items, ExpertConfig(questions=0), 3), key=lambda it: it.id) == items
    )
    assert len(expert_questions(items, ExpertConfig(questions=50), 3)) == 10


def test_require_expert_questions_threshold_is_one_batch():
    items = [walk(i) for i in range(3)] + [walk(i, extra={}) for i in range(3, 6)]
    kw = {"seed": 0, "source": "t.jsonl", "where": "sft", "keys": "", "off": "do X"}
    counts = require_expert_questions(items, ExpertConfig(questions=0), 3, **kw)
    assert counts == ExpertQuestions(
        6, 3, {"no clues or mentions (not a seekrl-synth question)": 3}
    )
    with pytest.raises(DatasetError) as info:
        require_expert_questions(items, ExpertConfig(questions=0), 4, **kw)
    assert str(info.value).startswith(
        "[sft] t.jsonl: got 3 of 6 questions the cold-start SFT's expert is handed that it can "
        "follow (3 no clues or mentions (not a seekrl-synth question)); expected at least 4 "
        "(optim.batch_size: one SFT batch, before the evidence check drops more). Fix: do X, or "
        "give questions with extra_info.entities (2 or more"
    )


def test_seekrl_sft_refuses_before_loading_the_retriever_or_the_policy(tmp_path, monkeypatch):
    from framework.cli.app import load_config
    from framework.sft import stage

    path = tmp_path / "nq.jsonl"
    path.write_text(
        "".join(
            json.dumps({"question": f"q {i}?", "golden_answers": ["a"]}) + "\n" for i in range(8)
        )
    )
    cfg = load_config("sft", ["dataset=files", f"dataset.train={path}", f"run_dir={tmp_path}/run"])

    def loaded(*args, **kwargs):
        raise AssertionError("loaded before the data check")

    monkeypatch.setattr(stage, "apply_threads", lambda trainer: None)  # this process's threads
    monkeypatch.setattr(stage, "load_policy", loaded)
    monkeypatch.setattr(stage.RETRIEVERS, "bind", loaded)
    with pytest.raises(DatasetError, match=r"^\[sft\] .*got 0 of 8 .*Fix: train on seekrl-synth"):
        stage.run_sft(cfg)
