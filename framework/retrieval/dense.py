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
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from framework.config import Problem, check_choice, check_range, option
from framework.paths import cache_root
from framework.registry.kinds import RETRIEVERS
from framework.retrieval.embeddings import compute_embeddings, embeddings_path
from framework.retrieval.encoder import (
    EncoderConfig,
    SentenceEncoder,
    encoder_fingerprint,
    fingerprint_key,
)
from framework.retrieval.local import IndexBacked, LocalRetrieverConfig, Stopwatch, open_store
from framework.retrieval.types import RetrievalError, check_request
from framework.types import Hit

INDEX_TYPES = ("flat", "hnsw", "ivf", "ivfpq")
_BUILD_PARAMS = {
    "flat": (),
    "hnsw": ("hnsw_m", "ef_construction"),
    "ivf": ("nlist",),
    "ivfpq": ("nlist", "pq_m", "pq_bits"),
}


@dataclass
class DenseIndexConfig:
    """FAISS index type and parameters (inner product over normalised embeddings = cosine)."""

    type: str = option("flat", f"one of {INDEX_TYPES}")
    hnsw_m: int = option(32, "HNSW neighbours per node")
    ef_construction: int = option(200, "HNSW build beam")
    ef_search: int = option(64, "HNSW search beam (search time)")
    nlist: int = option(0, "IVF cells; 0 = min(4 sqrt(n), n / 39)")
    nprobe: int = option(16, "IVF cells visited (search time)")
    pq_m: int = option(16, "IVF-PQ sub-quantizers (must divide dim)")
    pq_bits: int = option(8, "IVF-PQ bits per sub-quantizer code")
    path: str | None = option(None, "use this index directory instead of the cache")

    def problems(self) -> list[Problem]:
        out = check_choice(self.type, "type", INDEX_TYPES)
        for name in ("hnsw_m", "ef_construction", "ef_search", "nprobe", "pq_m"):
            out += check_range(getattr(self, name), name, low=1)
        out += check_range(self.nlist, "nlist", low=0)
        out += check_range(self.pq_bits, "pq_bits", low=1, high=16)
        return out

    def build_params(self) -> dict[str, Any]:
        """The parameters that change the built index (search-time ones excluded)."""
        return {"type": self.type, **{k: getattr(self, k) for k in _BUILD_PARAMS[self.type]}}


@dataclass
class FaissRetrieverConfig(LocalRetrieverConfig):
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    index: DenseIndexConfig = field(default_factory=DenseIndexConfig)


def auto_nlist(n: int) -> int:
    """IVF cells for ``n`` vectors: ``4 sqrt(n)``, keeping >= 39 training points per cell."""
    return max(1, min(int(4 * math.sqrt(n)), n // 39))


def build_faiss_index(embeddings: np.ndarray, cfg: DenseIndexConfig, seed: int = 0) -> Any:
    """A FAISS inner-product index of ``embeddings [n, dim]`` for ``cfg``.

    Raises:
        RetrievalError: parameters that cannot work for this corpus (PQ dimensions, too few points).
    """
    import faiss

    n, dim = embeddings.shape
    metric = faiss.METRIC_INNER_PRODUCT
    index: Any
    if cfg.type == "flat":
        index = faiss.IndexFlatIP(dim)
    elif cfg.type == "hnsw":
        index = faiss.IndexHNSWFlat(dim, cfg.hnsw_m, metric)
        index.hnsw.efConstruction = cfg.ef_construction
    else:
        nlist = cfg.nlist or auto_nlist(n)
        if nlist > n:
            raise RetrievalError(
                f"[retriever.index.nlist] got {nlist} for {n} passages; expected at most {n}. "
                "Fix: lower nlist or use index.type=flat."
            )
        quantizer = faiss.IndexFlatIP(dim)
        if cfg.type == "ivf":
            index = faiss.IndexIVFFlat(quantizer, dim, nlist, metric)
        else:
            if dim % cfg.pq_m:
                raise RetrievalError(
                    f"[retriever.index.pq_m] got {cfg.pq_m}; expected a divisor of the embedding "
                    f"dimension {dim}. Fix: choose e.g. {[m for m in (8, 12, 16, 24, 32, 48) if dim % m == 0]}."
                )
            if n < 2**cfg.pq_bits:
                raise RetrievalError(
                    f"[retriever.index.pq_bits] got {cfg.pq_bits} ({2**cfg.pq_bits} centroids) for "
                    f"{n} passages; expected at least as many passages as centroids. "
                    "Fix: lower pq_bits or use index.type=ivf."
                )
            index = faiss.IndexIVFPQ(quantizer, dim, nlist, cfg.pq_m, cfg.pq_bits, metric)
        rng = np.random.default_rng(seed)
        sample = min(n, max(nlist * 256, 2**cfg.pq_bits * 256 if cfg.type == "ivfpq" else 0))
        rows = np.sort(rng.choice(n, size=sample, replace=False))
        index.train(np.ascontiguousarray(embeddings[rows]))
    for start in range(0, n, 65536):
        index.add(np.ascontiguousarray(embeddings[start : start + 65536]))
    return index


def set_search_params(index: Any, cfg: DenseIndexConfig) -> None:
    """Apply the search-time parameters (HNSW beam, IVF probes)."""
    import faiss

    if cfg.type == "hnsw":
        hnsw: Any = faiss.downcast_index(index)  # IndexHNSWFlat, which the stub's Index is not
        hnsw.hnsw.efSearch = cfg.ef_search
    elif cfg.type in ("ivf", "ivfpq"):
        faiss.extract_index_ivf(index).nprobe = cfg.nprobe


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
            self.index = self._load_or_build()
            set_search_params(self.index, cfg.index)
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
        try:
            index = faiss.read_index(str(self.directory / "index.faiss"), faiss.IO_FLAG_MMAP)
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
        emb = compute_embeddings(
            self.store,
            self.encoder,
            self._embeddings_path(),
            progress=self.cfg.progress,
            fingerprint=self.manifest["encoder"],
        )
        index = build_faiss_index(emb, self.cfg.index)  # faiss converts float16 chunks itself
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / "index.faiss.tmp"
        faiss.write_index(index, str(tmp))
        os.replace(tmp, self.directory / "index.faiss")
        self.finish_build(clock, faiss_version=faiss.__version__)
        return index

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Top-``k`` passages per query (see :class:`~framework.registry.protocols.Retriever`)."""
        queries = check_request(queries, k, self.cfg.limits)
        return self.search_embeddings(self.encoder.encode_queries(queries), k)

    def search_embeddings(self, embeddings: np.ndarray, k: int) -> list[list[Hit]]:
        """Top-``k`` passages for already-encoded queries ``[q, dim]``."""
        scores, ids = self.index.search(np.ascontiguousarray(embeddings, dtype=np.float32), k)
        return self.store.ranked_hits(ids.tolist(), scores.tolist(), keep=lambda i, _: i >= 0)

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
            "corpus": str(self.store.path),
            "encoder": asdict(self.cfg.encoder),
        }
