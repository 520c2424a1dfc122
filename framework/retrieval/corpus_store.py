"""Reading a built passage store (``corpus.sqlite``): its layout, and :class:`CorpusStore`.

Each text is stored once, in ``passages``; ``documents`` holds a document's id, title, first passage
row and passage count, and a passage's id is derived (``<doc_id>`` for a document of one passage,
``<doc_id>#<j>`` for its ``j``-th chunk), so ids are stored once too. :mod:`framework.retrieval.corpus`
builds stores; this module only reads them.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from framework.retrieval.types import DocumentNotFound, RetrievalError
from framework.types import Document, Hit

#: the store's table layout (2: each text once, passage ids derived; 1 kept the document texts in
#: ``documents`` as well). An older store is rebuilt by ``open_corpus`` and refused here. Not part
#: of the corpus fingerprint: the passages, and the embeddings and indexes keyed by it, are the
#: same in both layouts
SCHEMA_VERSION = 2

TABLES = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE documents (
    num INTEGER PRIMARY KEY, doc_id TEXT NOT NULL UNIQUE, title TEXT NOT NULL,
    first_row INTEGER NOT NULL, passages INTEGER NOT NULL);
CREATE TABLE passages (row INTEGER PRIMARY KEY, doc INTEGER NOT NULL, text TEXT NOT NULL);
"""
INDEXES = """
CREATE INDEX documents_title ON documents(title);
CREATE INDEX documents_title_nocase ON documents(title COLLATE NOCASE);
"""
_PASSAGE = (
    "SELECT p.row, d.doc_id, d.title, p.text, d.first_row, d.passages "
    "FROM passages p JOIN documents d ON d.num = p.doc"
)


@dataclass(frozen=True)
class SourceOffsets:
    """Where every ``every``-th document of a JSONL source starts: document ``k * every`` is on line
    ``line[k]`` at byte ``byte[k]`` and its first passage is row ``row[k]``; enough for a reader to
    split the file into shards and number their rows without reading what comes before."""

    every: int
    byte: list[int]
    line: list[int]
    row: list[int]


def passage_id(doc_id: str, first_row: int, count: int, row: int) -> str:
    """The id of passage ``row`` of a document whose ``count`` passages start at ``first_row``."""
    return doc_id if count == 1 else f"{doc_id}#{row - first_row}"


def join_chunks(chunks: list[str], overlap: int) -> str:
    """A document put back together from its passages (``chunk_words``'s output): one passage is
    the text as it was; several are joined by single spaces, each after the first without the
    ``overlap`` words it shares with the one before."""
    if len(chunks) == 1:
        return chunks[0]
    words = chunks[0].split()
    for chunk in chunks[1:]:
        words += chunk.split()[overlap:]
    return " ".join(words)


def stored_schema(path: Path) -> int | None:
    """The layout version of the store at ``path`` (1 for a store from before versions were
    recorded); None when it is not a readable store."""
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        finally:
            con.close()
        if "fingerprint" not in meta:
            return None
        return int(json.loads(meta.get("schema", "1")))
    except (sqlite3.DatabaseError, ValueError, TypeError):
        return None


class CorpusStore:
    """Read-only, thread-safe access to a built passage store.

    Attributes:
        meta: everything the build recorded (fingerprint, counts, offsets, config, schema).
        num_passages / num_documents: the counts.
        offsets: byte offsets of every ``offsets.every``-th document of a JSONL source, or None.

    Args:
        path: the ``corpus.sqlite`` file.

    Raises:
        RetrievalError: the file is missing, not an SQLite store, truncated or of another layout.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise RetrievalError(
                f"[retriever.corpus] no passage store at {self.path}. "
                "Fix: run seekrl-index to build it."
            )
        self._local = threading.local()
        try:
            meta = dict(self._con().execute("SELECT key, value FROM meta").fetchall())
            self.meta: dict[str, Any] = {k: json.loads(v) for k, v in meta.items()}
            self.fingerprint: str = self.meta["fingerprint"]
            self.num_passages: int = int(self.meta["passages"])
        except (sqlite3.DatabaseError, KeyError, json.JSONDecodeError) as exc:
            self.close()
            raise RetrievalError(
                f"[retriever.corpus] {self.path} is not a valid passage store ({exc}). "
                "Fix: delete it and run seekrl-index again."
            ) from exc
        schema = self.meta.get("schema", 1)
        if schema != SCHEMA_VERSION:
            self.close()
            raise RetrievalError(
                f"[retriever.corpus] {self.path} has store layout {schema}; expected "
                f"{SCHEMA_VERSION}. Fix: delete it and run seekrl-index again (it rebuilds the "
                "store only; embeddings and indexes are kept)."
            )
        self.num_documents: int = int(self.meta["documents"])
        self.overlap: int = int(self.meta["config"]["chunk_overlap"])
        found = self.meta.get("offsets")
        self.offsets: SourceOffsets | None = SourceOffsets(**found) if found else None

    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            self._local.con = con
        return con

    def __len__(self) -> int:
        return self.num_passages

    def passages(self, rows: list[int]) -> list[tuple[str, str, str, str]]:
        """``(passage_id, doc_id, title, text)`` for each row, in the order given."""
        if not rows:
            return []
        unique = sorted(set(rows))
        found: dict[int, tuple[str, str, str, str]] = {}
        for start in range(0, len(unique), 900):  # SQLite's bound-parameter limit
            part = unique[start : start + 900]
            marks = ",".join("?" * len(part))
            sql = f"{_PASSAGE} WHERE p.row IN ({marks})"
            for row, doc_id, title, text, first, count in self._con().execute(sql, part):
                found[row] = (passage_id(doc_id, first, count, row), doc_id, title, text)
        missing = [r for r in unique if r not in found]
        if missing:
            raise RetrievalError(
                f"[retriever.index] refers to passage rows {missing[:5]} that the store "
                f"{self.path} lacks; expected an index built from this corpus. Fix: rebuild."
            )
        return [found[r] for r in rows]

    def hits(self, rows: list[int], scores: list[float]) -> list[Hit]:
        """Hits for passage ``rows`` with their ``scores``."""
        return [Hit(*p, score=float(s)) for p, s in zip(self.passages(rows), scores, strict=True)]

    def ranked_hits(
        self,
        id_rows: list[list[int]],
        score_rows: list[list[float]],
        keep: Callable[[int, float], bool],
    ) -> list[list[Hit]]:
        """Per query, the hits of an index's ``(ids, scores)`` rows, keeping the pairs ``keep`` accepts
        (FAISS pads with id -1, BM25 with score 0)."""
        out = []
        for ids, scores in zip(id_rows, score_rows, strict=True):
            pairs = [(int(i), s) for i, s in zip(ids, scores, strict=True) if keep(i, s)]
            out.append(self.hits([i for i, _ in pairs], [s for _, s in pairs]))
        return out

    def iter_texts(self, batch: int = 4096) -> Iterator[list[str]]:
        """Passage texts prefixed by their titles, in row order, ``batch`` at a time."""
        last = -1
        sql = (
            "SELECT p.row, d.title, p.text FROM passages p JOIN documents d ON d.num = p.doc "
            "WHERE p.row > ? ORDER BY p.row LIMIT ?"
        )
        while True:
            got = self._con().execute(sql, (last, batch)).fetchall()
            if not got:
                return
            last = got[-1][0]
            yield [f"{title}\n{text}" for _, title, text in got]

    def document(self, *, doc_id: str | None = None, title: str | None = None) -> Document:
        """The whole document by id, or by title (exact first, then case-insensitive). A chunked
        document is put back together from its passages (:func:`join_chunks`): its words, joined by
        single spaces; a document of one passage comes back exactly as the source had it.

        Raises:
            DocumentNotFound: no such document.
        """
        con = self._con()
        sql = "SELECT doc_id, title, first_row, passages FROM documents WHERE"
        if doc_id is not None:
            found = con.execute(f"{sql} doc_id = ?", (doc_id,)).fetchone()
            what = f"id {doc_id!r}"
        else:
            found = (
                con.execute(f"{sql} title = ?", (title,)).fetchone()
                or con.execute(f"{sql} title = ? COLLATE NOCASE", (title,)).fetchone()
            )
            what = f"title {title!r}"
        if found is None:
            raise DocumentNotFound(
                f"[retriever.document] no document with {what} in {self.path.name}"
            )
        found_id, found_title, first, count = found
        chunks = con.execute(
            "SELECT text FROM passages WHERE row >= ? AND row < ? ORDER BY row",
            (first, first + count),
        ).fetchall()
        return Document(found_id, found_title, join_chunks([c for (c,) in chunks], self.overlap))

    def close(self) -> None:
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None
