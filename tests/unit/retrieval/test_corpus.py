"""The passage store: JSONL parsing, chunking, fingerprints, atomic builds, lookups, wiki_offline."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from framework.retrieval import corpus as corpus_mod
from framework.retrieval.corpus import (
    CorpusConfig,
    CorpusStore,
    SourceDocument,
    build_corpus,
    chunk_words,
    corpus_fingerprint,
    open_corpus,
    parse_contents,
    read_jsonl,
    wiki_offline_file,
)
from framework.retrieval.local import CACHE_ENV, LocalRetrieverConfig, cache_root, open_store
from framework.retrieval.types import DocumentNotFound, RetrievalError
from framework.types import Document
from tests.unit.retrieval.corpus_fixtures import DOCS, corpus_cfg, write_jsonl


def store_files(cache: Path) -> list[str]:
    """Every file under the cache's corpus directory (names relative to it)."""
    root = cache / "corpus"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


# --------------------------------------------------------------------------- parse_contents


@pytest.mark.parametrize(
    ("contents", "expected"),
    [
        ('"Jaws (film)"\nJaws is a film.', ("Jaws (film)", "Jaws is a film.")),
        ("Plain title\nsome text", ("Plain title", "some text")),  # no quotes: kept as is
        ('"Only a title"', ("Only a title", "")),  # no newline: no text
        ('  "Padded"  \n  text  \n', ("Padded", "text")),  # stripped around
        ('"A "quoted" word"\nx', ('A "quoted" word', "x")),  # only the outer quotes go
        ('"\nx', ('"', "x")),  # a lone quote is not a quoted title
        ('"T"\nline one\nline two', ("T", "line one\nline two")),  # later newlines stay
        ("", ("", "")),
    ],
)
def test_parse_contents(contents: str, expected: tuple[str, str]) -> None:
    assert parse_contents(contents) == expected


# --------------------------------------------------------------------------- read_jsonl


def test_read_jsonl_reads_ids_titles_and_texts(corpus_path: Path) -> None:
    docs = list(read_jsonl(corpus_path))
    assert docs == [SourceDocument(doc_id=i, title=t, text=x) for i, t, x in DOCS]


def test_read_jsonl_defaults_ids_to_zero_based_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    lines = [
        json.dumps({"contents": '"First"\nno id here'}),
        json.dumps({"id": 7, "contents": '"Second"\nnumeric id'}),
        "",  # blank lines are skipped but still count as lines
        json.dumps({"contents": '"Fourth"\nno id either'}),
        json.dumps({"id": "x", "contents": "\nuntitled"}),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    docs = list(read_jsonl(path))
    assert [d.doc_id for d in docs] == ["0", "7", "3", "x"]
    assert [d.title for d in docs] == ["First", "Second", "Fourth", "x"]  # empty title -> id
    assert docs[0].text == "no id here"


@pytest.mark.parametrize(
    "bad",
    [
        "{not json",
        json.dumps({"id": "a", "text": "no contents key"}),
        json.dumps(["a", "list"]),
        json.dumps("a string"),
    ],
)
def test_read_jsonl_bad_line_names_file_and_line(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "broken.jsonl"
    good = json.dumps({"id": "a", "contents": '"A"\ntext'})
    path.write_text(f"{good}\n\n{bad}\n{good}\n", encoding="utf-8")
    with pytest.raises(RetrievalError, match=r"broken\.jsonl:3 ") as info:
        list(read_jsonl(path))
    assert "Fix:" in str(info.value)


def test_read_jsonl_non_utf8_line_is_a_retrieval_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    good = json.dumps({"id": "a", "contents": '"A"\ntext'}).encode()
    path.write_bytes(good + b'\n{"id": "b", "contents": "\\"Caf\xe9\\"\\nlatin-1 bytes"}\n')
    with pytest.raises(RetrievalError, match=r"latin1\.jsonl:2"):
        list(read_jsonl(path))


# --------------------------------------------------------------------------- chunk_words


@pytest.mark.parametrize(
    ("text", "size", "overlap", "expected"),
    [
        # 10 words, 4 per chunk, 1 shared: starts 0, 3, 6 (step 3), the last one reaches the end
        (
            "a b c d e f g h i j",
            4,
            1,
            ["a b c d", "d e f g", "g h i j"],
        ),
        # no overlap: a short tail chunk
        ("a b c d e f g h i j", 4, 0, ["a b c d", "e f g h", "i j"]),
        # overlap 2 on 7 words: starts 0, 2, 4
        ("a b c d e f g", 4, 2, ["a b c d", "c d e f", "e f g"]),
        # exactly size words: one passage, the text unchanged
        ("a b c d", 4, 1, ["a b c d"]),
        # shorter than size: the original text, whitespace and all
        ("  a  b\nc ", 5, 0, ["  a  b\nc "]),
        # size 0 = whole documents
        ("a b c d e f g h i j", 0, 0, ["a b c d e f g h i j"]),
        # size 1: every word its own passage
        ("x y z", 1, 0, ["x", "y", "z"]),
        # 5 words, size 3, overlap 2 (step 1): starts 0, 1, 2
        ("a b c d e", 3, 2, ["a b c", "b c d", "c d e"]),
    ],
)
def test_chunk_words(text: str, size: int, overlap: int, expected: list[str]) -> None:
    assert chunk_words(text, size, overlap) == expected


# --------------------------------------------------------------------------- CorpusConfig


def test_corpus_config_problems(corpus_path: Path) -> None:
    assert CorpusConfig().problems() == []  # wiki_offline needs no path
    assert corpus_cfg(corpus_path, chunk_words=100, chunk_overlap=20).problems() == []

    no_path = CorpusConfig(source="jsonl").problems()
    assert [p.path for p in no_path] == ["path"]
    missing = CorpusConfig(source="jsonl", path=str(corpus_path.with_name("nope.jsonl")))
    assert [p.path for p in missing.problems()] == ["path"]

    for overlap in (100, 150):
        bad = corpus_cfg(corpus_path, chunk_words=100, chunk_overlap=overlap).problems()
        assert [p.path for p in bad] == ["chunk_overlap"]
    # overlap is irrelevant when documents are not chunked
    assert corpus_cfg(corpus_path, chunk_words=0, chunk_overlap=5).problems() == []

    unknown = CorpusConfig(source="parquet").problems()
    assert [p.path for p in unknown] == ["source"]
    negative = corpus_cfg(corpus_path, chunk_words=-1, limit=-2).problems()
    # (a negative chunk_words also draws a redundant chunk_overlap problem: 0 >= -1)
    assert {"chunk_words", "limit"} <= {p.path for p in negative}


# --------------------------------------------------------------------------- build and open


def test_open_builds_store_with_one_passage_per_document(corpus_path: Path, cache: Path) -> None:
    store = open_corpus(corpus_cfg(corpus_path), cache, progress=False)
    try:
        assert len(store) == len(DOCS) == 10
        assert store.meta["documents"] == 10
        assert store.path == cache / "corpus" / store.fingerprint / "corpus.sqlite"
        rows = store.passages(list(range(len(DOCS))))
        assert rows == [(i, i, t, x) for i, t, x in DOCS]
        # any order, repeats allowed
        assert [r[0] for r in store.passages([9, 0, 9, 4])] == ["d10", "d1", "d10", "d5"]
        assert store.passages([]) == []
        hits = store.hits([6, 1], [2.5, 1.0])
        assert [(h.passage_id, h.doc_id, h.title, h.score) for h in hits] == [
            ("d7", "d7", "Tardigrade", 2.5),
            ("d2", "d2", "Mount Everest", 1.0),
        ]
        texts = [t for batch in store.iter_texts(batch=3) for t in batch]
        assert texts == [f"{t}\n{x}" for _, t, x in DOCS]
    finally:
        store.close()


def test_chunked_rows_map_to_numbered_passage_ids(tmp_path: Path, cache: Path) -> None:
    docs = [
        ("long", "Long", "alpha beta gamma delta epsilon zeta eta theta iota kappa"),  # 10 words
        ("short", "Short", "one two three"),
        ("four", "Four", "w x y z"),
    ]
    path = write_jsonl(tmp_path / "chunks.jsonl", docs)
    store = open_corpus(corpus_cfg(path, chunk_words=4, chunk_overlap=1), cache, progress=False)
    try:
        # long: starts 0, 3, 6 -> 3 chunks; short and four fit in one passage each
        assert len(store) == 5
        assert store.meta["documents"] == 3
        assert store.passages(list(range(5))) == [
            ("long#0", "long", "Long", "alpha beta gamma delta"),
            ("long#1", "long", "Long", "delta epsilon zeta eta"),
            ("long#2", "long", "Long", "eta theta iota kappa"),
            ("short", "short", "Short", "one two three"),
            ("four", "four", "Four", "w x y z"),
        ]
        # the document comes back whole, put together from its passages
        assert store.document(doc_id="long").text == docs[0][2]
    finally:
        store.close()


def test_document_lookup(corpus_path: Path, cache: Path) -> None:
    store = open_corpus(corpus_cfg(corpus_path), cache, progress=False)
    try:
        jaws = Document("d1", "Jaws (film)", DOCS[0][2])
        assert store.document(doc_id="d1") == jaws
        assert store.document(title="Jaws (film)") == jaws
        assert store.document(title="jaws (FILM)") == jaws  # case-insensitive fallback
        assert store.document(title="hanseatic league").doc_id == "d8"
        with pytest.raises(DocumentNotFound, match="'d99'"):
            store.document(doc_id="d99")
        with pytest.raises(DocumentNotFound, match="Jaws 2"):
            store.document(title="Jaws 2")
        with pytest.raises(DocumentNotFound):
            store.document(doc_id="Jaws (film)")  # a title is not an id
    finally:
        store.close()


def test_exact_title_wins_over_case_insensitive_match(tmp_path: Path, cache: Path) -> None:
    docs = [("upper", "PARIS", "the upper-case one"), ("lower", "paris", "the lower-case one")]
    path = write_jsonl(tmp_path / "c.jsonl", docs)
    store = open_corpus(corpus_cfg(path), cache, progress=False)
    try:
        assert store.document(title="paris").doc_id == "lower"
        assert store.document(title="PARIS").doc_id == "upper"
        assert store.document(title="Paris").doc_id in {"upper", "lower"}
    finally:
        store.close()


def test_duplicate_ids_raise_and_leave_nothing(tmp_path: Path, cache: Path) -> None:
    docs = [("a", "A", "first"), ("b", "B", "second"), ("a", "A again", "third")]
    path = write_jsonl(tmp_path / "dup.jsonl", docs)
    with pytest.raises(RetrievalError, match="'a' twice"):
        open_corpus(corpus_cfg(path), cache, progress=False)
    assert store_files(cache) == []


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_empty_corpus_raises_and_leaves_nothing(tmp_path: Path, cache: Path, text: str) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RetrievalError, match="no documents"):
        open_corpus(corpus_cfg(path), cache, progress=False)
    assert store_files(cache) == []


def test_limit_keeps_the_first_documents(corpus_path: Path, cache: Path) -> None:
    store = open_corpus(corpus_cfg(corpus_path, limit=3), cache, progress=False)
    try:
        assert len(store) == 3
        assert [p[0] for p in store.passages([0, 1, 2])] == ["d1", "d2", "d3"]
        with pytest.raises(DocumentNotFound):
            store.document(doc_id="d4")
    finally:
        store.close()


# --------------------------------------------------------------------------- fingerprints


def test_fingerprint_follows_content_and_settings_not_location(
    tmp_path: Path, corpus_path: Path
) -> None:
    base = corpus_fingerprint(corpus_cfg(corpus_path))
    assert base == corpus_fingerprint(corpus_cfg(corpus_path))  # stable

    copy = tmp_path / "elsewhere" / "renamed.jsonl"
    copy.parent.mkdir()
    shutil.copy(corpus_path, copy)
    assert corpus_fingerprint(corpus_cfg(copy)) == base

    edited = list(DOCS)
    edited[3] = ("d4", "Ada Lovelace", "Ada Lovelace wrote the first published algorithm.")
    changed = write_jsonl(tmp_path / "edited.jsonl", edited)
    assert corpus_fingerprint(corpus_cfg(changed)) != base

    others = {
        corpus_fingerprint(corpus_cfg(corpus_path, chunk_words=8)),
        corpus_fingerprint(corpus_cfg(corpus_path, chunk_words=8, chunk_overlap=2)),
        corpus_fingerprint(corpus_cfg(corpus_path, chunk_words=9)),
        corpus_fingerprint(corpus_cfg(corpus_path, limit=4)),
    }
    assert len(others) == 4 and base not in others


def test_fingerprint_sees_a_same_size_edit_with_restored_mtime(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "c.jsonl")
    before = corpus_fingerprint(corpus_cfg(path))
    stat = path.stat()
    data = path.read_bytes()
    edited = data.replace(b"the sixth planet", b"the ninth planet")  # same length
    assert edited != data and len(edited) == len(data)
    path.write_bytes(edited)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert corpus_fingerprint(corpus_cfg(path)) != before


def test_copied_file_reuses_the_built_store(tmp_path: Path, corpus_path: Path, cache: Path) -> None:
    first = open_corpus(corpus_cfg(corpus_path), cache, progress=False)
    first.close()
    copy = tmp_path / "copy.jsonl"
    shutil.copy(corpus_path, copy)
    second = open_corpus(corpus_cfg(copy), cache, progress=False)
    second.close()
    assert second.path == first.path
    assert len(list((cache / "corpus").iterdir())) == 1


def test_reopening_reuses_the_store_without_rebuilding(
    corpus_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = corpus_cfg(corpus_path)
    first = open_corpus(cfg, cache, progress=False)
    first.close()
    mtime = first.path.stat().st_mtime_ns

    def no_rebuild(*args, **kwargs):
        raise AssertionError("the store was rebuilt")

    monkeypatch.setattr(corpus_mod, "build_corpus", no_rebuild)
    second = open_corpus(cfg, cache, progress=False)
    try:
        assert second.path == first.path
        assert second.path.stat().st_mtime_ns == mtime
        assert len(second) == len(DOCS)
    finally:
        second.close()


def test_store_with_a_foreign_fingerprint_is_refused(
    tmp_path: Path, corpus_path: Path, cache: Path
) -> None:
    other_path = write_jsonl(tmp_path / "other.jsonl", DOCS[:2])
    other = open_corpus(corpus_cfg(other_path), cache, progress=False)
    other.close()
    expected = cache / "corpus" / corpus_fingerprint(corpus_cfg(corpus_path)) / "corpus.sqlite"
    expected.parent.mkdir(parents=True)
    shutil.copy(other.path, expected)
    with pytest.raises(RetrievalError, match="delete that directory"):
        open_corpus(corpus_cfg(corpus_path), cache, progress=False)


# --------------------------------------------------------------------------- atomic builds


@pytest.mark.parametrize("exc_type", [RuntimeError, KeyboardInterrupt])
def test_interrupted_build_leaves_no_store_and_no_temp_file(
    corpus_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch, exc_type: type
) -> None:
    real = corpus_mod.iter_documents

    def three_then_fail(cfg):
        for i, doc in enumerate(real(cfg)):
            if i == 3:
                raise exc_type("interrupted mid-build")
            yield doc

    monkeypatch.setattr(corpus_mod, "iter_documents", three_then_fail)
    with pytest.raises(exc_type, match="interrupted mid-build"):
        open_corpus(corpus_cfg(corpus_path), cache, progress=False)
    assert store_files(cache) == []

    monkeypatch.setattr(corpus_mod, "iter_documents", real)
    store = open_corpus(corpus_cfg(corpus_path), cache, progress=False)  # a clean rebuild
    store.close()
    assert len(store) == len(DOCS)
    assert store_files(cache) == [f"{store.fingerprint}/corpus.sqlite"]


def test_build_corpus_replaces_a_stale_temp_file(corpus_path: Path, tmp_path: Path) -> None:
    target = tmp_path / "out" / "corpus.sqlite"
    target.parent.mkdir()
    stale = target.with_name(f"corpus.sqlite.tmp-{os.getpid()}")
    stale.write_bytes(b"left over by a killed build")
    assert build_corpus(corpus_cfg(corpus_path), target, progress=False) == len(DOCS)
    assert sorted(p.name for p in target.parent.iterdir()) == ["corpus.sqlite"]


# --------------------------------------------------------------------------- damaged stores


def test_store_rejects_missing_garbage_and_foreign_files(tmp_path: Path) -> None:
    with pytest.raises(RetrievalError, match="no passage store"):
        CorpusStore(tmp_path / "missing.sqlite")

    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not an sqlite database at all " * 200)
    with pytest.raises(RetrievalError, match="not a valid passage store"):
        CorpusStore(garbage)

    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    with pytest.raises(RetrievalError, match="not a valid passage store"):
        CorpusStore(empty)

    foreign = tmp_path / "foreign.sqlite"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE meta (key TEXT, value TEXT)")
    con.execute("INSERT INTO meta VALUES ('passages', '3')")  # no fingerprint
    con.commit()
    con.close()
    with pytest.raises(RetrievalError, match="not a valid passage store"):
        CorpusStore(foreign)


def test_truncated_store_is_rejected(tmp_path: Path, cache: Path) -> None:
    docs = [(f"x{i}", f"T{i}", " ".join(f"w{i}_{j}" for j in range(40))) for i in range(200)]
    path = write_jsonl(tmp_path / "big.jsonl", docs)
    store = open_corpus(corpus_cfg(path), cache, progress=False)
    store.close()
    data = store.path.read_bytes()
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(RetrievalError, match="Fix: delete it"):
        CorpusStore(cut)


def test_passages_with_unknown_rows_raise(corpus_path: Path, cache: Path) -> None:
    store = open_corpus(corpus_cfg(corpus_path), cache, progress=False)
    try:
        with pytest.raises(RetrievalError, match=r"rows \[10\]"):
            store.passages([0, 10])
        with pytest.raises(RetrievalError, match=r"rows \[-1\]"):
            store.passages([-1])
    finally:
        store.close()


def test_passages_beyond_the_sqlite_parameter_limit(tmp_path: Path, cache: Path) -> None:
    docs = [(f"p{i}", f"T{i}", f"text {i}") for i in range(2000)]
    path = write_jsonl(tmp_path / "many.jsonl", docs)
    store = open_corpus(corpus_cfg(path), cache, progress=False)
    try:
        rows = list(range(1999, -1, -1))
        assert [p[0] for p in store.passages(rows)] == [f"p{i}" for i in rows]
    finally:
        store.close()


# --------------------------------------------------------------------------- cache, open_store


def test_cache_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "env"))
    assert cache_root(str(tmp_path / "explicit")) == tmp_path / "explicit"
    assert cache_root(None) == tmp_path / "env"
    monkeypatch.delenv(CACHE_ENV)
    assert cache_root(None) == Path("~/.cache/seekrl").expanduser()


def test_open_store_without_build_refuses_a_missing_store(corpus_path: Path, cache: Path) -> None:
    cfg = LocalRetrieverConfig(
        name="x", corpus=corpus_cfg(corpus_path), cache_dir=str(cache), progress=False
    )
    cfg.build_if_missing = False
    with pytest.raises(RetrievalError, match="no passage store"):
        open_store(cfg)
    cfg.build_if_missing = True
    open_store(cfg).close()
    cfg.build_if_missing = False
    store = open_store(cfg)
    store.close()
    assert len(store) == len(DOCS)


# --------------------------------------------------------------------------- wiki_offline


def test_wiki_offline_first_five(cache: Path) -> None:
    store = open_corpus(CorpusConfig(source="wiki_offline", limit=5), cache, progress=False)
    try:
        assert len(store) == 5
        rows = store.passages(list(range(5)))
        for passage_id, doc_id, title, text in rows:
            assert passage_id == doc_id == title
            assert text.strip()
        # independently: the package file's articles in sorted-key order, empty extracts skipped
        data = json.loads(wiki_offline_file().read_text(encoding="utf-8"))
        expected = [
            (str(data[k].get("title") or k), str(data[k]["extract"]).strip())
            for k in sorted(data)
            if str(data[k].get("extract", "")).strip()
        ]
        assert [(r[2], r[3]) for r in rows] == expected[:5]
        assert store.document(title=rows[2][2]).doc_id == rows[2][1]
    finally:
        store.close()
