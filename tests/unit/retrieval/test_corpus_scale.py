"""Launches that do not re-read the corpus: the recorded source digest, counts and offsets kept at
build time, each text stored once, and the dry run's document count without a parse."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path

import pytest

from framework.retrieval import corpus as corpus_mod
from framework.retrieval import corpus_source
from framework.retrieval.corpus import (
    SCHEMA_VERSION,
    CorpusConfig,
    CorpusStore,
    corpus_fingerprint,
    document_count,
    open_corpus,
    store_path,
)
from framework.retrieval.corpus_source import block_starts, estimate_lines, record_path
from framework.retrieval.corpus_store import join_chunks
from framework.retrieval.types import RetrievalError
from framework.rl.plan import corpus_stages
from tests.unit.retrieval.corpus_fixtures import DOCS, corpus_cfg, write_jsonl

# --------------------------------------------------------------------------- the source record


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Records kept for any file, three sampled blocks of 16 bytes, and a count of full hashes
    (the list of files hashed whole)."""
    monkeypatch.setattr(corpus_source, "RECORD_MIN_BYTES", 0)
    monkeypatch.setattr(corpus_source, "SAMPLE_BLOCKS", 3)
    monkeypatch.setattr(corpus_source, "SAMPLE_BLOCK_BYTES", 16)
    hashed: list[Path] = []
    real = corpus_source.full_digest

    def counting(path: Path) -> str:
        hashed.append(path)
        return real(path)

    monkeypatch.setattr(corpus_source, "full_digest", counting)
    monkeypatch.setattr(corpus_source, "_MEMO", {})
    return hashed


def new_launch() -> None:
    """What a new process starts with: no digest memoised."""
    corpus_source._MEMO.clear()


def test_block_starts() -> None:
    # 100 bytes, 3 blocks of 10: the first at 0, the last ending at 100, one halfway: 90 // 2 = 45
    assert block_starts(100, 3, 10) == [0, 45, 90]
    # a file no bigger than the blocks is read whole
    assert block_starts(30, 3, 10) == [0, 10, 20]
    assert block_starts(25, 3, 10) == [0, 10, 20]
    assert block_starts(0, 3, 10) == []
    with pytest.raises(ValueError):
        block_starts(100, 1, 10)


def test_a_second_launch_reuses_the_record_and_reads_no_whole_file(
    corpus_path: Path, cache: Path, recorded: list[Path]
) -> None:
    cfg = corpus_cfg(corpus_path)
    first = corpus_fingerprint(cfg, cache)
    assert len(recorded) == 1
    record = json.loads(record_path(cache, corpus_path.resolve()).read_text())
    stat = corpus_path.stat()
    assert record["size"] == stat.st_size and record["mtime_ns"] == stat.st_mtime_ns
    assert record["digest"] == hashlib.blake2b(corpus_path.read_bytes(), digest_size=16).hexdigest()

    new_launch()
    assert corpus_fingerprint(cfg, cache) == first
    assert len(recorded) == 1  # only the sampled blocks were read
    assert sorted(p.name for p in (cache / "corpus" / "sources").iterdir()) == [
        record_path(cache, corpus_path.resolve()).name  # no temporary file left behind
    ]


def test_the_recorded_digest_is_what_a_matching_launch_uses(
    corpus_path: Path, cache: Path, recorded: list[Path]
) -> None:
    cfg = corpus_cfg(corpus_path)
    corpus_fingerprint(cfg, cache)
    where = record_path(cache, corpus_path.resolve())
    record = json.loads(where.read_text())
    where.write_text(json.dumps({**record, "digest": "f" * 32}))  # a digest no file has
    new_launch()
    forged = corpus_fingerprint(cfg, cache)
    new_launch()
    where.unlink()
    assert forged != corpus_fingerprint(cfg, cache)  # so the record, not the file, gave it


def test_same_size_edit_of_a_sampled_block_with_restored_mtime_rehashes(
    corpus_path: Path, cache: Path, recorded: list[Path]
) -> None:
    cfg = corpus_cfg(corpus_path)
    before = corpus_fingerprint(cfg, cache)
    stat = corpus_path.stat()
    data = corpus_path.read_bytes()
    assert data[:16] == b'{"id": "d1", "co'  # the first sampled block
    corpus_path.write_bytes(data.replace(b'"d1"', b'"e1"', 1))  # same size
    os.utime(corpus_path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    new_launch()
    after = corpus_fingerprint(cfg, cache)
    assert after != before
    assert len(recorded) == 2
    new_launch()
    assert corpus_fingerprint(cfg, cache) == after and len(recorded) == 2  # recorded anew


def test_a_new_mtime_rehashes_once_and_keeps_the_fingerprint(
    corpus_path: Path, cache: Path, recorded: list[Path]
) -> None:
    cfg = corpus_cfg(corpus_path)
    before = corpus_fingerprint(cfg, cache)
    mtime = corpus_path.stat().st_mtime_ns + 5_000_000_000
    os.utime(corpus_path, ns=(mtime, mtime))  # touched, same bytes
    new_launch()
    assert corpus_fingerprint(cfg, cache) == before
    assert len(recorded) == 2
    record = json.loads(record_path(cache, corpus_path.resolve()).read_text())
    assert record["mtime_ns"] == mtime


@pytest.mark.parametrize(
    "bad",
    [
        "{not json",
        "",
        json.dumps({"format": 1, "size": 3}),  # fields missing
        json.dumps([1, 2]),
    ],
)
def test_a_corrupt_record_is_ignored_and_rewritten(
    corpus_path: Path, cache: Path, recorded: list[Path], bad: str
) -> None:
    cfg = corpus_cfg(corpus_path)
    expected = corpus_fingerprint(cfg, cache / "elsewhere")
    where = record_path(cache, corpus_path.resolve())
    where.parent.mkdir(parents=True)
    where.write_text(bad)
    new_launch()
    assert corpus_fingerprint(cfg, cache) == expected
    assert len(recorded) == 2
    assert json.loads(where.read_text())["size"] == corpus_path.stat().st_size


def test_a_record_of_another_path_is_not_used(
    corpus_path: Path, cache: Path, recorded: list[Path]
) -> None:
    corpus_fingerprint(corpus_cfg(corpus_path), cache)
    where = record_path(cache, corpus_path.resolve())
    record = json.loads(where.read_text())
    where.write_text(json.dumps({**record, "path": "/elsewhere/corpus.jsonl"}))  # all else matches
    new_launch()
    corpus_fingerprint(corpus_cfg(corpus_path), cache)
    assert len(recorded) == 2


def test_an_unwritable_cache_still_gives_the_fingerprint(
    tmp_path: Path, corpus_path: Path, cache: Path, recorded: list[Path]
) -> None:
    expected = corpus_fingerprint(corpus_cfg(corpus_path), cache)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    unwritable = blocker / "cache"  # no directory can be made under a file, even by root
    for launch in range(2):
        new_launch()
        assert corpus_fingerprint(corpus_cfg(corpus_path), unwritable) == expected
        assert len(recorded) == 2 + launch  # hashed whole on every launch, no error
    assert not unwritable.exists()


def test_small_files_keep_no_record(corpus_path: Path, cache: Path) -> None:
    assert corpus_path.stat().st_size < corpus_source.RECORD_MIN_BYTES
    corpus_fingerprint(corpus_cfg(corpus_path), cache)
    assert not (cache / "corpus" / "sources").exists()


# --------------------------------------------------------------------------- counts and offsets


def test_counts_and_offsets_are_recorded_at_build_time(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(corpus_mod, "OFFSET_EVERY", 2)
    lines = [
        json.dumps({"id": "a", "contents": '"A"\none two three'}),  # 2 passages of 2 words
        json.dumps({"id": "b", "contents": '"B"\nsolo'}),
        "",  # a blank line: counted as a line, not a document
        json.dumps({"id": "c", "contents": '"C"\nfour five'}),
        json.dumps({"id": "d", "contents": '"D"\nsix seven eight nine'}),  # 2 passages
        json.dumps({"id": "e", "contents": '"E"\nten'}),
    ]
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    store = open_corpus(corpus_cfg(path, chunk_words=2), cache, progress=False)
    try:
        # rows: a 0-1, b 2, c 3, d 4-5, e 6
        assert (store.num_documents, store.num_passages) == (5, 7)
        assert store.offsets is not None and store.offsets.every == 2
        # documents 0, 2, 4 (a, c, e) are on lines 0, 3, 5 and start rows 0, 3, 6
        assert store.offsets.line == [0, 3, 5]
        assert store.offsets.row == [0, 3, 6]
        data = path.read_bytes()
        starts = [data[b:].split(b"\n", 1)[0] for b in store.offsets.byte]
        assert starts == [lines[0].encode(), lines[3].encode(), lines[5].encode()]
        assert store.offsets.byte[1] == len(lines[0]) + len(lines[1]) + 3  # 3 newlines before
    finally:
        store.close()


def test_wiki_offline_has_counts_but_no_offsets(cache: Path) -> None:
    store = open_corpus(CorpusConfig(source="wiki_offline", limit=3), cache, progress=False)
    store.close()
    assert (store.num_documents, store.num_passages, store.offsets) == (3, 3, None)


# --------------------------------------------------------------------------- each text once


def test_join_chunks_drops_the_overlap_words() -> None:
    assert join_chunks(["a b c d", "c d e f", "e f g"], 2) == "a b c d e f g"
    assert join_chunks(["a b c", "d e"], 0) == "a b c d e"
    assert join_chunks(["  as\nit was "], 3) == "  as\nit was "  # one passage: untouched


def test_a_chunked_document_with_overlap_comes_back_whole(tmp_path: Path, cache: Path) -> None:
    ten = "w1 w2\nw3  w4 w5 w6 w7 w8 w9 w10"  # 10 words, odd whitespace
    nine = "v1 v2 v3 v4 v5 v6 v7 v8 v9"
    short = "  kept\n as  is "  # 3 words: one passage even when chunked
    docs = [("ten", "Ten", ten), ("nine", "Nine", nine), ("short", "Short", short)]
    path = write_jsonl(tmp_path / "c.jsonl", docs)
    store = open_corpus(corpus_cfg(path, chunk_words=4, chunk_overlap=2), cache, progress=False)
    try:
        # ten: starts 0, 2, 4, 6 (step 2, before 10 - 2); nine: starts 0, 2, 4, 6
        # (before 7), the last one 3 words long
        assert [p[3] for p in store.passages([0, 1, 2, 3])] == [
            "w1 w2 w3 w4",
            "w3 w4 w5 w6",
            "w5 w6 w7 w8",
            "w7 w8 w9 w10",
        ]
        assert [p[0] for p in store.passages([3, 4, 7, 8])] == [
            "ten#3",
            "nine#0",
            "nine#3",
            "short",
        ]
        # a chunked document comes back as its words, single-spaced
        assert store.document(doc_id="ten").text == " ".join(f"w{i}" for i in range(1, 11))
        assert store.document(title="Nine").text == nine
        # a document of one passage comes back byte for byte (the source's text, stripped)
        assert store.document(doc_id="short").text == short.strip()
    finally:
        store.close()


def test_an_unchunked_document_comes_back_byte_for_byte(tmp_path: Path, cache: Path) -> None:
    text = "Line one,\n\n  indented\ttab — ünïcödé  double  spaces"
    path = write_jsonl(tmp_path / "c.jsonl", [("x", "X", text)])
    store = open_corpus(corpus_cfg(path), cache, progress=False)
    try:
        assert store.document(doc_id="x").text == text
    finally:
        store.close()


def test_each_text_is_stored_once(corpus_path: Path, cache: Path) -> None:
    store = open_corpus(corpus_cfg(corpus_path), cache, progress=False)
    store.close()
    con = sqlite3.connect(store.path)
    try:
        columns = {
            table: [c[1] for c in con.execute(f"PRAGMA table_info({table})")]
            for table in ("documents", "passages")
        }
        assert columns == {
            "documents": ["num", "doc_id", "title", "first_row", "passages"],
            "passages": ["row", "doc", "text"],  # no passage_id, doc_id or title copies
        }
        assert con.execute("SELECT * FROM documents WHERE num < 2").fetchall() == [
            (0, "d1", "Jaws (film)", 0, 1),
            (1, "d2", "Mount Everest", 1, 1),
        ]
        dump = "\n".join(con.iterdump())
        assert dump.count("Spielberg") == 1
        assert dump.count("Jaws (film)") == 1  # the title too
    finally:
        con.close()


def test_a_duplicate_id_in_a_later_batch_gives_the_old_error(tmp_path: Path, cache: Path) -> None:
    many = " ".join(f"w{i}" for i in range(10_000))  # 10,000 passages: a batch of its own
    docs = [("a", "A", many), ("b", "B", "two"), ("a", "A again", "three")]
    path = write_jsonl(tmp_path / "dup.jsonl", docs)
    with pytest.raises(RetrievalError, match=r"got the document id 'a' twice.*Fix: dedup"):
        open_corpus(corpus_cfg(path, chunk_words=1), cache, progress=False)
    assert not (cache / "corpus").exists() or not list((cache / "corpus").rglob("*.sqlite*"))


# --------------------------------------------------------------------------- old layouts

OLD_TABLES = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE passages (row INTEGER PRIMARY KEY, passage_id TEXT NOT NULL, doc_id TEXT NOT NULL,
    title TEXT NOT NULL, text TEXT NOT NULL);
CREATE TABLE documents (doc_id TEXT PRIMARY KEY, title TEXT NOT NULL, text TEXT NOT NULL);
"""


def write_store(path: Path, fingerprint: str, meta: dict) -> None:
    """A store of layout 1 (what seekrl wrote before SCHEMA_VERSION 2)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.executescript(OLD_TABLES)
    con.execute("INSERT INTO passages VALUES (0, 'd1', 'd1', 'Jaws (film)', 'Jaws is')")
    con.execute("INSERT INTO documents VALUES ('d1', 'Jaws (film)', 'Jaws is')")
    meta = {"fingerprint": fingerprint, "passages": 1, "documents": 1, **meta}
    con.executemany("INSERT INTO meta VALUES (?, ?)", [(k, json.dumps(v)) for k, v in meta.items()])
    con.commit()
    con.close()


def test_an_old_layout_is_refused_with_a_fix_and_rebuilt_by_open_corpus(
    corpus_path: Path, cache: Path
) -> None:
    cfg = corpus_cfg(corpus_path)
    path = store_path(cache, corpus_fingerprint(cfg, cache))
    write_store(path, corpus_fingerprint(cfg, cache), {"config": {"chunk_overlap": 0}})
    with pytest.raises(RetrievalError, match=r"layout 1; expected 2\. Fix: delete it"):
        CorpusStore(path)
    store = open_corpus(cfg, cache, progress=False)
    try:
        assert store.meta["schema"] == SCHEMA_VERSION
        assert len(store) == len(DOCS)
    finally:
        store.close()


def test_a_newer_layout_is_refused_not_downgraded(corpus_path: Path, cache: Path) -> None:
    cfg = corpus_cfg(corpus_path)
    path = store_path(cache, corpus_fingerprint(cfg, cache))
    write_store(path, corpus_fingerprint(cfg, cache), {"schema": SCHEMA_VERSION + 1})
    with pytest.raises(RetrievalError, match=f"layout {SCHEMA_VERSION + 1}"):
        open_corpus(cfg, cache, progress=False)


# --------------------------------------------------------------------------- the dry run's count


def refuse(*args, **kwargs):
    raise AssertionError("the source was read")


def no_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(corpus_mod, "iter_documents", refuse)


def test_plan_counts_from_the_built_store(
    corpus_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_corpus(corpus_cfg(corpus_path, limit=7), cache, progress=False).close()
    no_parse(monkeypatch)
    monkeypatch.setattr(corpus_mod, "estimate_lines", refuse)
    fingerprint, documents, stage = corpus_stages(corpus_cfg(corpus_path, limit=7), str(cache))
    assert (documents, stage.ready) == (7, True)
    assert stage.work == "7 documents, seconds"
    assert stage.where == str(store_path(cache, fingerprint))


def test_plan_counts_a_small_unbuilt_file_without_parsing_it(
    corpus_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_parse(monkeypatch)
    _, documents, stage = corpus_stages(corpus_cfg(corpus_path), str(cache))
    assert (documents, stage.ready, stage.work) == (10, False, "10 documents, seconds")


def fixed_lines(count: int, width: int, start: int) -> list[str]:
    """``count`` JSONL lines of exactly ``width`` bytes with their newline."""
    out = []
    for i in range(start, start + count):
        bare = json.dumps({"id": f"{i:03d}", "contents": '"T"\n'})
        line = json.dumps({"id": f"{i:03d}", "contents": '"T"\n' + "x" * (width - 1 - len(bare))})
        assert len(line) + 1 == width
        out.append(line)
    return out


def test_plan_estimates_a_big_unbuilt_file_from_sampled_lines(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 60 lines of 50 bytes (0-3000) then 20 of 100 bytes (3000-5000): 80 documents, 5000 bytes
    path = tmp_path / "big.jsonl"
    path.write_text("\n".join(fixed_lines(60, 50, 0) + fixed_lines(20, 100, 60)) + "\n")
    assert path.stat().st_size == 5000
    monkeypatch.setattr(corpus_source, "ESTIMATE_BLOCKS", 3)
    monkeypatch.setattr(corpus_source, "ESTIMATE_BLOCK_BYTES", 120)
    no_parse(monkeypatch)
    # blocks at 0, 2440, 4880 (span 4880 / 2). [0, 120): lines 0-50, 50-100 -> 2 lines, 100 B;
    # [2440, 2560): cut line to 2450, then 2450-2500, 2500-2550 -> 2 lines, 100 B;
    # [4880, 5000): cut line to 4900, then 4900-5000 (the end) -> 1 line, 100 B.
    # 5 lines in 300 bytes: 5000 * 5 / 300 = 83.3 -> about 83
    assert estimate_lines(path) == (83, False)
    _, documents, stage = corpus_stages(corpus_cfg(path), str(cache))
    assert (documents, stage.work) == (83, "about 83 documents, seconds")
    assert document_count(corpus_cfg(path, limit=40), store_path(cache, "x")) == (40, False)
