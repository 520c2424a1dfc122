"""The train job's data checks beyond the schema (dry run and run): the cold-start SFT's expert
needs questions it can follow, and an entity reward needs questions that hide an entity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framework.cli.app import load_config
from framework.data.schema import DatasetError
from framework.rl.plan import dry_run
from framework.rl.stages import checked_training_data, data_ready


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def plain_rows(n: int = 6) -> list[dict]:
    """Plain QA, as a user converts NQ: a question and its answers."""
    return [
        {"question": f"Who wrote book {i}?", "golden_answers": [f"Author {i}"]} for i in range(n)
    ]


def entity_rows(n: int = 6) -> list[dict]:
    """Entity-annotated questions without the expert's walk (no clues or mentions): the question
    names its anchor Freedonia i and hides the capital and the river."""
    return [
        {
            "question": f"Which river flows through the capital of Freedonia {i}?",
            "golden_answers": [f"River {i}"],
            "extra_info": {"entities": [[f"Freedonia {i}"], [f"Capital {i}"], [f"River {i}"]]},
        }
        for i in range(n)
    ]


def walk_rows(n: int = 6) -> list[dict]:
    """Questions with everything the expert follows, as seekrl-synth writes them (one hop)."""
    return [
        {
            "question": f"The Wikipedia article on Anna {i} mentions a ballet company. What is its name?",
            "golden_answers": [f"Ballet {i}"],
            "extra_info": {
                "entities": [[f"Anna {i}", f"Anna {i} (dancer)"], [f"Ballet {i}"]],
                "hops": 1,
                "chain": [f"anna-{i}", f"ballet-{i}"],
                "clues": ["ballet company"],
                "mentions": [f"Ballet {i}"],
            },
        }
        for i in range(n)
    ]


def named_rows(n: int = 6) -> list[dict]:
    """Every listed entity is named by the question itself: E-GRPO's E_q is empty everywhere."""
    return [
        {
            "question": f"Is River {i} the river of Capital {i}?",
            "golden_answers": ["yes"],
            "extra_info": {"entities": [[f"Capital {i}"], [f"River {i}"]]},
        }
        for i in range(n)
    ]


def train_cfg(path: Path, *overrides: str):
    return load_config(
        "train", ["dataset=files", f"dataset.train={path}", "dataset.validation=null", *overrides]
    )


def test_cold_start_sft_refuses_data_its_expert_cannot_follow(tmp_path):
    cfg = train_cfg(write_rows(tmp_path / "nq.jsonl", plain_rows()), "algorithm=grpo")
    assert cfg.warm_start.sft and data_ready(cfg)  # the default warm start; files are ready
    with pytest.raises(DatasetError) as info:
        checked_training_data(cfg)
    text = str(info.value)
    assert text.startswith(f"[warm_start.sft] {tmp_path / 'nq.jsonl'}: got 0 of 6 questions")
    assert "(6 fewer than 2 entities)" in text
    assert "expected at least 4 (warm_start.optim.batch_size" in text
    assert (
        "Fix: set warm_start.sft=false (start from the policy as it is), or give questions" in text
    )
    assert "extra_info.clues / extra_info.mentions" in text and "docs/own_data.md" in text
    # entity-annotated data without the walk is refused for the same reason, named
    cfg = train_cfg(write_rows(tmp_path / "ent.jsonl", entity_rows()))
    with pytest.raises(DatasetError, match=r"\(6 no chain\)"):
        checked_training_data(cfg)


def test_cold_start_sft_refuses_fewer_usable_questions_than_one_batch(tmp_path):
    # 3 followable + 3 plain: 3 usable < warm_start.optim.batch_size 4; a batch size of 3 passes
    path = write_rows(tmp_path / "mixed.jsonl", walk_rows(3) + plain_rows(3))
    with pytest.raises(DatasetError, match=r"got 3 of 6 .* expected at least 4"):
        checked_training_data(train_cfg(path, "algorithm=grpo"))
    _, notes = checked_training_data(
        train_cfg(path, "algorithm=grpo", "warm_start.optim.batch_size=3")
    )
    assert notes == [
        "cold-start SFT: 3 of 6 expert questions usable (dropped: 3 fewer than 2 entities)"
    ]


def test_data_the_checks_pass(tmp_path):
    splits, notes = checked_training_data(train_cfg(write_rows(tmp_path / "w.jsonl", walk_rows())))
    assert [len(v) for v in splits.values()] == [6]
    assert notes == [
        "reward=e_grpo: 6 of 6 train questions hide an entity",
        "cold-start SFT: 6 of 6 expert questions usable",
    ]
    # without the warm start, plain data trains GRPO and entity data E-GRPO
    plain = write_rows(tmp_path / "nq.jsonl", plain_rows())
    assert (
        checked_training_data(train_cfg(plain, "algorithm=grpo", "warm_start.sft=false"))[1] == []
    )
    ent = write_rows(tmp_path / "ent.jsonl", entity_rows())
    _, notes = checked_training_data(train_cfg(ent, "warm_start.sft=false"))
    assert notes == ["reward=e_grpo: 6 of 6 train questions hide an entity"]
    # a warm start from a finished SFT run needs no expert questions
    cfg = train_cfg(plain, "algorithm=grpo", "warm_start.sft=false")
    cfg.warm_start.sft, cfg.warm_start.path = True, str(tmp_path)
    assert checked_training_data(cfg)[1] == []


def test_entity_reward_refuses_questions_that_hide_no_entity(tmp_path):
    path = write_rows(tmp_path / "named.jsonl", named_rows())
    with pytest.raises(DatasetError) as info:
        checked_training_data(train_cfg(path, "warm_start.sft=false"))
    text = str(info.value)
    assert text.startswith(f"[dataset] {path}: got 0 of 6 train questions with an entity")
    assert "names all of ['Capital 0', 'River 0']" in text
    assert "partial reward would be 0 on every rollout" in text
    assert "Fix: list the entities the agent has to find" in text
    assert "set reward.skip_question_entities=false" in text and "algorithm=grpo" in text
    # counting the question's own entities, or GRPO, passes
    _, notes = checked_training_data(
        train_cfg(path, "warm_start.sft=false", "reward.skip_question_entities=false")
    )
    assert notes == ["reward=e_grpo: E_q is every listed entity (the question's own included)"]
    assert checked_training_data(train_cfg(path, "warm_start.sft=false", "algorithm=grpo"))[1] == []
    # the chain rewards read the hidden chain too (no skip option to suggest)
    with pytest.raises(DatasetError, match="reward=matchtir rewards only") as info:
        checked_training_data(train_cfg(path, "warm_start.sft=false", "algorithm=matchtir"))
    assert "skip_question_entities" not in str(info.value)


def test_one_question_that_hides_an_entity_is_enough(tmp_path):
    path = write_rows(tmp_path / "some.jsonl", named_rows(5) + entity_rows(1))
    _, notes = checked_training_data(train_cfg(path, "warm_start.sft=false"))
    assert notes == ["reward=e_grpo: 1 of 6 train questions hide an entity"]


def test_the_reward_and_the_warm_start_are_refused_together(tmp_path):
    # plain QA under the defaults (E-GRPO, cold-start SFT): both problems in one message
    with pytest.raises(DatasetError) as info:
        checked_training_data(train_cfg(write_rows(tmp_path / "nq.jsonl", plain_rows())))
    first, second = str(info.value).splitlines()
    assert first.startswith("[dataset] ") and "reward=e_grpo needs ground-truth entities" in first
    assert second.startswith("[warm_start.sft] ")


def test_dry_run_refuses_with_the_message(tmp_path, capsys):
    cfg = train_cfg(write_rows(tmp_path / "nq.jsonl", plain_rows()), "algorithm=grpo")
    with pytest.raises(SystemExit) as info:
        dry_run(cfg)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "[warm_start.sft] " in err and "Fix: set warm_start.sft=false" in err
