"""Building FAISS indexes that fit the machine: flat, HNSW, IVF and IVF-PQ (optionally behind OPQ).

A build is planned before anything heavy starts (:func:`plan_build`): the ``0 = auto`` parameters
are resolved (IVF cells, PQ sub-quantizers, training rows), the peak memory is estimated
(:mod:`framework.retrieval.build_memory`) and a build that would not fit is refused with the
setting to change. IVF and IVF-PQ train on a sample of ``train_size`` rows read in row order and
converted to float32 chunk by chunk, so float16 or float32 embeddings (arrays or memmaps) are
never converted whole; vectors are added ``add_chunk`` rows at a time. With faiss-gpu and
``device=cuda`` the training and adding run on the GPU and the CPU copy is saved.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from framework.config import Problem, check, check_choice, check_range, option
from framework.retrieval.build_memory import (
    BuildMemory,
    IndexShape,
    drop_mapped_pages,
    estimate_build_memory,
    gb,
    index_bytes,
    memory_budget,
    peak_rss_bytes,
)
from framework.retrieval.types import RetrievalError

log = logging.getLogger(__name__)

INDEX_TYPES = ("flat", "hnsw", "ivf", "ivfpq")
IVF_TYPES = ("ivf", "ivfpq")
_BUILD_PARAMS = {
    "flat": (),
    "hnsw": ("hnsw_m", "ef_construction"),
    "ivf": ("nlist", "train_size"),
    "ivfpq": ("nlist", "pq_m", "pq_bits", "opq", "train_size"),
}
#: faiss warns below 39 training rows per k-means centroid and subsamples above 256.
MIN_ROWS_PER_CELL = 39
MAX_ROWS_PER_CELL = 256
#: An automatic training sample takes at most this share of the memory budget: centroid quality
#: gains little past a few dozen rows per cell while k-means time grows with every row.
TRAIN_SHARE = 0.5
#: PQ dimensions per sub-quantizer for ``pq_m=0`` (to be confirmed by the recall benchmark).
DIMS_PER_SUBQUANTIZER = 8


@dataclass
class DenseIndexConfig:
    """FAISS index type and parameters (inner product over normalised embeddings = cosine)."""

    type: str = option("flat", f"one of {INDEX_TYPES}")
    hnsw_m: int = option(32, "HNSW neighbours per node")
    ef_construction: int = option(200, "HNSW build beam")
    ef_search: int = option(64, "HNSW search beam (search time)")
    nlist: int = option(0, "IVF cells; 0 = min(4 sqrt(n), n / 39)")
    nprobe: int = option(16, "IVF cells visited (search time)")
    refine: int = option(
        1,
        "re-rank refine x k candidates exactly from the stored embeddings (search time; "
        "IVF-PQ's approximate top k alone misses many exact neighbours); 1 = off",
    )
    pq_m: int = option(0, "IVF-PQ sub-quantizers (a divisor of dim); 0 = dim / 8 (auto_pq_m)")
    pq_bits: int = option(8, "IVF-PQ bits per sub-quantizer code")
    opq: bool = option(False, "IVF-PQ behind a learned OPQ rotation (better recall, slower build)")
    train_size: int = option(
        0, "rows IVF / PQ / OPQ train on; 0 = 39 to 256 per cell, within half the memory budget"
    )
    add_chunk: int = option(65536, "rows converted to float32 and added at a time")
    device: str = option("cpu", "cpu, or cuda / cuda:N to train and add with faiss-gpu")
    memory_limit_gb: float = option(
        0.0, "refuse builds whose estimated peak exceeds this; 0 = MemAvailable / cgroup limit"
    )
    path: str | None = option(None, "use this index directory instead of the cache")

    def problems(self) -> list[Problem]:
        out = check_choice(self.type, "type", INDEX_TYPES)
        for name in ("hnsw_m", "ef_construction", "ef_search", "nprobe", "add_chunk", "refine"):
            out += check_range(getattr(self, name), name, low=1)
        for name in ("nlist", "pq_m", "train_size", "memory_limit_gb"):
            out += check_range(getattr(self, name), name, low=0)
        out += check_range(self.pq_bits, "pq_bits", low=1, high=16)
        out += check(
            not self.opq or self.type == "ivfpq",
            "opq",
            self.opq,
            "opq=true only with type=ivfpq (it rotates vectors for product quantization)",
            "set retriever.index.type=ivfpq, or opq=false",
        )
        device_ok = (
            self.device == "cpu"
            or self.device == "cuda"
            or (self.device.startswith("cuda:") and self.device[5:].isdigit())
        )
        out += check(device_ok, "device", self.device, "cpu, cuda or cuda:N", "set device=cpu")
        return out

    def build_params(self) -> dict[str, Any]:
        """The parameters that change the built index (search-time and machine ones excluded)."""
        return {"type": self.type, **{k: getattr(self, k) for k in _BUILD_PARAMS[self.type]}}


def auto_nlist(n: int) -> int:
    """IVF cells for ``n`` vectors: ``4 sqrt(n)``, keeping >= 39 training points per cell."""
    return max(1, min(int(4 * math.sqrt(n)), n // MIN_ROWS_PER_CELL))


def auto_pq_m(dim: int) -> int:
    """PQ sub-quantizers for ``pq_m=0``: the divisor of ``dim`` nearest ``dim / 8`` (8 dimensions,
    one byte each at 8 bits: 768 -> 96, 384 -> 48), the larger one on a tie."""
    target = dim / DIMS_PER_SUBQUANTIZER
    return min(divisors(dim), key=lambda m: (abs(m - target), -m))


def divisors(dim: int) -> list[int]:
    """The divisors of ``dim``, ascending."""
    return [m for m in range(1, dim + 1) if dim % m == 0]


@dataclass(frozen=True)
class BuildPlan:
    """A checked build: resolved parameters, estimated memory and the budget it fits in."""

    n: int
    dim: int
    shape: IndexShape
    memory: BuildMemory
    budget: int
    budget_source: str
    device: str

    def summary(self) -> dict[str, Any]:
        """What the manifest and ``describe()`` record of the plan."""
        shape = self.shape
        return {
            "device": self.device,
            "nlist": shape.nlist,
            "pq_m": shape.pq_m,
            "train_rows": shape.train_rows,
            "add_chunk": shape.add_chunk,
            "estimated_peak_bytes": self.memory.peak,
            "estimate": self.memory.as_dict(),
            "memory_budget_bytes": self.budget,
            "memory_budget_source": self.budget_source,
        }


def plan_build(n: int, dim: int, cfg: DenseIndexConfig) -> BuildPlan:
    """Resolve ``cfg`` for ``n`` vectors of ``dim``, estimate the peak memory and check it fits.

    Call it before computing embeddings: it needs only their count and dimension.

    Raises:
        RetrievalError: parameters that cannot work for this corpus (cells, PQ dimensions, too few
            rows), ``device=cuda`` without faiss-gpu, or an estimated peak over the budget.
    """
    problems = [str(p.under("retriever.index")) for p in cfg.problems()]
    if problems:
        raise RetrievalError("\n".join(problems))
    gpu_device(cfg.device)
    budget, source = memory_budget(cfg.memory_limit_gb)
    shape = resolve_shape(n, dim, cfg, budget)
    memory = estimate_build_memory(n, dim, shape)
    if memory.peak > budget:
        raise memory_refusal(n, dim, shape, memory, budget, source)
    return BuildPlan(n, dim, shape, memory, budget, source, cfg.device)


def resolve_shape(n: int, dim: int, cfg: DenseIndexConfig, budget: int) -> IndexShape:
    """``cfg`` with every ``0 = auto`` resolved for ``n`` vectors of ``dim`` and ``budget`` bytes.

    Raises:
        RetrievalError: more cells than vectors, a ``pq_m`` that does not divide ``dim``, fewer
            vectors or training rows than PQ centroids or IVF cells.
    """
    shape = IndexShape(
        cfg.type, hnsw_m=cfg.hnsw_m, ef_construction=cfg.ef_construction, add_chunk=cfg.add_chunk
    )
    if cfg.type not in IVF_TYPES:
        return shape
    nlist = cfg.nlist or auto_nlist(n)
    if nlist > n:
        raise RetrievalError(
            f"[retriever.index.nlist] got {nlist} for {n} passages; expected at most {n}. "
            "Fix: lower nlist or use index.type=flat."
        )
    shape = replace(shape, nlist=nlist)
    if cfg.type == "ivfpq":
        if n < 2**cfg.pq_bits:
            raise RetrievalError(
                f"[retriever.index.pq_bits] got {cfg.pq_bits} ({2**cfg.pq_bits} centroids) for "
                f"{n} passages; expected at least as many passages as centroids. "
                "Fix: lower pq_bits or use index.type=ivf."
            )
        if cfg.opq and n < dim:
            raise RetrievalError(
                f"[retriever.index.opq] got true for {n} passages of dim {dim}; expected at least "
                f"{dim} passages (faiss fits the rotation on at least as many rows as dimensions, "
                "and crashes on fewer). Fix: set retriever.index.opq=false."
            )
        shape = replace(shape, pq_m=_pq_m(cfg.pq_m, dim), pq_bits=cfg.pq_bits, opq=cfg.opq)
    needed = min_train_rows(dim, shape)
    if cfg.train_size:
        if cfg.train_size < needed:
            raise RetrievalError(
                f"[retriever.index.train_size] got {cfg.train_size}; expected at least {needed} "
                "(a row per IVF cell and PQ centroid, and one per dimension for OPQ). "
                "Fix: raise train_size, or 0 for auto."
            )
        rows = min(cfg.train_size, n)
    else:
        rows = auto_train_rows(n, dim, shape, budget)
    return replace(shape, train_rows=rows)


def auto_train_rows(n: int, dim: int, shape: IndexShape, budget: int) -> int:
    """Training rows for ``train_size=0``: 256 per IVF cell (and per PQ centroid), or fewer down
    to 39 per cell when the training phase would take more than half of ``budget``."""
    cells = [shape.nlist] + ([2**shape.pq_bits] if shape.type == "ivfpq" else [])
    low = max(min(n, MIN_ROWS_PER_CELL * max(cells)), min_train_rows(dim, shape))
    high = min(n, MAX_ROWS_PER_CELL * max(cells))
    fitting = largest_train_rows(n, dim, shape, int(budget * TRAIN_SHARE), low, high)
    return fitting if fitting is not None else low


def min_train_rows(dim: int, shape: IndexShape) -> int:
    """The fewest training rows faiss accepts: one per IVF cell and per PQ centroid, and one per
    dimension for OPQ."""
    pq = [2**shape.pq_bits, dim if shape.opq else 0] if shape.type == "ivfpq" else []
    return max([shape.nlist, *pq])


def largest_train_rows(
    n: int, dim: int, shape: IndexShape, budget: int, low: int, high: int
) -> int | None:
    """The most training rows in ``[low, high]`` whose training phase fits ``budget`` bytes
    (None when even ``low`` does not): a bisection, the estimate growing with the rows."""

    def fits(rows: int) -> bool:
        sized = replace(shape, train_rows=rows)
        return estimate_build_memory(n, dim, sized).train_peak <= budget

    if low > high or not fits(low):
        return None
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low


def _pq_m(pq_m: int, dim: int) -> int:
    if pq_m == 0:
        return auto_pq_m(dim)
    if dim % pq_m:
        auto = auto_pq_m(dim)
        near = sorted(divisors(dim), key=lambda m: (abs(math.log(m / auto)), -m))[:4]
        raise RetrievalError(
            f"[retriever.index.pq_m] got {pq_m}; expected a divisor of the embedding dimension "
            f"{dim}. Fix: pq_m=0 (auto: {auto}) or a divisor such as {sorted(near)}."
        )
    return pq_m


def memory_refusal(
    n: int, dim: int, shape: IndexShape, memory: BuildMemory, budget: int, source: str
) -> RetrievalError:
    """The error for a build whose estimated peak exceeds ``budget``, naming the setting that
    shrinks its largest part (and a value that fits, where one does)."""
    named = {
        "training sample": memory.train_copy,
        "faiss training buffers": memory.train_work + memory.sample_choice,
        "index": memory.index,
        "add chunk": memory.add_work,
    }
    parts = ", ".join(f"{name} {gb(size)}" for name, size in named.items() if size)
    field, fix = _memory_fix(n, dim, shape, memory, budget)
    return RetrievalError(
        f"[retriever.index.{field}] got an estimated peak of {gb(memory.peak)} for this "
        f"{shape.type} build over {n:,} vectors of dim {dim} ({parts}); expected at most "
        f"{gb(budget)} ({source}). Fix: {fix}; or set retriever.index.memory_limit_gb if this "
        "machine can give more."
    )


def _memory_fix(
    n: int, dim: int, shape: IndexShape, memory: BuildMemory, budget: int
) -> tuple[str, str]:
    """``(field, fix)``: the setting that shrinks the phase at the peak, with a value that fits."""

    def fits(smaller: IndexShape) -> bool:
        return estimate_build_memory(n, dim, smaller).peak <= budget

    if memory.train_peak >= memory.add_peak:
        rows = largest_train_rows(n, dim, shape, budget, min_train_rows(dim, shape), n)
        return "train_size", (
            f"set retriever.index.train_size={rows}" if rows else "lower retriever.index.nlist"
        )
    if memory.index < memory.add_work:
        chunk = min(shape.add_chunk, n) // 2
        while chunk > 1 and not fits(replace(shape, add_chunk=chunk)):
            chunk //= 2
        return "add_chunk", f"set retriever.index.add_chunk={chunk}"
    if shape.type == "ivfpq":
        smaller = [m for m in divisors(dim) if m < shape.pq_m and fits(replace(shape, pq_m=m))]
        fix = f"set retriever.index.pq_m={smaller[-1]}" if smaller else "lower retriever.index.pq_m"
        return "pq_m", f"{fix} (each sub-quantizer costs {gb(n)})"
    pq = IndexShape("ivfpq", shape.nlist, auto_pq_m(dim))
    return "type", f"use retriever.index.type=ivfpq (about {gb(index_bytes(n, dim, pq))} of index)"


def gpu_device(device: str) -> int | None:
    """The GPU number ``device`` names (None for cpu), checked against the installed faiss.

    Raises:
        RetrievalError: ``cuda`` configured but faiss has no GPU support or sees no such GPU.
    """
    if device == "cpu":
        return None
    import faiss

    number = int(device.split(":")[1]) if ":" in device else 0
    gpus = faiss.get_num_gpus() if hasattr(faiss, "StandardGpuResources") else 0
    if number >= gpus:
        has = "faiss-gpu" if hasattr(faiss, "StandardGpuResources") else "faiss without GPU support"
        raise RetrievalError(
            f"[retriever.index.device] got {device!r}; expected a GPU that faiss can use "
            f"({has}, {gpus} GPU(s) visible). Fix: install faiss-gpu (e.g. pip install "
            "faiss-gpu-cu12) on a machine with that GPU, or set retriever.index.device=cpu."
        )
    return number


def build_faiss_index(
    embeddings: Any, cfg: DenseIndexConfig, seed: int = 0, *, plan: BuildPlan | None = None
) -> Any:
    """A FAISS inner-product index of ``embeddings [n, dim]`` (float16 or float32, array or
    memmap) for ``cfg``.

    Args:
        embeddings: the vectors; only sliced, ``add_chunk`` rows at a time.
        cfg: index type and parameters.
        seed: seeds the training sample.
        plan: from :func:`plan_build` for this ``n`` and ``dim`` (made here when None).

    Raises:
        RetrievalError: see :func:`plan_build`.
    """
    import faiss

    n, dim = embeddings.shape
    plan = plan or plan_build(n, dim, cfg)
    shape = plan.shape
    index = new_index(dim, shape)
    gpu = gpu_device(cfg.device) if shape.type in IVF_TYPES else None
    if gpu is None and cfg.device != "cpu":
        log.info("faiss has no GPU build for %s indexes; building on the CPU", shape.type)
    resources = faiss.StandardGpuResources() if gpu is not None else None
    work = index if gpu is None else _to_gpu(faiss, resources, gpu, index, shape)
    if shape.type in IVF_TYPES:
        rows = np.sort(np.random.default_rng(seed).choice(n, size=shape.train_rows, replace=False))
        sample = training_sample(embeddings, rows, shape.add_chunk)
        work.train(sample)
        del sample, rows
    add_in_chunks(work, embeddings, shape.add_chunk)
    return work if gpu is None else faiss.index_gpu_to_cpu(work)


def new_index(dim: int, shape: IndexShape) -> Any:
    """An empty, untrained CPU index of ``shape`` (inner product)."""
    import faiss

    metric = faiss.METRIC_INNER_PRODUCT
    if shape.type == "flat":
        return faiss.IndexFlatIP(dim)
    if shape.type == "hnsw":
        index = faiss.IndexHNSWFlat(dim, shape.hnsw_m, metric)
        index.hnsw.efConstruction = shape.ef_construction
        return index
    quantizer = faiss.IndexFlatIP(dim)
    if shape.type == "ivf":
        return faiss.IndexIVFFlat(quantizer, dim, shape.nlist, metric)
    ivfpq = faiss.IndexIVFPQ(quantizer, dim, shape.nlist, shape.pq_m, shape.pq_bits, metric)
    if not shape.opq:
        return ivfpq
    opq: Any = faiss.OPQMatrix(dim, shape.pq_m)  # Any: the stub lacks referenced_objects
    # the rotation is fitted for the index's own quantizer (faiss would use 8 bits whatever
    # pq_bits is); the Python reference keeps that quantizer alive while the C++ side points to it
    pq = faiss.ProductQuantizer(dim, shape.pq_m, shape.pq_bits)
    opq.pq = pq
    opq.referenced_objects = [pq]
    return faiss.IndexPreTransform(opq, ivfpq)


def training_sample(embeddings: Any, rows: np.ndarray, chunk: int) -> np.ndarray:
    """The float32 rows ``rows`` (sorted) of ``embeddings``, read ``chunk`` rows at a time.

    Returns:
        ``[len(rows), dim]`` float32; the only full-size copy the training makes.
    """
    out = np.empty((len(rows), embeddings.shape[1]), dtype=np.float32)
    for start in range(0, len(rows), chunk):
        part = rows[start : start + chunk]
        out[start : start + len(part)] = embeddings[part]
        drop_mapped_pages(embeddings)
    return out


def add_in_chunks(index: Any, embeddings: Any, chunk: int) -> None:
    """Add every row of ``embeddings`` to ``index``, ``chunk`` rows converted at a time."""
    for start in range(0, embeddings.shape[0], chunk):
        index.add(np.ascontiguousarray(embeddings[start : start + chunk], dtype=np.float32))
        drop_mapped_pages(embeddings)


def _to_gpu(faiss: Any, resources: Any, gpu: int, index: Any, shape: IndexShape) -> Any:
    options = faiss.GpuClonerOptions()
    # float16 lookup tables let up to 96 sub-quantizers fit the GPU's shared memory; the codes
    # (and so the saved CPU index) are the same
    options.useFloat16 = shape.type == "ivfpq"
    try:
        return faiss.index_cpu_to_gpu(resources, gpu, index, options)
    except RuntimeError as exc:
        raise RetrievalError(
            f"[retriever.index.device] faiss-gpu cannot build this {shape.type} index on cuda:{gpu} "
            f"({str(exc).splitlines()[0]}). Fix: set retriever.index.device=cpu."
        ) from exc


def build_record(plan: BuildPlan, rss_before: int) -> dict[str, Any]:
    """:meth:`BuildPlan.summary` with the memory measured, logged: the process's peak RSS after
    the build (``ru_maxrss``, over the process's life, so it includes any embedding before) and
    its RSS just before the build started."""
    peak = peak_rss_bytes()
    record = {**plan.summary(), "peak_rss_bytes": peak, "rss_before_build_bytes": rss_before}
    log.info(
        "built a %s index of %d x %d: peak RSS %s (%s before the build); estimated build peak %s",
        plan.shape.type,
        plan.n,
        plan.dim,
        gb(peak),
        gb(rss_before),
        gb(plan.memory.peak),
    )
    return record


def set_search_params(index: Any, cfg: DenseIndexConfig) -> None:
    """Apply the search-time parameters (HNSW beam, IVF probes)."""
    import faiss

    if cfg.type == "hnsw":
        hnsw: Any = faiss.downcast_index(index)  # IndexHNSWFlat, which the stub's Index is not
        hnsw.hnsw.efSearch = cfg.ef_search
    elif cfg.type in IVF_TYPES:
        faiss.extract_index_ivf(index).nprobe = cfg.nprobe


def load_flags(index_type: str) -> int:
    """``faiss.read_index`` flags that map the index file instead of reading it into memory.

    IVF and IVF-PQ (with or without OPQ): ``IO_FLAG_MMAP`` maps the inverted lists. Flat and HNSW
    ignore that flag (measured on faiss 1.15.1: the whole file is read); ``IO_FLAG_MMAP_IFC`` maps
    their vectors instead, where the installed faiss has it (else they are read into memory).
    """
    import faiss

    if index_type in IVF_TYPES:
        return int(faiss.IO_FLAG_MMAP)
    return int(getattr(faiss, "IO_FLAG_MMAP_IFC", 0))
