"""Adopting a prebuilt FAISS index with its JSONL corpus (Search-R1's layout: row ``i`` of
``wiki-18.jsonl`` is vector ``i`` of ``e5_Flat.index``) instead of building one.

The index file is checked (type, metric, vector count against the passage store, dimension
against the configured encoder, and a sample of rows against their passages encoded now), then
linked, not copied, into the index directory beside a seekrl manifest, so that
``retriever.index.path=<dir>`` (or the cache, when no path is set) loads it like a built index.

The link is a symbolic link to the absolute path of the file: an index of wiki-18 is 60+ GB, a
hard link fails across file systems (the cache and the data are often on different disks), and a
reference inside the manifest would give loading a second code path; the manifest records the
source path and size, and a link whose target went away is reported as such.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from framework.retrieval.corpus import CorpusStore
from framework.retrieval.dense import FaissRetriever, FaissRetrieverConfig, faiss_index_dir
from framework.retrieval.encoder import SentenceEncoder, encoder_fingerprint
from framework.retrieval.faiss_build import set_search_params
from framework.retrieval.local import MANIFEST, open_store, write_manifest
from framework.retrieval.types import RetrievalError

log = logging.getLogger(__name__)

#: A row passes the search check when it comes back among this many hits for its own passage.
ADOPT_TOPK = 10
#: The build parameters an index file reveals (build-time beams and training sizes it does not).
STRUCTURAL = ("type", "hnsw_m", "nlist", "pq_m", "pq_bits", "opq")
#: Parameters whose configured 0 means "auto", which accepts whatever the index has.
AUTO = ("nlist", "pq_m")
SKIPPED_WARNING = (
    "WARNING: adopt_sample=0: the stored vectors were NOT checked against the configured "
    "encoder. Searches are meaningless if the index was built with another encoder, prefix or "
    "row order. Use this only for indexes of synthetic vectors (benchmarks)."
)


def index_params(index: Any) -> dict[str, Any]:
    """The seekrl build parameters of a loaded FAISS index (``type`` and its structure).

    Raises:
        RetrievalError: a metric other than inner product, or an index class seekrl does not
            build (IDMap, scalar quantizers, ...).
    """
    import faiss

    outer: Any = faiss.downcast_index(index)  # Any: the stub types only the base Index
    inner, opq = outer, False
    if isinstance(outer, faiss.IndexPreTransform):
        transforms: Any = outer.chain  # a std::vector proxy; the stub calls it a list
        chain = [faiss.downcast_VectorTransform(transforms.at(i)) for i in range(transforms.size())]
        inner = faiss.downcast_index(outer.index)
        opq = len(chain) == 1 and isinstance(chain[0], faiss.OPQMatrix)
        if not opq:
            inner = None  # another transform (PCA, normalisation): not one seekrl builds
    if index.metric_type != faiss.METRIC_INNER_PRODUCT:
        raise RetrievalError(
            f"[adopt] got an index with metric {index.metric_type} (L2 is 1); expected inner "
            "product (METRIC_INNER_PRODUCT, cosine over normalised vectors), which seekrl "
            "searches. Fix: adopt an inner-product index or let seekrl-index build one."
        )
    if isinstance(inner, faiss.IndexIVFPQ):
        pq = inner.pq
        return {
            "type": "ivfpq",
            "nlist": inner.nlist,
            "pq_m": pq.M,
            "pq_bits": pq.nbits,
            "opq": opq,
        }
    if isinstance(inner, faiss.IndexIVFFlat) and not opq:
        return {"type": "ivf", "nlist": inner.nlist}
    if isinstance(inner, faiss.IndexHNSWFlat) and not opq:
        graph: Any = inner.hnsw  # nb_neighbors(1) is M (level 0 has 2M); the stub lacks it
        return {"type": "hnsw", "hnsw_m": graph.nb_neighbors(1)}
    if isinstance(inner, faiss.IndexFlat) and not opq:
        return {"type": "flat"}
    raise RetrievalError(
        f"[adopt] got a {type(outer).__name__}; expected IndexFlatIP, IndexHNSWFlat, "
        "IndexIVFFlat or IndexIVFPQ (optionally behind one OPQMatrix). "
        "Fix: adopt one of those, or let seekrl-index build the index."
    )


def check_params(found: dict[str, Any], configured: dict[str, Any], source: Path) -> None:
    """Refuse an index whose structure differs from ``retriever.index`` (``0`` = auto accepts any).

    Raises:
        RetrievalError: naming the overrides that describe the index.
    """
    differ = [
        key
        for key in STRUCTURAL
        if key in found
        and configured.get(key) != found[key]
        and not (key in AUTO and configured.get(key) == 0)
    ]
    if differ:
        overrides = " ".join(f"retriever.index.{k}={str(v).lower()}" for k, v in found.items())
        raise RetrievalError(
            f"[adopt] {source} is {found}; expected the configured {configured}. "
            f"Fix: add {overrides} to this command and to every command that loads the index."
        )


def sample_rows(n: int, count: int) -> list[int]:
    """``count`` rows spread evenly over ``[0, n)``, first and last included."""
    return sorted({round(float(r)) for r in np.linspace(0, n - 1, min(count, n))})


def passage_texts(store: CorpusStore, rows: list[int]) -> list[str]:
    """The texts the index encodes for ``rows`` (as ``CorpusStore.iter_texts`` gives them)."""
    return [f"{title}\n{text}" for _, _, title, text in store.passages(rows)]


def stored_vectors(index: Any, kind: str, rows: list[int]) -> np.ndarray | None:
    """The vectors ``index`` holds for ``rows``, where it keeps them exactly (flat, HNSW, IVF);
    None for PQ codes, whose reconstruction is approximate."""
    import faiss

    if kind == "ivfpq":
        return None
    if kind == "ivf":
        faiss.extract_index_ivf(index).make_direct_map()
    return np.stack([index.reconstruct(int(r)) for r in rows])


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of ``a [k, d]`` and ``b [k, d]`` (0 where a row is all zeros)."""
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    dots = np.einsum("ij,ij->i", a, b)
    return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)


def check_vectors(
    index: Any,
    kind: str,
    rows: list[int],
    encoded: np.ndarray,
    min_cosine: float,
    titles: list[str],
) -> dict[str, Any]:
    """Compare the index's rows with their passages ``encoded`` now.

    Exact stores: the cosine of each stored vector with its passage must be >= ``min_cosine``.
    PQ: each row must come back in the top :data:`ADOPT_TOPK` for its own passage.

    Returns:
        What was checked, for the manifest.

    Raises:
        RetrievalError: listing every failing row.
    """
    stored = stored_vectors(index, kind, rows)
    if stored is not None:
        cos = cosines(stored.astype(np.float32), encoded)
        bad = [(r, f"cosine {c:.3f}", t) for r, c, t in zip(rows, cos, titles) if c < min_cosine]
        record = {
            "method": "cosine",
            "min_cosine": min_cosine,
            "cosines": np.round(cos, 4).tolist(),
        }
    else:
        _, ids = index.search(np.ascontiguousarray(encoded, dtype=np.float32), ADOPT_TOPK)
        found = [r in hits for r, hits in zip(rows, ids.tolist())]
        bad = [
            (r, f"not in its top {ADOPT_TOPK}", t)
            for r, ok, t in zip(rows, found, titles)
            if not ok
        ]
        record = {"method": f"row in its own top {ADOPT_TOPK}", "found": found}
    if bad:
        lines = "\n  ".join(f"row {r} ({title[:40]!r}): {what}" for r, what, title in bad)
        raise RetrievalError(
            f"[adopt] {len(bad)} of {len(rows)} sampled rows do not match their passages encoded "
            f"by the configured encoder (expected cosine >= {min_cosine} with the stored vector, "
            f"or the row in its own top {ADOPT_TOPK}):\n  {lines}\nFix: set retriever.encoder.path "
            "and its prefixes to what built the index (Search-R1's e5_Flat.index: e5-base-v2 with "
            "retriever.encoder.family=e5), and check that row i of "
            "retriever.corpus.path is vector i (same file, no chunking or limit); adopt_sample=0 "
            "skips this check."
        )
    return {"rows": rows, **record}


def adopt_index(
    cfg: FaissRetrieverConfig,
    source: Path,
    *,
    sample: int = 16,
    min_cosine: float = 0.8,
    encoder: SentenceEncoder | None = None,
) -> dict[str, Any]:
    """Check the FAISS index file ``source`` against ``cfg``'s corpus and encoder, link it into
    ``cfg``'s index directory and write the manifest that lets :class:`FaissRetriever` load it.

    Args:
        cfg: the retriever configuration the index must serve (corpus, encoder, index type).
        source: the index file (``faiss.write_index`` output).
        sample: rows checked against the encoder; 0 skips the check with a warning.
        min_cosine: least cosine between a stored vector and its passage encoded now.
        encoder: the configured encoder, already loaded (loaded here when None).

    Returns:
        The manifest's ``adopted`` entry, with ``directory`` added.

    Raises:
        RetrievalError: an unreadable file, another count, dimension, metric or structure, sampled
            vectors that do not match, or a directory that holds another index.
    """
    import faiss

    source = source.expanduser().resolve()
    store = open_store(cfg)
    try:
        encoder = encoder or SentenceEncoder(cfg.encoder)
        index = read_source(source)
        found = index_params(index)
        check_params(found, cfg.index.build_params(), source)
        check_shape(index, len(store), encoder.dim, source, store.path)
        set_search_params(index, cfg.index)
        rows = sample_rows(len(store), sample) if sample else []
        if rows:
            titles = [title for _, _, title, _ in store.passages(rows)]
            encoded = encoder.encode_passages(passage_texts(store, rows))
            check = check_vectors(index, found["type"], rows, encoded, min_cosine, titles)
        else:
            log.warning(SKIPPED_WARNING)
            check = {"rows": [], "skipped": True}
        fingerprint = encoder_fingerprint(cfg.encoder)
        directory = faiss_index_dir(cfg, store.fingerprint, fingerprint)
        adopted = {
            "source": str(source),
            "source_bytes": source.stat().st_size,
            "linked_as": "symlink",
            "found": found,
            "check": check,
        }
        link_index(source, directory)
        write_manifest(
            directory,
            {
                "corpus": {"fingerprint": store.fingerprint, "passages": len(store)},
                "encoder": fingerprint,
                "dim": encoder.dim,
                "metric": "inner_product",
                "index": cfg.index.build_params(),
                "adopted": adopted,
                "faiss_version": faiss.__version__,
            },
        )
    finally:
        store.close()
    return {**adopted, "directory": str(directory)}


def read_source(source: Path) -> Any:
    """``source`` read memory-mapped where faiss can (its type is not known yet)."""
    import faiss

    if not source.is_file():
        raise RetrievalError(
            f"[adopt] got {str(source)!r}; expected an existing FAISS index file. "
            "Fix: point adopt= at the index (e.g. e5_Flat.index)."
        )
    try:
        return faiss.read_index(str(source), getattr(faiss, "IO_FLAG_MMAP_IFC", faiss.IO_FLAG_MMAP))
    except RuntimeError as exc:
        raise RetrievalError(
            f"[adopt] {source} is not a readable FAISS index ({str(exc).splitlines()[0]}). "
            "Fix: point adopt= at a file written by faiss.write_index."
        ) from exc


def check_shape(index: Any, passages: int, dim: int, source: Path, store: Path) -> None:
    """Refuse an index whose vector count or dimension differs from the corpus or encoder."""
    if index.ntotal != passages:
        raise RetrievalError(
            f"[adopt] {source} holds {index.ntotal:,} vectors; expected {passages:,}, one per "
            f"passage of the corpus (store {store}). Fix: adopt the index built from this JSONL "
            "file, with retriever.corpus.chunk_words=0 and limit=0 (row i = vector i)."
        )
    if index.d != dim:
        raise RetrievalError(
            f"[adopt] {source} holds vectors of dim {index.d}; expected {dim}, the configured "
            "encoder's. Fix: set retriever.encoder.path to the model that built the index "
            "(e5-base-v2, 768 dims, for Search-R1's e5_Flat.index)."
        )


def link_index(source: Path, directory: Path) -> None:
    """Make ``directory/index.faiss`` a symbolic link to ``source`` (atomically).

    Raises:
        RetrievalError: ``directory`` already holds an index other than a link to ``source``.
    """
    target = directory / "index.faiss"
    ours = target.is_symlink() and Path(os.readlink(target)) == source
    if (target.exists() or target.is_symlink() or (directory / MANIFEST).exists()) and not ours:
        raise RetrievalError(
            f"[adopt] {directory} already holds an index; expected an empty or new directory. "
            "Fix: delete it, or set retriever.index.path to another directory."
        )
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / "index.faiss.link-tmp"
    tmp.unlink(missing_ok=True)
    os.symlink(source, tmp)
    os.replace(tmp, target)


def adopt_and_load(
    cfg: FaissRetrieverConfig, source: str, sample: int, min_cosine: float
) -> FaissRetriever:
    """``seekrl-index adopt=<source>``: check and link the prebuilt index, then load it as a built
    one would be (one encoder load for the check and the searches)."""
    encoder = SentenceEncoder(cfg.encoder)
    adopted = adopt_index(cfg, Path(source), sample=sample, min_cosine=min_cosine, encoder=encoder)
    print(f"adopted {adopted['source']} into {adopted['directory']} (linked, not copied)")
    return FaissRetriever(cfg=cfg, encoder=encoder)
