"""The FAISS build: training sample size and chunked reads (float16 memmaps included), auto pq_m,
OPQ, recall against flat, the memory estimate and refusal, the faiss-gpu branch (a fake faiss
namespace), memory-mapped loading per index type, and the build record in the manifest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pytest

import framework.retrieval.build_memory as build_memory
import framework.retrieval.faiss_build as faiss_build
from framework.retrieval.build_memory import FIXED_WORK, IndexShape, estimate_build_memory
from framework.retrieval.faiss_build import (
    DenseIndexConfig,
    auto_pq_m,
    build_faiss_index,
    plan_build,
    resolve_shape,
    set_search_params,
)
from framework.retrieval.types import RetrievalError
from tests.unit.retrieval.corpus_fixtures import DIM, FakeEncoder, faiss_cfg, write_jsonl
from tests.unit.retrieval.test_dense import INDEXES, QUERIES, open_faiss

WIKI18 = 21_015_324  # passages of wiki-18; auto_nlist gives int(4 * sqrt(n)) = 18,336 cells


# faiss's OpenMP threads spin while they wait (conftest.py's one_faiss_thread)
pytestmark = pytest.mark.usefixtures("one_faiss_thread")


class SpyIndex:
    """A faiss index that records the rows passed to ``train`` and ``add``."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.trained: list[tuple[int, Any]] = []
        self.added: list[int] = []

    def train(self, x: np.ndarray) -> None:
        self.trained.append((len(x), x.dtype))
        self.real.train(x)

    def add(self, x: np.ndarray) -> None:
        self.added.append(len(x))
        self.real.add(x)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class ChunkSpy:
    """An embeddings array that records every read and refuses to be converted whole."""

    def __init__(self, array: Any) -> None:
        self.array, self.shape, self.dtype = array, array.shape, array.dtype
        self.reads: list[Any] = []

    def __getitem__(self, key: Any) -> np.ndarray:
        self.reads.append(key)
        return self.array[key]

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise AssertionError("the whole embeddings array was materialised")


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> list[SpyIndex]:
    """Every index the build creates, wrapped in a :class:`SpyIndex`."""
    made: list[SpyIndex] = []
    real = faiss_build.new_index

    def wrapped(dim: int, shape: IndexShape) -> SpyIndex:
        made.append(SpyIndex(real(dim, shape)))
        return made[-1]

    monkeypatch.setattr(faiss_build, "new_index", wrapped)
    return made


def clustered(n: int, dim: int = 64, *, strong: int = 16, seed: int = 0) -> np.ndarray:
    """``n`` unit vectors around 20 centres, the signal in the first ``strong`` dimensions (the
    rest is 10x weaker): plain PQ spends most sub-quantizers on the weak ones, OPQ rotates."""
    rng = np.random.default_rng(seed)
    scale = np.full(dim, 0.1, np.float32)
    scale[:strong] = 1.0
    centres = rng.standard_normal((20, dim)).astype(np.float32) * scale
    x = centres[rng.integers(0, 20, n)] + 0.5 * scale * rng.standard_normal((n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def recall_at_10(index: Any, x: np.ndarray, queries: np.ndarray) -> float:
    flat = faiss.IndexFlatIP(x.shape[1])
    flat.add(x)
    _, truth = flat.search(queries, 10)
    _, got = index.search(queries, 10)
    return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, truth, strict=True)]))


# --------------------------------------------------------------------------- training sample


def test_train_size_is_the_number_of_rows_trained_on(spy) -> None:
    x = clustered(2000)
    build_faiss_index(x, DenseIndexConfig(type="ivf", nlist=4, train_size=500, add_chunk=300))
    assert spy[0].trained == [(500, np.float32)]
    assert spy[0].added == [300] * 6 + [200]  # 2000 rows, 300 at a time
    # auto: 256 rows per cell = 1024 of the 2000 (memory is plentiful here)
    build_faiss_index(x, DenseIndexConfig(type="ivf", nlist=4))
    assert spy[1].trained == [(1024, np.float32)]
    # auto for ivfpq: also 256 per PQ centroid, 256 * 2^4 = 4096 > 2000: all rows
    build_faiss_index(x, DenseIndexConfig(type="ivfpq", nlist=4, pq_bits=4))
    assert spy[2].trained == [(2000, np.float32)]


def test_auto_train_size_shrinks_to_half_the_memory_budget(spy, monkeypatch) -> None:
    # ivf, n=2000, dim=32, nlist=4, add_chunk=100, t training rows: the training phase holds
    #   row choice 2000*8 = 16000, sample 128t, one read chunk 100*32*4 = 12800,
    #   k-means 12t, centroids 4*32*4 = 512, fixed 64 MiB
    # = 67_138_176 + 140t. Half of the budget B must hold it: B = 2 * (67_138_176 + 140 * 500)
    # gives t = 500 exactly (between 39 * 4 = 156 and 256 * 4 = 1024 rows).
    budget = 2 * (16000 + 12800 + 512 + FIXED_WORK + 140 * 500)
    monkeypatch.setattr(build_memory, "available_memory_bytes", lambda: budget)
    x = clustered(2000, 32)
    build_faiss_index(x, DenseIndexConfig(type="ivf", nlist=4, add_chunk=100))
    assert spy[0].trained == [(500, np.float32)]
    monkeypatch.setattr(build_memory, "available_memory_bytes", lambda: budget - 2)
    assert (
        resolve_shape(
            2000, 32, DenseIndexConfig(type="ivf", nlist=4, add_chunk=100), budget - 2
        ).train_rows
        == 499
    )


def test_float16_memmap_is_read_in_sorted_chunks_never_whole(tmp_path: Path, spy) -> None:
    x = clustered(2000)
    path = tmp_path / "emb.npy"
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=x.shape)
    out[:] = x
    out.flush()
    del out
    emb = ChunkSpy(np.load(path, mmap_mode="r"))
    cfg = DenseIndexConfig(type="ivf", nlist=4, nprobe=4, train_size=700, add_chunk=256)
    index = build_faiss_index(emb, cfg)
    samples = [k for k in emb.reads if isinstance(k, np.ndarray)]
    slices = [k for k in emb.reads if isinstance(k, slice)]
    assert len(emb.reads) == len(samples) + len(slices)  # nothing else was read
    assert [len(k) for k in samples] == [256, 256, 188]  # 700 sampled rows, 256 at a time
    rows = np.concatenate(samples)
    assert np.all(np.diff(rows) > 0) and rows[-1] < 2000  # sorted, distinct
    assert [(k.start, k.stop) for k in slices] == [(s, s + 256) for s in range(0, 2000, 256)]
    assert spy[0].trained == [(700, np.float32)]
    # the same index as from the float32 copy of the same float16 values
    same = build_faiss_index(np.load(path).astype(np.float32), cfg)
    set_search_params(index, cfg)
    set_search_params(same, cfg)
    assert np.array_equal(index.search(x[:20], 5)[1], same.search(x[:20], 5)[1])


# --------------------------------------------------------------------------- pq_m, OPQ, recall


def test_auto_pq_m_is_the_divisor_nearest_dim_over_8() -> None:
    assert auto_pq_m(768) == 96  # e5-base: 8 dims and 1 byte (8 bits) per sub-quantizer
    assert auto_pq_m(384) == 48  # MiniLM
    assert auto_pq_m(64) == 8
    assert auto_pq_m(100) == 10  # 12.5 wanted; divisors 10 and 20: 10 is nearer
    assert auto_pq_m(4) == 1  # 0.5 wanted; 1 is the nearest divisor (tie with none)


def test_explicit_pq_m_must_divide_dim() -> None:
    with pytest.raises(RetrievalError, match=r"pq_m\] got 7; expected a divisor of .* 64"):
        resolve_shape(2000, 64, DenseIndexConfig(type="ivfpq", pq_m=7), 10**12)
    assert resolve_shape(2000, 64, DenseIndexConfig(type="ivfpq", pq_m=16), 10**12).pq_m == 16


def test_ivfpq_auto_pq_m_and_opq_recall_against_flat() -> None:
    data = clustered(2100)
    x, queries = data[:2000], data[2000:]
    # a query's true top 10 lie in its cluster of ~100 vectors (2000 / 20): finding the right
    # cell alone, then picking at random, would give 10 / 100 = 0.1 recall
    recall = {}
    for name, extra in {"auto": {}, "m4": {"pq_m": 4}, "opq": {"opq": True}}.items():
        cfg = DenseIndexConfig(type="ivfpq", nlist=16, nprobe=16, **extra)
        index = build_faiss_index(x, cfg)
        set_search_params(index, cfg)
        recall[name] = recall_at_10(index, x, queries)
        if name == "auto":
            assert faiss.downcast_index(index).pq.M == 8  # 64 / 8
        if name == "opq":
            assert isinstance(faiss.downcast_index(index), faiss.IndexPreTransform)
            assert isinstance(faiss.downcast_VectorTransform(index.chain.at(0)), faiss.OPQMatrix)
    # measured 0.39 / 0.25 / 0.74: the bounds keep a margin while failing a broken build
    assert recall["auto"] >= 0.3  # 3x the right-cell-alone baseline
    assert recall["auto"] > recall["m4"]  # 8 dims per sub-quantizer beat 16
    assert recall["opq"] >= recall["auto"] + 0.2  # the rotation spreads the strong dimensions


def test_opq_needs_as_many_rows_as_dimensions() -> None:
    # faiss's OPQ training crashes the process below that; refused instead
    with pytest.raises(RetrievalError, match=r"opq\] got true for 50 passages of dim 64"):
        resolve_shape(50, 64, DenseIndexConfig(type="ivfpq", nlist=1, pq_bits=2, opq=True), 10**12)
    with pytest.raises(RetrievalError, match=r"train_size\] got 60; expected at least 64"):
        resolve_shape(
            100,
            64,
            DenseIndexConfig(type="ivfpq", nlist=2, opq=True, pq_bits=2, train_size=60),
            10**12,
        )
    assert DenseIndexConfig(type="ivf", opq=True).problems()[0].path == "opq"


def test_opq_index_is_saved_loaded_and_searched_by_the_retriever(tmp_path: Path) -> None:
    words = ["amber", "basalt", "cobalt", "dune", "ember", "fjord", "glacier", "harbor", "indigo"]
    docs = [
        (
            f"p{i}",
            f"Item {i}",
            f"{words[i % 9]} {words[i % 7]} {words[(i // 9) % 9]} {words[i % 4]}",
        )
        for i in range(300)
    ]
    corpus = write_jsonl(tmp_path / "c.jsonl", docs)
    cfg = faiss_cfg(
        corpus, tmp_path / "cache", type="ivfpq", nlist=4, nprobe=4, pq_bits=4, opq=True
    )
    built, _ = open_faiss(cfg)
    with built:
        expected = built.search(QUERIES, 5)
    loaded, fake = open_faiss(cfg)
    with loaded:
        assert loaded.build_seconds is None and fake.passage_calls == 0
        assert isinstance(faiss.downcast_index(loaded.index), faiss.IndexPreTransform)
        assert faiss.extract_index_ivf(loaded.index).nprobe == 4
        assert loaded.search(QUERIES, 5) == expected
        assert all(len(hits) == 5 for hits in expected)


# --------------------------------------------------------------------------- memory estimate


def test_estimate_by_hand_ivfpq() -> None:
    shape = IndexShape("ivfpq", nlist=4, pq_m=4, pq_bits=4, add_chunk=100, train_rows=200)
    mem = estimate_build_memory(1000, 16, shape)
    assert mem.sample_choice == 1000 * 8  # the drawn row numbers
    assert mem.train_copy == 200 * 16 * 4  # 12,800: the float32 sample
    # one read chunk 100*16*4 = 6400 + k-means 200*12 = 2400 + residuals of the 200 rows (fewer
    # than 256 * 2^4 = 4096, so no subsample copy) 200*16*4 = 12,800
    assert mem.train_work == 6400 + 2400 + 12800
    assert mem.quantizer == 4 * 16 * 4 + 16 * 16 * 4  # centroids 256 + codebook 1024
    assert mem.index == int(1000 * (2 + 8) * 1.3)  # codes 4 * 4 bits = 2 bytes + id, x regrowth
    # chunk as read + float32 copy 100*16*8 = 12,800, assignments 100*12, residuals 100*16*4
    assert mem.add_work == 12800 + 1200 + 6400
    assert mem.train_peak == 8000 + 12800 + 21600 + 1280 + FIXED_WORK
    assert mem.add_peak == 13000 + 20400 + FIXED_WORK
    assert mem.peak == mem.train_peak
    opq = estimate_build_memory(1000, 16, IndexShape(**{**shape.__dict__, "opq": True}))
    # + the rotated sample 12,800 + 4 copies of the rows OPQ trains on 4*12,800; + d*d*4 matrix;
    # adding rotates each block too (+100*16*4)
    assert opq.train_work == mem.train_work + 12800 + 4 * 12800
    assert opq.quantizer == mem.quantizer + 16 * 16 * 4
    assert opq.add_work == mem.add_work + 6400


def test_estimate_by_hand_flat_and_hnsw() -> None:
    flat = estimate_build_memory(1000, 16, IndexShape("flat", add_chunk=100))
    assert (flat.train_peak, flat.index, flat.add_work) == (FIXED_WORK, int(64_000 * 1.3), 12800)
    hnsw = estimate_build_memory(1000, 16, IndexShape("hnsw", hnsw_m=4, add_chunk=100))
    # per node: vector 64 + (2*4 level-0 links + 4 more slots) * 4 bytes = 112
    assert hnsw.index == int(112_000 * 1.3)
    # the chunk is never more rows than there are
    assert estimate_build_memory(10, 16, IndexShape("flat", add_chunk=100)).add_work == 10 * 16 * 8


def test_build_refused_before_starting_when_memory_is_short(monkeypatch) -> None:
    monkeypatch.setattr(build_memory, "available_memory_bytes", lambda: 8_000_000_000)
    with pytest.raises(RetrievalError) as info:
        plan_build(WIKI18, 768, DenseIndexConfig(type="flat"))
    message = str(info.value)
    # 21,015,324 * 768 * 4 * 1.3 = 83.93 GB of index, + 65,536 * 768 * 8 chunk + 64 MiB
    assert message.startswith("[retriever.index.type] got an estimated peak of 84.40 GB")
    assert "expected at most 8.00 GB (MemAvailable / cgroup limit)" in message
    # ivfpq at auto pq_m 96: 21,015,324 * (96 + 8) = 2.19 GB
    assert "Fix: use retriever.index.type=ivfpq (about 2.19 GB of index)" in message

    with pytest.raises(RetrievalError) as info:
        plan_build(WIKI18, 768, DenseIndexConfig(type="ivfpq", train_size=256 * 18336))
    # training phase at t rows: 3072t sample + 12t k-means + row choice 168,122,592 + read chunk
    # 201,326,592 + PQ residuals and subsample 2 * 65,536 * 3072 + centroids 18,336 * 3072 +
    # codebook 786,432 + 64 MiB = 896,325,856 + 3084t <= 8e9  ->  t = 2,303,396
    assert str(info.value).startswith("[retriever.index.train_size] got an estimated peak of")
    assert "Fix: set retriever.index.train_size=2303396;" in str(info.value)
    plan = plan_build(WIKI18, 768, DenseIndexConfig(type="ivfpq", train_size=2303396))
    assert plan.memory.peak <= 8_000_000_000 and plan.shape.pq_m == 96

    with pytest.raises(RetrievalError, match=r"^\[retriever.index.pq_m\].*Fix: set retriever"):
        plan_build(WIKI18, 768, DenseIndexConfig(type="ivfpq", pq_m=384, train_size=100_000))
    # memory_limit_gb overrides what the machine reports
    assert (
        plan_build(WIKI18, 768, DenseIndexConfig(type="flat", memory_limit_gb=100)).budget == 100e9
    )


def test_auto_train_size_at_wiki18_scale() -> None:
    cfg = DenseIndexConfig(type="ivfpq")
    # half of 24 GB: (12e9 - 896,325,856) / 3084 = 3,600,413 rows, inside [39, 256] per cell
    assert resolve_shape(WIKI18, 768, cfg, 24_000_000_000).train_rows == 3_600_413
    # a small budget cannot go below 39 rows per cell (the refusal then says so)
    assert resolve_shape(WIKI18, 768, cfg, 1_000_000_000).train_rows == 39 * 18336


def test_build_record_goes_to_manifest_describe_and_log(tmp_path: Path, caplog) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl")
    cfg = faiss_cfg(corpus, tmp_path / "cache", **INDEXES["ivf"])
    with caplog.at_level("INFO", logger="framework.retrieval.faiss_build"):
        built, _ = open_faiss(cfg)
    built.close()
    record = built.describe()["build"]
    # ivf over 10 x 64 with nlist 2: all 10 rows train (fewer than 39 per cell)
    shape = IndexShape("ivf", nlist=2, train_rows=10)
    assert record["estimated_peak_bytes"] == estimate_build_memory(10, DIM, shape).peak
    assert record["train_rows"] == 10 and record["nlist"] == 2
    assert record["peak_rss_bytes"] >= record["rss_before_build_bytes"] > 0
    manifest = json.loads((built.directory / "manifest.json").read_text())
    assert manifest["build"] == record
    assert "peak RSS" in caplog.text and "estimated build peak" in caplog.text
    loaded, _ = open_faiss(cfg)
    with loaded:
        assert loaded.describe()["build"] == record  # read back from the manifest


# --------------------------------------------------------------------------- faiss-gpu branch


def test_cuda_trains_and_adds_on_the_gpu_and_saves_the_cpu_copy(monkeypatch) -> None:
    calls: list[tuple] = []
    gpu_side: list[SpyIndex] = []

    class Options:
        useFloat16 = False

    def to_gpu(resources: object, device: int, index: Any, options: Options) -> SpyIndex:
        calls.append(("to_gpu", device, options.useFloat16, index.is_trained))
        gpu_side.append(SpyIndex(index))  # stands in for the GPU index
        return gpu_side[-1]

    def to_cpu(index: SpyIndex) -> Any:
        calls.append(("to_cpu",))
        return faiss.clone_index(index.real)

    for name, value in {
        "StandardGpuResources": object,
        "GpuClonerOptions": Options,
        "get_num_gpus": lambda: 2,
        "index_cpu_to_gpu": to_gpu,
        "index_gpu_to_cpu": to_cpu,
    }.items():
        monkeypatch.setattr(faiss, name, value, raising=False)
    x = clustered(2000)
    index = build_faiss_index(x, DenseIndexConfig(type="ivfpq", nlist=4, device="cuda:1"))
    assert calls == [("to_gpu", 1, True, False), ("to_cpu",)]  # untrained in, fp16 LUTs
    assert gpu_side[0].trained == [(2000, np.float32)] and sum(gpu_side[0].added) == 2000
    assert isinstance(faiss.downcast_index(index), faiss.IndexIVFPQ) and index.ntotal == 2000
    # flat has no GPU build here: built on the CPU without touching the GPU
    calls.clear()
    assert build_faiss_index(x, DenseIndexConfig(device="cuda")).ntotal == 2000
    assert calls == []


def test_cuda_without_faiss_gpu_is_refused_before_embedding(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delattr(faiss, "StandardGpuResources", raising=False)
    with pytest.raises(RetrievalError, match=r"^\[retriever.index.device\] got 'cuda'") as info:
        plan_build(100, 64, DenseIndexConfig(type="ivf", device="cuda"))
    assert "faiss without GPU support" in str(info.value)
    assert "Fix: install faiss-gpu" in str(info.value) and "device=cpu" in str(info.value)
    cfg = faiss_cfg(write_jsonl(tmp_path / "c.jsonl"), tmp_path / "cache", device="cuda")
    fake = FakeEncoder(cfg.encoder)
    with pytest.raises(RetrievalError, match="device"):
        open_faiss(cfg, fake)
    assert fake.passage_calls == 0
    assert DenseIndexConfig(device="gpu").problems()[0].path == "device"


# --------------------------------------------------------------------------- mapped loading


@pytest.mark.parametrize("kind", sorted(INDEXES))
def test_each_type_loads_memory_mapped(tmp_path: Path, monkeypatch, kind: str) -> None:
    cfg = faiss_cfg(write_jsonl(tmp_path / "c.jsonl"), tmp_path / "cache", **INDEXES[kind])
    built, _ = open_faiss(cfg)
    with built:
        expected = built.search(QUERIES, 4)
    flags: list[int] = []
    read = faiss.read_index
    monkeypatch.setattr(faiss, "read_index", lambda path, f=0: flags.append(f) or read(path, f))
    loaded, _ = open_faiss(cfg)
    with loaded:
        assert loaded.build_seconds is None
        assert loaded.search(QUERIES, 4) == expected
        if kind in ("ivf", "ivfpq"):
            assert flags == [faiss.IO_FLAG_MMAP]
            lists = faiss.extract_index_ivf(loaded.index).invlists
            assert isinstance(faiss.downcast_InvertedLists(lists), faiss.OnDiskInvertedLists)
        else:  # IO_FLAG_MMAP would read these whole; IO_FLAG_MMAP_IFC maps their vectors
            assert flags == [faiss.IO_FLAG_MMAP_IFC]
            index = faiss.downcast_index(loaded.index)
            storage = index if kind == "flat" else faiss.downcast_index(index.storage)
            assert storage.codes.is_owned is False


def test_peak_rss_is_the_process_own_not_its_parents() -> None:
    """ru_maxrss survives execve: a build started by a process that had touched 1 GB would report
    1 GB. VmHWM is the child's own high-water mark."""
    import subprocess
    import sys

    touched = np.ones(2**30 // 8)  # 1 GiB, every page written
    code = "from framework.retrieval.build_memory import peak_rss_bytes; print(peak_rss_bytes())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert touched.sum() == 2**27
    assert int(out.stdout) < 2**29, int(out.stdout)  # the child's own imports: ~0.1-0.3 GB
