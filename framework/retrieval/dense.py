"""Dense retrieval with FAISS: flat inner product, HNSW, IVF and IVF-PQ indexes, cached on disk.

Embeddings are computed once per (corpus, encoder) and kept as ``.npy`` beside the indexes, so
building a second index type does not re-encode the corpus; an interrupted embedding run resumes
from its finished shards (:mod:`framework.retrieval.embeddings`). Each index directory holds ``index.faiss`` and a ``manifest.json`` that records the
corpus fingerprint, encoder, dimension, metric, index type and parameters; loading refuses a
manifest that does not match the configuration.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from framework.paths import cache_root
from framework.registry.kinds import RETRIEVERS
from framework.retrieval.build_memory import current_rss_bytes
from framework.retrieval.embeddings import compute_embeddings, embeddings_path
from framework.retrieval.encoder import (
    EncoderConfig,
    SentenceEncoder,
    encoder_fingerprint,
    fingerprint_key,
)

# the index build moved to faiss_build; these names stay importable from here
from framework.retrieval.faiss_build import INDEX_TYPES as INDEX_TYPES
from framework.retrieval.faiss_build import DenseIndexConfig as DenseIndexConfig
from framework.retrieval.faiss_build import auto_nlist as auto_nlist
from framework.retrieval.faiss_build import build_faiss_index as build_faiss_index
from framework.retrieval.faiss_build import (
    build_record,
    load_flags,
    plan_build,
    set_search_params,
)
from framework.retrieval.local import (
    IndexBacked,
    LocalRetrieverConfig,
    Stopwatch,
    open_store,
    read_manifest,
)
from framework.retrieval.refine import rerank_exact
from framework.retrieval.types import RetrievalError, check_request
from framework.types import Hit


@dataclass
class FaissRetrieverConfig(LocalRetrieverConfig):
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    index: DenseIndexConfig = field(default_factory=DenseIndexConfig)


def _params_key(params: dict[str, Any]) -> str:
    return hashlib.blake2b(json.dumps(params, sort_keys=True).encode(), digest_size=6).hexdigest()


def faiss_index_dir(
    cfg: FaissRetrieverConfig, corpus: str, encoder: dict[str, Any] | None = None
) -> Path:
    """Where the index of ``cfg`` over the corpus with fingerprint ``corpus`` lives (``index.path``
    when set, else the cache). ``encoder``: its fingerprint, computed when not given."""
    if cfg.index.path:
        return Path(cfg.index.path).expanduser()
    enc = fingerprint_key(encoder or encoder_fingerprint(cfg.encoder))
    params = _params_key(cfg.index.build_params())
    return cache_root(cfg.cache_dir) / "index" / f"{corpus}-{enc}-{params}"


@RETRIEVERS.register("faiss", config=FaissRetrieverConfig)
class FaissRetriever(IndexBacked):
    """Dense retrieval: encode queries, search a FAISS index, read passages from the store.

    The index is taken from ``index.path`` when set, else from the cache (built on first use when
    ``build_if_missing``).

    Args:
        cfg: corpus, encoder, index and limits.

    Raises:
        RetrievalError: an index that does not match the configuration, or is corrupt or truncated.
    """

    def __init__(
        self, *, cfg: FaissRetrieverConfig, encoder: SentenceEncoder | None = None
    ) -> None:
        self.cfg = cfg
        self.store = open_store(cfg)
        try:
            self.encoder = encoder or SentenceEncoder(cfg.encoder)
            self.manifest = self._expected_manifest()
            self.directory = self._index_dir()
            self.build_seconds: float | None = None
            self.build_info: dict[str, Any] | None = None
            self.adopted: dict[str, Any] | None = None  # what adopt checked, for an adopted index
            self.index = self._load_or_build()
            set_search_params(self.index, cfg.index)
            self._embeddings: np.ndarray | None = None
            if cfg.index.refine > 1:
                self._stored_embeddings()  # refuse at load, not at the first query
        except BaseException:
            self.store.close()
            raise

    def _expected_manifest(self) -> dict[str, Any]:
        return {
            "corpus": {"fingerprint": self.store.fingerprint, "passages": len(self.store)},
            "encoder": encoder_fingerprint(self.cfg.encoder),
            "dim": self.encoder.dim,
            "metric": "inner_product",
            "index": self.cfg.index.build_params(),
        }

    def _index_dir(self) -> Path:
        return faiss_index_dir(self.cfg, self.store.fingerprint, self.manifest["encoder"])

    def _embeddings_path(self) -> Path:
        return embeddings_path(self.cfg, self.store.fingerprint, self.manifest["encoder"])

    def _load_or_build(self) -> Any:
        import faiss

        missing = (
            f"[retriever.index] no index (manifest.json) in {self.directory}. "
            "Fix: run seekrl-index, or unset retriever.index.path to use the cache."
        )
        keys = ("corpus", "encoder", "dim", "metric", "index")
        may_build = not self.cfg.index.path and self.cfg.build_if_missing
        if not self.index_found(keys, may_build=may_build, missing=missing):
            return self.build()
        found = read_manifest(self.directory) or {}
        self.build_info, self.adopted = found.get("build"), found.get("adopted")
        path = self.directory / "index.faiss"
        if path.is_symlink() and not path.exists():  # an adopted index whose file went away
            raise RetrievalError(
                f"[retriever.index] {path} links to {os.readlink(path)}, which is missing. "
                "Fix: put the index file back there, or adopt it again from where it is now "
                "(seekrl-index adopt=<file>)."
            )
        try:
            # mapped, not read: an index larger than memory loads, and processes share its pages
            flags = load_flags(self.cfg.index.type)
            index = faiss.read_index(str(path), flags)
        except RuntimeError as exc:
            raise RetrievalError(
                f"[retriever.index] {self.directory / 'index.faiss'} is unreadable (corrupt or "
                f"truncated: {str(exc).splitlines()[0]}). Fix: delete {self.directory} and rebuild."
            ) from exc
        if index.ntotal != len(self.store) or index.d != self.encoder.dim:
            raise RetrievalError(
                f"[retriever.index] {self.directory} holds {index.ntotal} vectors of dim {index.d}; "
                f"expected {len(self.store)} of dim {self.encoder.dim}. Fix: rebuild the index."
            )
        return index

    def build(self) -> Any:
        """Embed the corpus (or reuse cached embeddings), build the index, save it with its manifest."""
        import faiss

        clock = Stopwatch()
        # before the embeddings, which can take hours: refuses a build that cannot fit
        plan = plan_build(len(self.store), self.encoder.dim, self.cfg.index)
        emb = compute_embeddings(
            self.store,
            self.encoder,
            self._embeddings_path(),
            progress=self.cfg.progress,
            fingerprint=self.manifest["encoder"],
        )
        rss_before = current_rss_bytes()
        index = build_faiss_index(emb, self.cfg.index, plan=plan)
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / "index.faiss.tmp"
        faiss.write_index(index, str(tmp))
        os.replace(tmp, self.directory / "index.faiss")
        self.build_info = build_record(plan, rss_before)
        self.finish_build(clock, faiss_version=faiss.__version__, build=self.build_info)
        return index

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Top-``k`` passages per query (see :class:`~framework.registry.protocols.Retriever`)."""
        queries = check_request(queries, k, self.cfg.limits)
        return self.search_embeddings(self.encoder.encode_queries(queries), k)

    def search_embeddings(self, embeddings: np.ndarray, k: int) -> list[list[Hit]]:
        """Top-``k`` passages for already-encoded queries ``[q, dim]``; with ``index.refine`` > 1,
        ``refine * k`` candidates re-ranked by their exact scores against the stored embeddings."""
        queries = np.ascontiguousarray(embeddings, dtype=np.float32)
        scores, ids = self.index.search(queries, k * self.cfg.index.refine)
        if self.cfg.index.refine > 1:
            scores, ids = rerank_exact(queries, ids, self._stored_embeddings(), k)
        return self.store.ranked_hits(ids.tolist(), scores.tolist(), keep=lambda i, _: i >= 0)

    def _stored_embeddings(self) -> np.ndarray:
        """The passage embeddings the index was built from, memory-mapped (read at candidates'
        rows only), for ``index.refine``.

        Raises:
            RetrievalError: none stored for this index (an adopted index brings none).
        """
        if self._embeddings is None:
            path = self._embeddings_path()
            if not path.is_file():
                raise RetrievalError(
                    f"[retriever.index.refine] got {self.cfg.index.refine} but {path} holds no "
                    "stored embeddings of this corpus and encoder; expected the embeddings the "
                    "index was built from (an adopted index brings none). Fix: set "
                    "retriever.index.refine=1, or build the index with seekrl-index."
                )
            self._embeddings = np.load(path, mmap_mode="r")
        return self._embeddings

    def describe(self) -> dict[str, Any]:
        """Where the index is and what it holds (for the index command)."""
        return {
            "backend": "faiss",
            "directory": str(self.directory),
            "passages": len(self.store),
            "dim": self.encoder.dim,
            "index": self.cfg.index.build_params(),
            "built_now": self.build_seconds is not None,
            "build_seconds": self.build_seconds,
            # the build's plan, estimated and measured peak memory (or, adopted, what was checked)
            "build": self.build_info,
            "adopted": self.adopted,
            "corpus": str(self.store.path),
            "encoder": asdict(self.cfg.encoder),
        }
