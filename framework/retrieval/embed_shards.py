"""Encoding one shard of passage rows into an embeddings file: what the in-process path
(:mod:`framework.retrieval.embeddings`) and the spawned workers
(:mod:`framework.retrieval.embed_workers`) share."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

import numpy as np

from framework.retrieval.corpus import CorpusStore
from framework.retrieval.encoder import EncoderConfig


class PassageEncoder(Protocol):
    """What encoding passages needs of an encoder (:class:`~framework.retrieval.encoder.SentenceEncoder`
    or a test's fake)."""

    cfg: EncoderConfig
    dim: int

    def encode_passages(self, passages: Sequence[str], *, progress: bool = False) -> np.ndarray: ...


#: makes a worker's encoder from its config (``device`` set to the worker's)
EncoderFactory = Callable[[EncoderConfig], PassageEncoder]


def shard_batches(
    store: CorpusStore, start: int, stop: int, batch: int
) -> Iterator[tuple[int, list[str]]]:
    """``(first row, texts)`` of rows ``[start, stop)`` of ``store``, ``batch`` at a time; the text
    is the title, a newline, the passage (as :meth:`CorpusStore.iter_texts` gives it)."""
    for first in range(start, stop, batch):
        rows = list(range(first, min(first + batch, stop)))
        yield first, [f"{title}\n{text}" for _, _, title, text in store.passages(rows)]


def read_batch(cfg: EncoderConfig) -> int:
    """Passages read from the store per encoder call (the encoder batches them again)."""
    return max(cfg.batch_size * 16, 1024)


def encode_shard(
    store: CorpusStore,
    encoder: PassageEncoder,
    out: np.ndarray,
    bounds: tuple[int, int],
    on_rows: Callable[[int], None],
) -> None:
    """Encode rows ``bounds`` of ``store`` into ``out`` (a memmap, cast to its dtype) and flush them.

    Args:
        on_rows: called with the number of rows after each encoder call (progress).
    """
    for first, texts in shard_batches(store, *bounds, read_batch(encoder.cfg)):
        out[first : first + len(texts)] = encoder.encode_passages(texts)
        on_rows(len(texts))
    flush = getattr(out, "flush", None)
    if flush is not None:
        flush()
