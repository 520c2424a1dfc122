"""Passage embeddings of a corpus, computed once per (corpus, encoder) and kept as one ``.npy``.

The file is written in ``retriever.encoder.store_dtype`` (float16 by default: half the disk and
the memory it maps; queries stay float32) and computed in shards of ``shard_rows`` passages. While
it is computed, a preallocated ``<name>.partial.npy`` and a record ``<name>.done.json`` sit beside
it: a shard's rows are flushed to the partial file before the record names it (the record is
replaced atomically), so the record never claims rows that are not there, and a rerun after Ctrl-C,
SIGTERM or a kill computes only the shards it does not name. The finished file is renamed into place
and the record removed.

With ``retriever.encoder.devices`` empty one worker encodes in this process on
``retriever.encoder.device``; otherwise one process per entry (:mod:`framework.retrieval.embed_workers`)
takes shards from a queue and writes its disjoint rows itself. After each run the rate it achieved
is kept in the cache (:mod:`framework.retrieval.embed_rates`) for the dry run's estimate.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from framework.paths import cache_root
from framework.progress import Progress
from framework.retrieval.corpus import CorpusStore
from framework.retrieval.embed_rates import record_rate
from framework.retrieval.embed_shards import (
    EncoderFactory,
    PassageEncoder,
    encode_shard,
)
from framework.retrieval.encoder import EncoderConfig, encoder_fingerprint, fingerprint_key

#: beside ``x.npy`` while it is computed: the preallocated rows and the record of finished shards
PARTIAL_SUFFIX = ".partial.npy"
RECORD_SUFFIX = ".done.json"


@dataclass(frozen=True)
class Layout:
    """The shape of an embeddings file and how it is cut into shards; a partial file and its record
    are resumed only when they have this layout (another corpus, encoder or setting starts over).

    Attributes:
        rows: passages (rows of the file).
        dim: embedding dimension.
        dtype: stored dtype (``float16`` or ``float32``).
        shard_rows: passages per shard (the last one may be shorter).
    """

    rows: int
    dim: int
    dtype: str
    shard_rows: int

    def shards(self) -> list[tuple[int, int]]:
        """``[start, stop)`` rows of each shard, in order."""
        return shard_bounds(self.rows, self.shard_rows)

    def header(self) -> dict[str, Any]:
        return {"shape": [self.rows, self.dim], "dtype": self.dtype, "shard_rows": self.shard_rows}


def shard_bounds(rows: int, shard_rows: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of each shard of ``shard_rows`` rows over ``rows`` rows (10 rows by 4:
    ``[(0, 4), (4, 8), (8, 10)]``)."""
    return [(s, min(s + shard_rows, rows)) for s in range(0, rows, shard_rows)]


def read_done(record: Path, layout: Layout) -> set[int]:
    """The shards a record names as finished; empty for a missing or unreadable record, one of
    another layout, or one naming shards that do not exist."""
    try:
        state = json.loads(record.read_text())
        done = {int(i) for i in state.pop("done")}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return set()
    if state != layout.header() or not done <= set(range(len(layout.shards()))):
        return set()
    return done


def write_done(record: Path, layout: Layout, done: set[int]) -> None:
    """Replace ``record`` atomically (a kill leaves the old record or the new one, never half)."""
    tmp = record.with_name(record.name + ".tmp")
    tmp.write_text(json.dumps({**layout.header(), "done": sorted(done)}))
    os.replace(tmp, record)


def _open_partial(partial: Path, record: Path, layout: Layout) -> set[int]:
    """The finished shards of a partial file that can be resumed; otherwise a new, preallocated
    partial file (sparse on disk until written) and no finished shard."""
    done = read_done(record, layout) if partial.is_file() else set()
    if done:
        try:
            old = np.load(partial, mmap_mode="r")
            if old.shape == (layout.rows, layout.dim) and old.dtype == np.dtype(layout.dtype):
                return done
        except (OSError, ValueError):
            pass
    record.unlink(missing_ok=True)
    np.lib.format.open_memmap(
        partial, mode="w+", dtype=np.dtype(layout.dtype), shape=(layout.rows, layout.dim)
    )
    return set()


def compute_embeddings(
    store: CorpusStore,
    encoder: PassageEncoder,
    path: Path,
    *,
    progress: bool = True,
    factory: EncoderFactory | None = None,
    fingerprint: dict[str, object] | None = None,
) -> np.ndarray:
    """Embeddings of every passage of ``store``: a read-only memmap ``[n, dim]`` of the stored
    dtype at ``path``, computed in recorded shards (resumed after an interruption) unless there.

    Args:
        store: the passage store (row ``i`` is vector ``i``).
        encoder: its ``cfg`` gives the stored dtype, the shard size and the worker devices; with no
            ``devices`` it encodes the passages itself.
        path: the ``.npy`` to make.
        progress: show a bar or progress lines.
        factory: builds each worker process's encoder from the config (its ``device`` set to the
            worker's); picklable; default :class:`~framework.retrieval.encoder.SentenceEncoder`.
        fingerprint: the encoder's fingerprint; when given, the rate of this run is recorded in
            ``rates.json`` beside ``path`` for the dry run's estimate.

    Raises:
        RetrievalError: a worker process failed or died (the shards finished before are kept).
        KeyboardInterrupt: Ctrl-C, or SIGTERM under :func:`framework.interrupt.sigterm_as_interrupt`
            (the shards finished before are kept).
    """
    if path.is_file():
        return np.load(path, mmap_mode="r")
    cfg = encoder.cfg
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(PARTIAL_SUFFIX)
    record = path.with_suffix(RECORD_SUFFIX)
    layout = Layout(len(store), encoder.dim, cfg.store_dtype, cfg.shard_rows)
    done = _open_partial(partial, record, layout)
    shards = layout.shards()
    pending = [i for i in range(len(shards)) if i not in done]

    def finished(shard: int) -> None:  # its rows are flushed: the record may name it now
        done.add(shard)
        write_done(record, layout, done)

    initial = sum(shards[i][1] - shards[i][0] for i in done)
    started = time.monotonic()
    with Progress("embed", layout.rows, "passage", initial=initial, enabled=progress) as bar:
        if cfg.devices:
            from framework.retrieval.embed_workers import run_workers

            todo = [(i, shards[i]) for i in pending]
            run_workers(store.path, cfg, factory, partial, todo, finished, bar.update)
        else:
            out = np.load(partial, mmap_mode="r+")
            try:
                for i in pending:
                    encode_shard(store, encoder, out, shards[i], bar.update)
                    finished(i)
            finally:
                del out
    seconds = time.monotonic() - started
    os.replace(partial, path)
    record.unlink(missing_ok=True)
    if fingerprint is not None:
        encoded = layout.rows - initial
        record_rate(path.parent, fingerprint, cfg, passages=encoded, seconds=seconds)
    return np.load(path, mmap_mode="r")


class _HasEncoder(Protocol):
    cache_dir: str | None
    encoder: EncoderConfig


def embeddings_path(cfg: _HasEncoder, corpus: str, encoder: dict[str, Any] | None = None) -> Path:
    """The cached passage embeddings of ``cfg``'s encoder over the corpus ``corpus``.

    Args:
        cfg: a retriever config with ``cache_dir`` and ``encoder`` (a FAISS retriever's).
        corpus: the corpus fingerprint.
        encoder: the encoder's fingerprint, computed when not given (it includes the stored
            dtype, so float16 and float32 embeddings are kept apart).
    """
    # passage embeddings do not depend on the query prefix: changing it must not re-encode
    fp = encoder or encoder_fingerprint(cfg.encoder)
    enc = fingerprint_key({k: v for k, v in fp.items() if k != "query_prefix"})
    return cache_root(cfg.cache_dir) / "embeddings" / f"{corpus}-{enc}.npy"
