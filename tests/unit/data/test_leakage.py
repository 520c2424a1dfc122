"""The overlap check between held-out questions and the training data: each kind of leak planted by
hand is counted and refused, a clean split passes, and synthesis refuses splits its own filter let
through."""

from __future__ import annotations

import json

import pytest

from framework.data import datasets, leakage
from framework.data.datasets import synthesize
from framework.data.leakage import (
    HeldOut,
    LeakError,
    answer_repeats,
    entity_key,
    refuse_leaks,
    split_overlaps,
    trained_text_overlaps,
)
from framework.data.schema import DatasetError, QAItem, read_dataset
from framework.data.synthesis import SPLITS
from tests.unit.data.test_synthesis import grid_articles, synth_cfg, write_corpus


def item(qid: str, names: tuple[str, ...], question: str = "Which one?") -> QAItem:
    """A question over the chain of entity ``names`` (anchor first, answer last)."""
    return QAItem(
        id=qid,
        question=question,
        golden_answers=(names[-1],),
        entities=tuple((n,) for n in names),
        hops=len(names) - 1,
        chain=tuple(f"d-{n}" for n in names),
        data_source="seekrl_synth",
    )


def clean_splits() -> dict[str, list[QAItem]]:
    return {
        "train": [item("t0", ("Paris", "Seine")), item("t1", ("Rome", "Tiber", "Lazio"))],
        "validation": [item("v0", ("Berlin", "Spree"))],
        "test": [item("x0", ("London", "Thames")), item("x1", ("Oslo", "Akerselva"))],
    }


def test_entity_key_drops_case_punctuation_and_qualifier():
    assert entity_key("Mercury (planet)") == "mercury"
    assert entity_key("St. John's, Newfoundland") == "st john s newfoundland"
    assert entity_key("Jaws") == entity_key("JAWS (film)")


def test_clean_splits_have_no_overlap():
    counts = split_overlaps(clean_splits())
    assert counts == {f"{s}_{k}": 0 for s in ("validation", "test") for k in leakage.KINDS}
    refuse_leaks(counts, "dataset")  # no error


@pytest.mark.parametrize(
    ("planted", "kind"),
    [
        # the test answer is a bridge of a train chain (the audit's 41 of 100)
        (item("t9", ("Kent", "Thames", "Oxford")), "test_answer_in_train_chain"),
        # ... or its anchor, under another qualifier and case
        (item("t9", ("thames (river)", "Oxford")), "test_answer_in_train_chain"),
        # ... or is a whole word of a train entity's name ("Thames" in "Thames Barrier")
        (item("t9", ("Kent", "Thames Barrier")), "test_answer_in_train_chain"),
        # a train question's clue names the test answer
        (
            item("t9", ("Kent", "Dover"), "Which port near the THAMES estuary does Kent mention?"),
            "test_answer_in_train_question",
        ),
        # the validation answer as a train bridge
        (item("t9", ("Brandenburg", "Spree", "Cottbus")), "validation_answer_in_train_chain"),
        # the same answer in train and test (a user's files)
        (item("t9", ("Kent", "Oslo", "Akerselva")), "test_answer_in_train_split"),
    ],
)
def test_each_planted_leak_is_counted_and_refused(planted, kind):
    splits = clean_splits()
    splits["train"].append(planted)
    counts = split_overlaps(splits)
    assert counts[kind] >= 1
    with pytest.raises(LeakError, match=rf"{kind}=[1-9]") as err:
        refuse_leaks(counts, "dataset")
    assert isinstance(err.value, DatasetError)  # the apps' handlers print it and exit 2
    assert "Fix:" in str(err.value)


def test_a_test_link_inside_a_train_chain_is_counted():
    splits = clean_splits()
    splits["test"].append(item("x2", ("Bergen", "Fjord", "Voss")))
    # the link Bergen -> Fjord, walked in the other direction, answer elsewhere
    splits["train"].append(item("t9", ("Fjord", "Bergen", "Stavanger")))
    counts = split_overlaps(splits)
    assert counts["test_link_in_train_chain"] == 1
    assert counts["test_answer_in_train_chain"] == 0
    assert HeldOut.of(splits).train_walk_leak(["fjord", "bergen", "stavanger"]) == (
        "link_in_train_chain"
    )


def test_mentions_are_whole_words():
    held = HeldOut.of({"test": [item("x", ("A", "New York City"))], "validation": []})
    assert held.mentioned("born in new york city, in 1950") == {"new york city"}
    assert held.mentioned("New Yorker magazine") == set()
    assert held.train_walk_leak(["boston", "chicago"]) is None
    assert held.train_walk_leak(["boston", "new york city"]) == "answer_in_train_chain"
    assert held.train_walk_leak(["new york city fc", "boston"]) == "answer_in_train_chain"
    assert held.train_walk_leak(["new yorker", "boston"]) is None


def test_trained_text_overlaps_counts_held_out_answers_in_expert_text():
    held = {k: v for k, v in clean_splits().items() if k != "train"}
    texts = ["The article on Kent mentions the Thames, which fits a river.", "So Paris."]
    assert trained_text_overlaps(texts, held) == {
        "validation_answer_in_trained_text": 0,
        "test_answer_in_trained_text": 1,
    }


def test_answer_repeats():
    items = [item("a", ("X", "NYC")), item("b", ("Y", "nyc")), item("c", ("Z", "Boston"))]
    assert answer_repeats(items) == {"questions": 3, "distinct_answers": 2, "max_repeats": 2}


def test_synthesized_splits_are_leak_free_and_capped(tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", grid_articles())
    out = synthesize(synth_cfg(tmp_path, corpus, max_answer_repeats=1), log=lambda *_: None)
    splits = {s: read_dataset(out / f"{s}.jsonl") for s in SPLITS}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["overlaps"] == split_overlaps(splits)
    assert set(manifest["overlaps"].values()) == {0}
    for s in ("validation", "test"):
        assert manifest["answers"][s]["max_repeats"] <= 1
    assert "leak into the training data" in (out / "quality_report.md").read_text()


def test_synthesis_refuses_splits_when_its_filter_is_off(tmp_path, monkeypatch):
    # the filter is what keeps leaks out; with it off, the final check must refuse to write
    class NothingHeldOut(HeldOut):  # what the synthesizer is told to keep out: nothing
        @classmethod
        def of(cls, splits):
            return cls()

    monkeypatch.setattr(datasets, "HeldOut", NothingHeldOut)
    corpus = write_corpus(tmp_path / "c.jsonl", grid_articles(1, 5))
    cfg = synth_cfg(
        tmp_path,
        corpus,
        train_size=3,
        validation_size=1,
        test_size=1,
        hop_weights=[1.0],
        split_salt="",
    )
    with pytest.raises(LeakError, match="test_answer_in_train_chain=1"):
        synthesize(cfg, log=lambda *_: None)
    assert not (tmp_path / "out" / "manifest.json").exists()
