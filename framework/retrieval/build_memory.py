"""How much memory a FAISS index build needs, how much the machine has, and how much it took.

The estimate is arithmetic over the build's shape (:class:`IndexShape`), with the constants below
measured on faiss 1.15.1 (2-core x86 CPU, 24 GiB): a build has a training phase (the float32
training sample, faiss's k-means and PQ buffers) and an add phase (the index as it grows, one chunk
of embeddings); they do not overlap, so the peak is the larger of the two. Memory-mapped embeddings
are read chunk by chunk and their pages released after each chunk (:func:`drop_mapped_pages`), so
the embeddings file itself is not part of the peak.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import resource
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

FLOAT = 4  # bytes per float32 value
ID = 8  # bytes per int64 id kept beside each IVF entry
#: The growing index's resident size over its final size while vectors are added in chunks
#: (std::vector regrowth): measured peaks 1.18x flat, 1.17x IVF-flat, 1.29x HNSW.
GROWTH = 1.3
#: faiss trains a PQ codebook on at most 256 rows per centroid (``max_points_per_centroid``).
PQ_ROWS_PER_CENTROID = 256
#: OPQ trains its rotation on at most this many rows, holding about 4 float32 copies of them.
OPQ_TRAIN_ROWS = 65536
OPQ_COPIES = 4
#: k-means keeps an int64 assignment and a float32 distance per training row.
KMEANS_BYTES_PER_ROW = 12
#: faiss adds IVF vectors in blocks of at most this many rows (coarse assignment, PQ residuals).
IVF_ADD_BLOCK = 65536
#: BLAS blocks, thread buffers and the like, whatever the size (measured 30 MB for IVF training).
FIXED_WORK = 64 << 20
GB = 1e9


@dataclass(frozen=True)
class IndexShape:
    """A build's resolved parameters (no ``0 = auto`` left): what the estimate depends on."""

    type: str  # flat | hnsw | ivf | ivfpq
    nlist: int = 0
    pq_m: int = 0
    pq_bits: int = 8
    opq: bool = False
    hnsw_m: int = 32
    ef_construction: int = 200
    train_rows: int = 0
    add_chunk: int = 65536


@dataclass(frozen=True)
class BuildMemory:
    """The estimated bytes of a build, by part; ``peak`` is what the machine must hold at once."""

    sample_choice: int  # the row numbers drawn for the training sample (int64 each)
    train_copy: int  # the float32 training sample
    train_work: int  # faiss's training buffers: k-means, PQ residuals, OPQ's copies
    quantizer: int  # IVF centroids, PQ codebook, OPQ matrix
    index: int  # the finished index, regrowth included
    add_work: int  # one chunk as read, its float32 copy, faiss's per-block buffers

    @property
    def train_peak(self) -> int:
        return self.sample_choice + self.train_copy + self.train_work + self.quantizer + FIXED_WORK

    @property
    def add_peak(self) -> int:
        return self.index + self.add_work + FIXED_WORK

    @property
    def peak(self) -> int:
        return max(self.train_peak, self.add_peak)

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "peak": self.peak}


def index_bytes(n: int, dim: int, shape: IndexShape) -> int:
    """The finished index of ``n`` vectors of ``dim`` floats, without regrowth slack.

    Flat ``n d 4``; HNSW ``n (d 4 + (2M + 4) 4)`` (vectors, 2M level-0 links, about one upper-level
    link slot, an offset and a level per node); IVF-flat ``n (d 4 + 8)``; IVF-PQ ``n (m bits/8 + 8)``
    (code and id). Centroids and codebooks are in :func:`quantizer_bytes`.
    """
    if shape.type == "flat":
        return n * dim * FLOAT
    if shape.type == "hnsw":
        return n * (dim * FLOAT + (2 * shape.hnsw_m + 4) * 4)
    if shape.type == "ivf":
        return n * (dim * FLOAT + ID)
    return n * (math.ceil(shape.pq_m * shape.pq_bits / 8) + ID)


def quantizer_bytes(dim: int, shape: IndexShape) -> int:
    """IVF centroids ``nlist d 4``, the PQ codebook ``d 2^bits 4`` and the OPQ matrix ``d d 4``."""
    out = shape.nlist * dim * FLOAT if shape.type in ("ivf", "ivfpq") else 0
    if shape.type == "ivfpq":
        out += dim * 2**shape.pq_bits * FLOAT + (dim * dim * FLOAT if shape.opq else 0)
    return out


def train_work_bytes(dim: int, shape: IndexShape) -> int:
    """The training phase's buffers besides the float32 sample, for ``shape.train_rows`` rows.

    One chunk of the sample as read (``add_chunk`` rows, <= 4 bytes a value); k-means: 12 bytes
    per row. IVF-PQ: the residuals of the rows the codebook trains on (at most ``256 * 2^bits``),
    plus faiss's subsample copy of them when the sample is larger. OPQ: the rotated copy of the
    whole sample, plus ``4`` copies of the (at most 65,536) rows its rotation trains on.
    """
    t = shape.train_rows
    out = min(shape.add_chunk, t) * dim * FLOAT + t * KMEANS_BYTES_PER_ROW
    if shape.type == "ivfpq":
        pq_rows = PQ_ROWS_PER_CENTROID * 2**shape.pq_bits
        out += min(t, pq_rows) * dim * FLOAT * (2 if t > pq_rows else 1)
        if shape.opq:
            out += t * dim * FLOAT + OPQ_COPIES * min(t, OPQ_TRAIN_ROWS) * dim * FLOAT
    return out


def estimate_build_memory(n: int, dim: int, shape: IndexShape) -> BuildMemory:
    """The bytes a build of ``shape`` over ``n`` vectors of ``dim`` floats holds, by part.

    Args:
        n: vectors added.
        dim: their dimension.
        shape: the resolved index parameters, training rows and add chunk.

    Returns:
        The parts; ``.peak`` is the larger of the training and the add phase.
    """
    trains = shape.type in ("ivf", "ivfpq") and shape.train_rows > 0
    chunk = min(shape.add_chunk, n)
    ivf_block = min(chunk, IVF_ADD_BLOCK)
    add_work = chunk * dim * 2 * FLOAT  # the chunk as read (<= 4 bytes a value) + float32 copy
    if shape.type in ("ivf", "ivfpq"):
        add_work += ivf_block * KMEANS_BYTES_PER_ROW
    if shape.type == "ivfpq":
        add_work += ivf_block * dim * FLOAT * (2 if shape.opq else 1)  # residuals, rotated chunk
    return BuildMemory(
        sample_choice=n * ID if trains else 0,
        train_copy=shape.train_rows * dim * FLOAT if trains else 0,
        train_work=train_work_bytes(dim, shape) if trains else 0,
        quantizer=quantizer_bytes(dim, shape),
        index=int(index_bytes(n, dim, shape) * GROWTH),
        add_work=add_work,
    )


def _meminfo_bytes(field: str, path: Path = Path("/proc/meminfo")) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_headroom(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Bytes the cgroup may still allocate (v2 ``memory.max - memory.current``, or v1's files)."""
    for limit, usage in (
        ("memory.max", "memory.current"),
        ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes"),
    ):
        try:
            cap = (root / limit).read_text().strip()
            used = int((root / usage).read_text().strip())
        except (OSError, ValueError):
            continue
        if cap.isdigit() and int(cap) < 1 << 60:  # v1 reports "no limit" as a huge number
            return max(int(cap) - used, 0)
    return None


def available_memory_bytes() -> int:
    """Bytes a new allocation can take now: ``MemAvailable``, lowered to the cgroup's headroom
    when the process runs under a memory limit (a container)."""
    found = [b for b in (_meminfo_bytes("MemAvailable"), _cgroup_headroom()) if b is not None]
    if found:
        return min(found)
    return os_physical_bytes()


def os_physical_bytes() -> int:
    """Physical memory (the fallback where ``/proc`` is missing)."""
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def memory_budget(limit_gb: float) -> tuple[int, str]:
    """The bytes a build may use and where that number comes from: ``limit_gb`` when set (> 0),
    else :func:`available_memory_bytes`."""
    if limit_gb > 0:
        return int(limit_gb * GB), "retriever.index.memory_limit_gb"
    return available_memory_bytes(), "MemAvailable / cgroup limit"


def peak_rss_bytes() -> int:
    """The process's peak resident set since it started: ``VmHWM``, the high-water mark of its own
    memory, where ``/proc`` has it, else ``ru_maxrss`` (KiB on Linux). ``ru_maxrss`` is kept
    across ``execve``: a build started by a process that had used 3 GB reported 3 GB whatever it
    used itself (measured in tools/bench/retrieval_scale.py), so it is only the fallback."""
    hwm = _meminfo_bytes("VmHWM", Path("/proc/self/status"))
    if hwm:
        return hwm
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def current_rss_bytes() -> int:
    """The process's resident set now (``VmRSS``); the peak when ``/proc`` is missing."""
    return _meminfo_bytes("VmRSS", Path("/proc/self/status")) or peak_rss_bytes()


def drop_mapped_pages(array: Any) -> None:
    """Release the resident pages of a read-only or shared ``np.memmap`` behind ``array`` (the
    data stays in the page cache and on disk), so that reading a large embeddings file chunk by
    chunk does not grow the process's RSS by the whole file. Anything else is left alone."""
    base = array
    while base is not None and not isinstance(base, np.memmap):
        base = getattr(base, "base", None)
    handle = getattr(base, "_mmap", None)
    # a copy-on-write map ("c") keeps private changes in its pages: dropping them would lose them
    if isinstance(handle, mmap.mmap) and getattr(base, "mode", "c") in ("r", "r+", "w+"):
        # no madvise on this platform: the pages just stay until the kernel reclaims them
        with contextlib.suppress(AttributeError, OSError, ValueError):
            handle.madvise(mmap.MADV_DONTNEED)


def gb(nbytes: float) -> str:
    """``nbytes`` in GB with two decimals, for messages."""
    return f"{nbytes / GB:.2f} GB"
