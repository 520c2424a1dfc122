"""The optional second validation split (``dataset.validation2_size``): off, synthesis is byte for
byte that of earlier versions; on, validation2 is carved out of train's answers, drawn like the other
held-out splits, kept off the training data, and leaves validation and test as they were; the
evaluation and the study accept it as a held-out split like validation."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

from framework.data import datasets
from framework.data.datasets import SynthDatasetConfig, synth_dataset, synthesize
from framework.data.leakage import (
    KINDS,
    HeldOut,
    LeakError,
    answer_key,
    chain_keys,
    links,
    split_overlaps,
)
from framework.data.schema import DatasetError, read_dataset
from framework.data.synthesis import (
    ALL_SPLITS,
    SPLITS,
    QuestionSynthesizer,
    quotas_for,
    split_of,
)
from framework.problems import ConfigError
from tests.unit.data.test_leakage import clean_splits, item
from tests.unit.data.test_synthesis import SIZES, grid_articles, synth_cfg, write_corpus

V2 = 3  # validation2 questions on the 40-town grid (train 8, validation 3, test 3)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("grid")
    return write_corpus(root / "c.jsonl", grid_articles())


@pytest.fixture(scope="module")
def off_and_on(tmp_path_factory, corpus) -> tuple[Path, Path]:
    """The grid synthesized without validation2 and with 3 validation2 questions."""
    off = synthesize(synth_cfg(tmp_path_factory.mktemp("off"), corpus), log=lambda *_: None)
    on_cfg = synth_cfg(tmp_path_factory.mktemp("on"), corpus, validation2_size=V2)
    return off, synthesize(on_cfg, log=lambda *_: None)


def read_splits(out: Path, names=ALL_SPLITS) -> dict:
    return {s: read_dataset(out / f"{s}.jsonl") for s in names if (out / f"{s}.jsonl").is_file()}


# -- off: everything as before ----------------------------------------------------------------------
# Computed by the code before validation2 existed (commit d22c058, format 6) on the same config: the
# grid corpus at the relative path c.jsonl (the data key hashes the corpus settings with its path).
# A deliberate change of synthesis bumps FORMAT_VERSION and recomputes these.
OLD_KEY = "271dad196ead5bd2"
OLD_SPLIT_SHA256 = {
    "train": "34bcd4e44c7768699ffac8299f145f63c866cbfc60db941e3796a84cda10baa5",
    "validation": "10ac796a26683b93fd2e12ec328ea6df10751a8c08a743c0b49ec488338231ec",
    "test": "09804b15815229d283462217c8e1b3b4071d64e307676aa1b55bb970e7dd8aed",
}
#: manifest.json without its "seconds" (json.dumps(sort_keys=True)), and quality_report.md
OLD_MANIFEST_SHA256 = "5fe4a475cacb13dd412eb3bbe1c282b532c2aa07765cfb94140e65d9f006fe71"
OLD_REPORT_MD_SHA256 = "018a16cbec03f58fac650b73a2c044a2f71792986fad756122fe005acf059d81"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_off_by_default_leaves_the_key_splits_and_manifest_unchanged(tmp_path, monkeypatch):
    assert SynthDatasetConfig(name="synth").validation2_size == 0
    monkeypatch.chdir(tmp_path)
    write_corpus(tmp_path / "c.jsonl", grid_articles())
    cfg = synth_cfg(tmp_path, Path("c.jsonl"))
    assert cfg.key() == OLD_KEY
    # the salt matters only when the split is on
    assert dataclasses.replace(cfg, validation2_salt="other").key() == OLD_KEY
    out = synthesize(cfg, log=lambda *_: None)
    assert sorted(p.name for p in out.glob("*.jsonl")) == [
        "test.jsonl",
        "train.jsonl",
        "validation.jsonl",
    ]
    for split, digest in OLD_SPLIT_SHA256.items():
        assert sha256((out / f"{split}.jsonl").read_bytes()) == digest, split
    manifest = json.loads((out / "manifest.json").read_text())
    manifest.pop("seconds")
    assert sha256(json.dumps(manifest, sort_keys=True).encode()) == OLD_MANIFEST_SHA256
    assert sha256((out / "quality_report.md").read_bytes()) == OLD_REPORT_MD_SHA256
    settings = json.loads((out / "quality_report.json").read_text())["settings"]
    assert not {"validation2_size", "validation2_salt"} & set(settings)
    with pytest.raises(DatasetError, match=r"\[dataset\.validation2_size\] got 0; expected > 0"):
        synth_dataset("validation2", cfg=cfg)


def test_on_the_key_names_the_size_and_the_salt(tmp_path):
    cfg = synth_cfg(tmp_path, tmp_path / "c.jsonl")
    write_corpus(tmp_path / "c.jsonl", grid_articles(1, 3))
    on = dataclasses.replace(cfg, validation2_size=5)
    assert on.key() != cfg.key()
    assert dataclasses.replace(on, validation2_salt="fresh-2").key() != on.key()
    assert dataclasses.replace(on, validation2_size=6).key() != on.key()
    assert on.sizes() == {"train": 8, "validation": 3, "test": 3, "validation2": 5}
    assert list(cfg.sizes()) == list(SPLITS)


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"validation2_size": -1}, "validation2_size"),
        ({"validation2_size": 5, "validation2_salt": ""}, "validation2_salt"),
    ],
)
def test_config_problems(change, path):
    problems = SynthDatasetConfig(name="synth", **change).problems()
    assert [p.path for p in problems] == [path]
    assert "Fix:" in str(problems[0])
    assert SynthDatasetConfig(name="synth", validation2_salt="").problems() == []  # off: unused


# -- the partition ----------------------------------------------------------------------------------
def test_validation2_takes_a_share_of_trains_answers_only():
    synth = QuestionSynthesizer(
        grid_graph(), seed=0, fuzz_prob=0.0, split_salt="s", validation2_salt="v"
    )
    answers = [f"answer {i}" for i in range(4000)]
    three, four = [8, 3, 3], [8, 3, 3, 3]
    main = {a: split_of(a, "0:s", three) for a in answers}
    assert all(synth.split_of_answer(a, three) == main[a] for a in answers)  # no fourth weight: off
    got = {a: synth.split_of_answer(a, four) for a in answers}
    # validation and test keep exactly their answers; validation2's come from train's only
    for a in answers:
        assert (got[a] == main[a]) if main[a] != "train" else got[a] in ("train", "validation2")
    moved = Counter(got[a] for a in answers if main[a] == "train")
    # odds validation2 : train = 3 : 8, so 3/11 = 0.273 of train's answers (2,286 of them: sd 0.009)
    assert 0.24 < moved["validation2"] / sum(moved.values()) < 0.31
    # another salt moves other answers
    other = QuestionSynthesizer(
        grid_graph(), seed=0, fuzz_prob=0.0, split_salt="s", validation2_salt="w"
    )
    assert {a for a in answers if other.split_of_answer(a, four) == "validation2"} != {
        a for a in answers if got[a] == "validation2"
    }
    # no train weight: every train answer goes to validation2
    assert all(synth.split_of_answer(a, [0, 3, 3, 3]) != "train" for a in answers[:200])


def grid_graph():
    from framework.data.entity_graph import GraphConfig, build_graph

    return build_graph(grid_articles(), GraphConfig())


# -- on: the splits ---------------------------------------------------------------------------------
def test_validation2_is_written_with_its_hop_mix_ids_and_cap(off_and_on):
    _, on = off_and_on
    splits = read_splits(on)
    assert list(splits) == list(ALL_SPLITS)
    v2 = splits["validation2"]
    assert read_dataset(on / "validation2.parquet") == v2
    assert Counter(it.hops for it in v2) == quotas_for(V2, [0.5, 0.5])  # 1-hop 2, 2-hop 1
    assert [it.id for it in v2] == [f"seekrl-synth-validation2-{i:06d}" for i in range(V2)]
    assert len({answer_key(it) for it in v2}) == V2  # max_answer_repeats=1, as validation / test
    for it in v2:  # each answer is one the main salt gives train
        assert split_of(answer_key(it), "0:leakfree-1", [8, 3, 3]) == "train"
    manifest = json.loads((on / "manifest.json").read_text())
    assert manifest["sizes"] == {**SIZES, "validation2": V2}
    assert manifest["answers"]["validation2"]["max_repeats"] == 1
    assert manifest["shortfall"] == []
    report = (on / "quality_report.md").read_text()
    assert f"| validation2 | {V2} |" in report
    assert "validation2_link_in_train_chain 0" in report
    assert (
        json.loads((on / "quality_report.json").read_text())["settings"]["validation2_size"] == V2
    )


def test_validation2_is_leak_free_against_train_of_every_kind(off_and_on):
    _, on = off_and_on
    splits = read_splits(on)
    manifest = json.loads((on / "manifest.json").read_text())
    counts = split_overlaps(splits)
    assert manifest["overlaps"] == counts
    assert {k for k in counts if k.startswith("validation2_")} == {
        f"validation2_{k}" for k in KINDS
    }
    assert set(counts.values()) == {0}
    # and directly: no validation2 answer on a train chain, no validation2 link walked by train
    v2_answers = {answer_key(it) for it in splits["validation2"]}
    v2_links = set().union(*(links(chain_keys(it)) for it in splits["validation2"]))
    for it in splits["train"]:
        assert not v2_answers & set(chain_keys(it))
        assert not v2_links & links(chain_keys(it))


def test_validation_and_test_are_the_same_questions_with_and_without_it(off_and_on):
    off, on = off_and_on
    for split in ("validation", "test"):
        assert (on / f"{split}.jsonl").read_bytes() == (off / f"{split}.jsonl").read_bytes()
    # train is drawn again, kept off validation2 (without it, train used one of its answers)
    off_train = {answer_key(it) for it in read_dataset(off / "train.jsonl")}
    on_v2 = {answer_key(it) for it in read_dataset(on / "validation2.jsonl")}
    assert off_train & on_v2


def test_synth_dataset_reads_validation2(off_and_on, corpus, tmp_path):
    _, on = off_and_on
    cfg = synth_cfg(on.parent, corpus, validation2_size=V2)
    assert cfg.directory() == on
    assert synth_dataset("validation2", cfg=cfg) == read_dataset(on / "validation2.jsonl")
    with pytest.raises(DatasetError, match=r"got split 'validation3'; expected one of .*Fix:"):
        synth_dataset("validation3", cfg=cfg)


def test_synthesis_refuses_to_write_when_train_is_not_kept_off_validation2(
    tmp_path, monkeypatch, corpus
):
    # the mutant: the synthesizer keeps train off validation and test but not off validation2;
    # the final count (leakage.split_overlaps, which covers validation2) must refuse the splits
    class NotOffValidation2(HeldOut):
        @classmethod
        def of(cls, splits):
            return HeldOut.of({s: v for s, v in splits.items() if s != "validation2"})

    monkeypatch.setattr(datasets, "HeldOut", NotOffValidation2)
    cfg = synth_cfg(tmp_path, corpus, validation2_size=V2)
    with pytest.raises(LeakError, match=r"validation2_answer_in_train_chain=[1-9]"):
        synthesize(cfg, log=lambda *_: None)
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize(
    ("planted", "kind"),
    [
        # Berlin's river Spree, now a validation2 answer, as a bridge of a train chain
        (item("t9", ("Brandenburg", "Spree", "Cottbus")), "validation2_answer_in_train_chain"),
        # named by a train question's text
        (
            item("t9", ("Kent", "Dover"), "Is the Spree in Kent?"),
            "validation2_answer_in_train_question",
        ),
        # the link Bergen -> Fjord of a validation2 chain, walked the other way by train
        (item("t9", ("Fjord", "Bergen", "Stavanger")), "validation2_link_in_train_chain"),
        # the same answer in train and validation2 (a user's files)
        (item("t9", ("Kent", "Voss", "Spree")), "validation2_answer_in_train_split"),
    ],
)
def test_a_hand_built_validation2_leak_is_counted(planted, kind):
    splits = clean_splits()
    splits["validation2"] = [splits.pop("validation")[0], item("w1", ("Bergen", "Fjord", "Voss"))]
    assert set(split_overlaps(splits).values()) == {0}
    assert HeldOut.of(splits).answers == {"spree", "voss", "thames", "akerselva"}
    splits["train"].append(planted)
    counts = split_overlaps(splits)
    assert counts[kind] == 1
    assert not any(v for k, v in counts.items() if not k.startswith("validation2_"))
    if kind == "validation2_link_in_train_chain":
        assert counts["validation2_answer_in_train_chain"] == 0  # Voss stays off train


# -- evaluations and studies ------------------------------------------------------------------------
def test_eval_split_accepts_validation2_and_refuses_unknown_names():
    from framework.config.compose import load_config
    from framework.eval.config import EvalConfig

    cfg = load_config("eval", ["dataset=synth_easy_v2", "split=validation2"], {"eval": EvalConfig})
    assert cfg.split == "validation2"
    assert cfg.dataset.validation2_size == 200 and cfg.dataset.validation2_salt == "fresh-1"
    assert cfg.dataset.train_size == 1500 and cfg.dataset.hop_weights == [0.5, 0.5]  # synth_easy's
    with pytest.raises(ConfigError) as err:
        load_config("eval", ["split=validation3"], {"eval": EvalConfig})
    assert (
        "[split] got 'validation3'; expected one of ['train', 'validation', 'test', "
        "'validation2']. Fix: set split to one of" in str(err.value)
    )


def test_study_eval_split_validation2_is_held_out_like_validation():
    from framework.study import integrity
    from framework.study.schema import StudyConfig, StudyEvalConfig

    assert StudyEvalConfig(split="validation2").problems() == []
    (problem,) = StudyEvalConfig(split="validation3").problems()
    assert str(problem.under("eval")).startswith(
        "[eval.split] got 'validation3'; expected a held-out split, one of ['validation', 'test', "
        "'validation2']. Fix: evaluate on held-out questions"
    )
    cfg = StudyConfig(arms={"a": []}, baseline="a", eval=StudyEvalConfig(split="validation2"))
    assert cfg.problems() == []  # no pre-registration needed, unlike test
    assert integrity.publishable(cfg) == []
    test = dataclasses.replace(cfg, eval=StudyEvalConfig(split="test"))
    assert [p.path for p in test.problems()] == ["preregistration"]


@pytest.mark.parametrize(("split", "counted"), [("validation2", False), ("test", True)])
def test_a_validation2_evaluation_is_not_counted_as_a_test_evaluation(
    tmp_path, monkeypatch, split, counted
):
    from types import SimpleNamespace

    from framework.study import runs
    from framework.study.layout import TEST_COUNTS
    from framework.study.schema import StudyConfig, StudyEvalConfig

    def evaluate(_target, partial):  # stands in for the evaluation child: its two outputs
        partial.mkdir(parents=True)
        (partial / "results.json").write_text("{}")
        (partial / "samples.jsonl").write_text("")

    monkeypatch.setattr(runs, "eval_config", lambda _t, _c, _ck, partial, _s: partial)
    monkeypatch.setattr(runs, "in_child", evaluate)
    cfg = StudyConfig(arms={"a": []}, baseline="a", eval=StudyEvalConfig(split=split))
    train_cfg = SimpleNamespace(rollout=SimpleNamespace(policy=SimpleNamespace(source="hf")))
    runs.evaluate_once(train_cfg, cfg, None, tmp_path / "eval" / "start", start=True)
    assert (tmp_path / "eval" / "start" / "results.json").is_file()
    assert (tmp_path / TEST_COUNTS).is_file() is counted
