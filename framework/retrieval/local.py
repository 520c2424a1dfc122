"""What the local backends (faiss, bm25, hybrid) share: corpus, cache directory, manifests."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from framework.config import option

# the cache helpers live in framework.paths; re-exported here for code that imports them from here
from framework.paths import CACHE_ENV as CACHE_ENV
from framework.paths import cache_root as cache_root
from framework.retrieval.corpus import (
    CorpusConfig,
    CorpusStore,
    corpus_fingerprint,
    open_corpus,
    store_path,
)
from framework.retrieval.types import (
    ClosedOnExit,
    RetrievalError,
    RetrieverConfigBase,
    document_key,
)
from framework.types import Document

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1


@dataclass
class LocalRetrieverConfig(RetrieverConfigBase):
    """A backend over a local corpus whose indexes are cached on disk."""

    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    cache_dir: str | None = option(None, "index cache; None = $SEEKRL_CACHE or ~/.cache/seekrl")
    build_if_missing: bool = option(True, "build a missing index on first use (else fail)")
    progress: bool = option(True, "progress bars while building")


class StoreBacked(ClosedOnExit):
    """Document lookup and closing for backends that own a :class:`CorpusStore`."""

    store: CorpusStore

    def document(self, *, doc_id: str | None = None, title: str | None = None) -> Document:
        key, value = document_key(doc_id, title)
        return self.store.document(**{key: value})

    def close(self) -> None:
        self.store.close()


class IndexBacked(StoreBacked):
    """A backend over a corpus store with one index cached in ``directory``, whose manifest must
    match ``manifest`` (what the configuration expects the index to hold)."""

    directory: Path
    manifest: dict[str, Any]
    build_seconds: float | None  # None: the index was loaded, not built, by this instance

    def index_found(self, keys: Sequence[str], *, may_build: bool, missing: str) -> bool:
        """Whether ``directory`` holds a finished index (its manifest matching ``manifest`` on
        ``keys``); False when it holds none and one ``may_build``.

        Raises:
            RetrievalError: ``missing`` when there is no index and none may be built; a manifest
                that is corrupt or differs from ``manifest``.
        """
        found = read_manifest(self.directory)
        if found is None:
            if not may_build:
                raise RetrievalError(missing)
            return False
        check_manifest(found, self.manifest, self.directory, keys)
        return True

    def finish_build(self, clock: Stopwatch, **extra: Any) -> None:
        """Note the build's seconds (``clock``: started with it) and write the manifest, with
        ``extra`` entries: last, so that its presence means the build finished."""
        self.build_seconds = clock()
        write_manifest(
            self.directory, {**self.manifest, **extra, "build_seconds": self.build_seconds}
        )


def open_store(cfg: LocalRetrieverConfig) -> CorpusStore:
    """The corpus store of ``cfg`` (built into the cache when missing and allowed)."""
    root = cache_root(cfg.cache_dir)
    if not cfg.build_if_missing:
        return CorpusStore(store_path(root, corpus_fingerprint(cfg.corpus, root)))
    return open_corpus(cfg.corpus, root, progress=cfg.progress)


def write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest.json`` atomically (last, so its presence means the build finished)."""
    tmp = directory / f"{MANIFEST}.tmp"
    tmp.write_text(json.dumps({"format": MANIFEST_FORMAT, **manifest}, indent=2, sort_keys=True))
    os.replace(tmp, directory / MANIFEST)


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """The manifest in ``directory``, or None when there is none.

    Raises:
        RetrievalError: a manifest that is not valid JSON.
    """
    path = directory / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RetrievalError(
            f"[retriever.index] {path} is corrupt ({exc}). Fix: delete {directory} and rebuild."
        ) from exc


def check_manifest(
    manifest: dict[str, Any], expected: dict[str, Any], directory: Path, keys: Sequence[str]
) -> None:
    """Refuse an index whose manifest differs from the configured corpus/encoder/parameters.

    Raises:
        RetrievalError: listing every differing entry, configured against found.
    """
    diffs = [
        f"{key}: configured {expected.get(key)!r}, index has {manifest.get(key)!r}"
        for key in keys
        if manifest.get(key) != expected.get(key)
    ]
    if diffs:
        raise RetrievalError(
            f"[retriever.index] the index in {directory} does not match the configuration:\n  "
            + "\n  ".join(diffs)
            + "\nFix: point retriever.index.path at a matching index, or remove it to rebuild."
        )


class Stopwatch:
    """Seconds since creation."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def __call__(self) -> float:
        return time.perf_counter() - self.start
