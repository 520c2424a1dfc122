"""The SFT stage refuses expert trajectories whose trained tokens name a held-out answer."""

from __future__ import annotations

import json

import pytest

from framework.data.leakage import LeakError
from framework.data.schema import DatasetError
from framework.sft.stage import check_expert_leaks
from framework.types import Trajectory
from tests.unit.data.test_leakage import item

WORDS = ["<q>", "The", "article", "on", "Kent", "mentions", "Thames", "Dover", "."]


class WordTokenizer:
    def decode(self, ids, **_):
        return " ".join(WORDS[i] for i in ids)


def traj(ids, mask):
    return Trajectory(question=0, group=0, token_ids=ids, loss_mask=mask, prompt_len=1)


def loader(splits):
    def load(split):
        if split not in splits:
            raise DatasetError(f"no {split}")
        return splits[split]

    return load


def test_trained_text_naming_a_test_answer_is_refused(tmp_path):
    load = loader({"test": [item("x", ("London", "Thames"))], "validation": []})
    kept = [(None, traj([0, 1, 2, 3, 4, 5, 6], [0, 1, 1, 1, 1, 1, 1]))]
    with pytest.raises(LeakError, match="test_answer_in_trained_text=1"):
        check_expert_leaks(kept, load, WordTokenizer(), tmp_path)
    saved = json.loads((tmp_path / "leakage.json").read_text())
    assert saved == {"validation_answer_in_trained_text": 0, "test_answer_in_trained_text": 1}


def test_masked_tokens_are_not_checked_and_missing_splits_are_skipped(tmp_path):
    # "Thames" sits in a tool observation (loss mask 0): not trained on, not a leak
    load = loader({"test": [item("x", ("London", "Thames"))]})
    kept = [(None, traj([0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 1, 1, 1, 1, 0, 1]))]
    assert check_expert_leaks(kept, load, WordTokenizer(), tmp_path) == {
        "test_answer_in_trained_text": 0
    }


def test_a_validation2_answer_in_trained_text_is_refused(tmp_path):
    # validation2 is held out like validation and test: the expert must not write its answers
    load = loader({"validation2": [item("w", ("London", "Thames"))], "test": []})
    kept = [(None, traj([0, 1, 2, 3, 4, 5, 6], [0, 1, 1, 1, 1, 1, 1]))]
    with pytest.raises(LeakError, match="validation2_answer_in_trained_text=1"):
        check_expert_leaks(kept, load, WordTokenizer(), tmp_path)
    saved = json.loads((tmp_path / "leakage.json").read_text())
    assert saved == {"test_answer_in_trained_text": 0, "validation2_answer_in_trained_text": 1}
