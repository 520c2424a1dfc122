"""Answer coverage (``seekrl-index coverage``) on a hand-made corpus and a hand-made files dataset.

The corpus (four passages, title then text) and the six questions, with what each should score:

    c1 Oslo      "Oslo is the capital of Norway. A party was held there in 1952."
    c2 Saturn V  "The Saturn V rocket carried the Apollo astronauts to the Moon."
    c3 Route 66  "U.S. Route 66 runs from Chicago to Santa Monica."
    c4 Beatles   "The Beatles were an English rock band formed in Liverpool."

    id  source    hops  gold                               supported  why
    q1  nq        1     Oslo                               yes        c1 (title and text)
    q2  nq        1     Cubism                             no         in no passage
    q3  hotpotqa  1     art                                no         only inside "party" (c1)
    q4  hotpotqa  2     U.S. Route 66                      yes        c3, after normalisation: "us route 66"
    q5  nq        None  Liverpool, England / the LIVERPOOL yes        c4, the second alias ("liverpool")
    q6  hotpotqa  2     Santa Monica Pier                  no         c3 has "santa monica" but no "pier"

By source: nq q1 q2 q5 -> 2/3 supported; hotpotqa q3 q4 q6 -> 1/3. By hops: 1 (q1 q2 q3) -> 1/3;
2 (q4 q6) -> 1/2; unknown (q5) -> 1/1. All: 3/6.

BM25 (English stopwords dropped) for the question texts:
    q1 "capital of Norway"              -> c1 alone matches: rank 1
    q4 "road that runs from Chicago"    -> c3 alone matches: rank 1
    q5 "rocket that carried the band"   -> c2 matches two words (rocket, carried), c4 one (band),
                                           every word once in the corpus: c2 first, c4 second: rank 2
    q2, q3, q6: no passage holds a gold answer, so no rank whatever is retrieved.
So recall@1 = 2/6 (q1 q4); recall@2 = 3/6 (q1 q4 q5): nq 2/3, hotpotqa 1/3; hops 1 -> 1/3,
2 -> 1/2, unknown -> 1/1.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from framework.cli import index as index_cli
from framework.data.schema import QAItem, read_dataset
from framework.retrieval.bm25 import BM25Retriever
from framework.retrieval.corpus import open_corpus
from framework.retrieval.coverage import (
    answer_set,
    answers_in,
    contains_answer,
    gold_answers,
    records_for,
    retrieval_ranks,
    scan_corpus,
    summarize,
)
from tests.unit.retrieval.corpus_fixtures import bm25_cfg, corpus_cfg, write_jsonl

PASSAGES = [
    ("c1", "Oslo", "Oslo is the capital of Norway. A party was held there in 1952."),
    ("c2", "Saturn V", "The Saturn V rocket carried the Apollo astronauts to the Moon."),
    ("c3", "Route 66", "U.S. Route 66 runs from Chicago to Santa Monica."),
    ("c4", "Beatles", "The Beatles were an English rock band formed in Liverpool."),
]

QUESTIONS = [
    ("q1", "nq", 1, "capital of Norway", ["Oslo"]),
    ("q2", "nq", 1, "which movement did Picasso found", ["Cubism"]),
    ("q3", "hotpotqa", 1, "what is a party about", ["art"]),
    ("q4", "hotpotqa", 2, "road that runs from Chicago", ["U.S. Route 66"]),
    ("q5", "nq", None, "rocket that carried the band", ["Liverpool, England", "the LIVERPOOL"]),
    ("q6", "hotpotqa", 2, "pier at the end of the road", ["Santa Monica Pier"]),
]

SUPPORTED = {"q1", "q4", "q5"}
RANK_AT_2 = {"q1": 1, "q2": None, "q3": None, "q4": 1, "q5": 2, "q6": None}


def write_questions(path: Path) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for qid, source, hops, question, gold in QUESTIONS:
            row = {
                "id": qid,
                "question": question,
                "golden_answers": gold,
                "data_source": source,
                "extra_info": {"hops": hops},
            }
            fh.write(json.dumps(row) + "\n")
    return path


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    """The corpus JSONL and the questions JSONL."""
    return (
        write_jsonl(tmp_path / "corpus.jsonl", PASSAGES),
        write_questions(tmp_path / "questions.jsonl"),
    )


def row(questions: int, supported: int, found: int) -> dict:
    return {
        "questions": questions,
        "supported": supported,
        "support": supported / questions,
        "found": found,
        "recall": found / questions,
    }


def test_support_counts_answers_after_normalisation_and_only_on_token_boundaries(files, tmp_path):
    corpus, questions = files
    items = read_dataset(questions)
    store = open_corpus(corpus_cfg(corpus), tmp_path / "cache", progress=False)
    try:
        answers = answer_set(a for it in items for a in gold_answers(it))
        found = scan_corpus(store.iter_texts(batch=3), answers)
    finally:
        store.close()
    assert found == {"oslo", "us route 66", "liverpool"}
    records = records_for(items, found, [None] * len(items))
    assert {r["id"] for r in records if r["supported"]} == SUPPORTED
    assert [r["hops"] for r in records] == ["1", "1", "1", "2", "unknown", "2"]
    summary = summarize(records)
    assert summary["all"] == row(6, 3, 0)
    assert summary["data_source"] == {"hotpotqa": row(3, 1, 0), "nq": row(3, 2, 0)}
    assert summary["hops"] == {"1": row(3, 1, 0), "2": row(2, 1, 0), "unknown": row(1, 1, 0)}
    assert list(summary["hops"]) == ["1", "2", "unknown"]


@pytest.mark.parametrize(
    ("k", "expected"),
    [(1, {"q1": 1, "q4": 1}), (2, {"q1": 1, "q4": 1, "q5": 2})],
)
def test_bm25_answer_recall_at_k(files, tmp_path, k, expected):
    corpus, questions = files
    items = read_dataset(questions)
    retriever = BM25Retriever(cfg=bm25_cfg(corpus, tmp_path / "cache"))
    try:
        ranks = retrieval_ranks(retriever.search, items, k, batch_size=4)  # batches of 4 and 2
    finally:
        retriever.close()
    assert {it.id: r for it, r in zip(items, ranks, strict=True) if r is not None} == expected


def test_the_ngram_scan_equals_a_direct_check_on_random_cases():
    rng = random.Random(7)
    vocab = ["a", "b", "c", "d", "ab", "ba"]
    for _ in range(300):
        answers = {
            " ".join(rng.choices(vocab, k=rng.randint(1, 4))) for _ in range(rng.randint(1, 6))
        }
        tokens = rng.choices(vocab, k=rng.randint(0, 12))
        direct = {a for a in answers if contains_answer(" ".join(tokens), a)}
        assert answers_in(tokens, answer_set(answers)) == direct, (tokens, answers)


def test_the_scan_normalises_passages_and_stops_once_every_answer_is_found():
    answers = answer_set(["new york", "art"])
    seen: list[int] = []

    def batches():
        for i, batch in enumerate(
            [["The party in NEW-York"], ["New York!"], ["Modern Art."], ["never read"]]
        ):
            seen.append(i)
            yield batch

    # "NEW-York" normalises to "newyork" (punctuation is removed, not spaced), "party" holds no
    # "art" token; batch 1 gives "new york", batch 2 "art", and batch 3 is never read
    assert scan_corpus(batches(), answers) == {"new york", "art"}
    assert seen == [0, 1, 2]


def test_an_answer_that_normalises_to_nothing_supports_nothing():
    assert gold_answers(read_item(["The", "!"])) == []
    assert answer_set(["", "x y"]).answers == frozenset({"x y"})
    assert not contains_answer("a b", "")


def read_item(gold: list[str]) -> QAItem:
    return QAItem("x", "q?", tuple(gold), None, None, None, "nq")


def run_cli(monkeypatch, *overrides: str) -> None:
    monkeypatch.setattr(sys, "argv", ["seekrl-index", "coverage", *overrides])
    index_cli.main()


def test_the_cli_writes_coverage_json_and_md_from_which_the_figures_regenerate(
    files, tmp_path, monkeypatch, capsys
):
    corpus, questions = files
    run_dir = tmp_path / "run"
    run_cli(
        monkeypatch,
        "dataset=files",
        f"dataset.test={questions}",
        "retriever=bm25",
        "retriever.corpus.source=jsonl",
        f"retriever.corpus.path={corpus}",
        f"retriever.cache_dir={tmp_path / 'cache'}",
        "retriever.progress=false",
        "progress=false",
        "k=2",
        f"hydra.run.dir={run_dir}",
    )
    report = json.loads((run_dir / "coverage.json").read_text())
    assert list(report["splits"]) == ["test"]  # a files dataset: the splits whose file is set
    part = report["splits"]["test"]
    assert {r["id"]: r["found_at_rank"] for r in part["records"]} == RANK_AT_2
    assert {r["id"] for r in part["records"] if r["supported"]} == SUPPORTED
    assert part["summary"] == summarize(part["records"])
    assert part["summary"]["all"] == row(6, 3, 3)
    assert part["summary"]["data_source"] == {"hotpotqa": row(3, 1, 1), "nq": row(3, 2, 2)}
    assert part["summary"]["hops"] == {
        "1": row(3, 1, 1),
        "2": row(2, 1, 1),
        "unknown": row(1, 1, 1),
    }
    assert (report["dataset"], report["k"], report["corpus"]["passages"]) == ("files", 2, 4)
    markdown = (run_dir / "coverage.md").read_text()
    assert "| all | 6 | 50.0% (3) | 50.0% (3) |" in markdown
    assert "| hops unknown | 1 | 100.0% (1) | 100.0% (1) |" in markdown
    assert "| data_source nq | 3 | 66.7% (2) | 66.7% (2) |" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("dataset=synth_dem", "[dataset] got 'synth_dem'"),
        ("split=tset", "[split] got 'tset'"),
        ("split=validation", "[split] got 'validation'; expected a split the dataset has"),
    ],
)
def test_a_bad_dataset_or_split_is_refused_with_a_fix(
    files, tmp_path, monkeypatch, capsys, override, says
):
    _, questions = files
    with pytest.raises(SystemExit) as exit_:
        run_cli(
            monkeypatch,
            "dataset=files",
            f"dataset.test={questions}",
            override,
            "retriever=bm25",
            f"hydra.run.dir={tmp_path / 'run'}",
        )
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Fix:" in err
    assert not (tmp_path / "run" / "coverage.json").exists()
