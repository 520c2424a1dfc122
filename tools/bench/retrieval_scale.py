"""Retrieval at scale: flat, HNSW, IVF and IVF-PQ over 1M and 4M passages, and a fit to 21M.

    python3 tools/bench/retrieval_scale.py                         # 1M and 4M, every stage
    python3 tools/bench/retrieval_scale.py --sizes 1000000 --types flat ivfpq
    python3 tools/bench/retrieval_scale.py --render                # the page from the JSON only

Two kinds of data (docs/benchmarks/retrieval_scale.md says which figure comes from which):

- **Index side: vectors with the shipped embeddings' statistics.** Encoding millions of passages
  with the packaged MiniLM would take days on 2 cores, so the vectors are drawn from a model of the
  real ones: the packaged encoder embeds the shipped Wikipedia summaries once, k-means splits them
  into clusters, and each generated vector is a cluster mean (drawn by cluster size) plus noise with
  the pooled within-cluster covariance (its principal axes and spreads), normalised to unit length
  as the encoder's are. Queries are drawn the same way. They are stored in float16, the index
  builds' default storage.
- **Corpus side: text.** A Search-R1 JSONL corpus of the same number of ~100-word passages cut from
  the shipped summaries (cycled), for the passage store's build and a launch's bookkeeping, and
  for ``seekrl-serve``: the IVF-PQ index is adopted with that corpus (``adopt_sample=0``: its
  vectors are not the encoder's) and served to 64 concurrent clients by
  ``tools/bench/retrieval_load.py``'s request mix (a quarter malformed).

Each index is built in a subprocess of its own, so its peak RSS is the build's; searches run in
another subprocess (the index memory-mapped where FAISS can). Recall@10 is against the exact top 10
(flat search over the float32 vectors). Every cell is written to the JSON as it finishes and skipped
on a rerun, so the benchmark resumes after an interruption (``--redo`` repeats cells). The growth of
each figure from the smaller to the larger size is fitted as a power law ``a * n^b`` and evaluated
at wiki-18's 21,015,324 passages.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

WIKI18 = 21_015_324
K = 10
N_QUERIES = 1000
CHUNK = 262_144
DEFAULT_TYPES = ("flat", "hnsw", "ivf", "ivfpq")
OUT = REPO / "docs" / "benchmarks" / "retrieval_scale.json"
MD = REPO / "docs" / "benchmarks" / "retrieval_scale.md"


# --- the vectors ----------------------------------------------------------------------------------


def shipped_embeddings(work: Path) -> np.ndarray:
    """The packaged encoder's float32 embeddings of the shipped summaries (cached in ``work``)."""
    path = work / "shipped_embeddings.npy"
    if path.is_file():
        return np.load(path)
    from framework.retrieval.corpus import CorpusConfig, CorpusStore, build_corpus
    from framework.retrieval.encoder import EncoderConfig, SentenceEncoder

    store_file = work / "shipped_corpus.sqlite"
    if not store_file.is_file():
        build_corpus(CorpusConfig(), store_file)
    store = CorpusStore(store_file)
    encoder = SentenceEncoder(EncoderConfig())
    parts = [encoder.encode_passages(texts) for texts in store.iter_texts(batch=1024)]
    emb = np.concatenate(parts).astype(np.float32)
    np.save(path, emb)
    return emb


def fit_statistics(emb: np.ndarray, clusters: int, seed: int) -> dict[str, np.ndarray]:
    """Cluster means and weights, and the pooled within-cluster covariance's factor ``[d, d]``
    (``noise = z @ factor.T`` has that covariance)."""
    import faiss

    km = faiss.Kmeans(emb.shape[1], clusters, niter=20, seed=seed, spherical=True, verbose=False)
    km.train(np.ascontiguousarray(emb))
    _, assign = km.index.search(emb, 1)
    assign = assign[:, 0]
    means = km.centroids.astype(np.float64)
    # the cluster's own mean (not the normalised centroid), so residuals have zero mean per cluster
    for c in range(clusters):
        members = emb[assign == c]
        if len(members):
            means[c] = members.mean(0)
    residual = emb - means[assign]
    cov = residual.T @ residual / max(len(emb) - clusters, 1)
    vals, vecs = np.linalg.eigh(cov)
    factor = vecs * np.sqrt(np.clip(vals, 0, None))
    weights = np.bincount(assign, minlength=clusters).astype(np.float64)
    return {"means": means, "weights": weights / weights.sum(), "factor": factor}


def draw(stats: dict[str, np.ndarray], n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` unit vectors ``[n, d]`` (float32) from the cluster model."""
    cluster = rng.choice(len(stats["weights"]), size=n, p=stats["weights"])
    d = stats["factor"].shape[0]
    x = stats["means"][cluster] + rng.standard_normal((n, d)) @ stats["factor"].T
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32)


def neighbour_profile(x: np.ndarray) -> dict[str, float]:
    """Mean cosine of each vector's 1st and 10th nearest other vector, and the covariance's
    participation ratio (an effective dimension): how clustered a set of unit vectors is."""
    import faiss

    s, _ = faiss.knn(x, x, 11, metric=faiss.METRIC_INNER_PRODUCT)
    eig = np.linalg.eigvalsh(np.cov(x.T))
    return {
        "nn1_cos": float(s[:, 1].mean()),
        "nn10_cos": float(s[:, 10].mean()),
        "effective_dim": float(eig.sum() ** 2 / (eig**2).sum()),
    }


def base_vectors(work: Path, n: int, stats: dict[str, np.ndarray], seed: int) -> Path:
    """The ``[n, d]`` float16 vectors (a ``.npy`` memmap), made once."""
    path = work / f"n{n}" / "base.f16.npy"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    d = stats["factor"].shape[0]
    out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float16, shape=(n, d))
    for start in range(0, n, CHUNK):
        rows = min(CHUNK, n - start)
        # one generator per chunk: the 1M vectors are the 4M set's first 1M
        rng = np.random.default_rng([seed, start // CHUNK])
        out[start : start + rows] = draw(stats, rows, rng)
    out.flush()
    del out
    os.replace(tmp, path)
    return path


def float32_chunks(emb: np.ndarray, chunk: int = CHUNK) -> Iterator[tuple[int, np.ndarray]]:
    for start in range(0, len(emb), chunk):
        yield start, np.ascontiguousarray(emb[start : start + chunk], dtype=np.float32)


def ground_truth(work: Path, n: int, base: Path, queries: np.ndarray) -> np.ndarray:
    """Exact top-``K`` ids ``[q, K]`` of the queries over the base vectors (flat, float32)."""
    path = work / f"n{n}" / "gt.npy"
    if path.is_file():
        return np.load(path)
    import faiss

    emb = np.load(base, mmap_mode="r")
    best_s = np.full((len(queries), K), -np.inf, dtype=np.float32)
    best_i = np.full((len(queries), K), -1, dtype=np.int64)
    for start, block in float32_chunks(emb):
        s, i = faiss.knn(queries, block, K, metric=faiss.METRIC_INNER_PRODUCT)
        s_all = np.concatenate([best_s, s], axis=1)
        i_all = np.concatenate([best_i, i + start], axis=1)
        top = np.argsort(-s_all, axis=1, kind="stable")[:, :K]
        best_s = np.take_along_axis(s_all, top, axis=1)
        best_i = np.take_along_axis(i_all, top, axis=1)
    np.save(path, best_i)
    return best_i


# --- one build, one search: run in subprocesses --------------------------------------------------


def peak_rss_gb() -> float:
    """This process's own peak (VmHWM: ru_maxrss would carry the parent's over execve)."""
    from framework.retrieval.build_memory import peak_rss_bytes

    return peak_rss_bytes() / 1e9


def build_child(base: Path, index_file: Path, params: dict[str, Any]) -> dict[str, Any]:
    """Build one index with the framework's builder and write it; returns its figures."""
    import faiss

    from framework.retrieval.faiss_build import DenseIndexConfig, build_faiss_index, plan_build

    emb = np.load(base, mmap_mode="r")
    cfg = DenseIndexConfig(**params)
    plan = plan_build(*emb.shape, cfg)  # refuses a build whose estimate exceeds the memory
    start = time.perf_counter()
    index = build_faiss_index(emb, cfg, plan=plan)
    seconds = time.perf_counter() - start
    tmp = index_file.with_suffix(".tmp")
    faiss.write_index(index, str(tmp))
    os.replace(tmp, index_file)
    return {
        "build_s": seconds,
        "peak_rss_gb": peak_rss_gb(),
        "disk_gb": index_file.stat().st_size / 1e9,
        "params": params,
        "plan": plan.summary(),
    }


class Searcher:
    """An index searched with one setting: its ``nprobe`` or ``efSearch``, and an exact re-ranking
    of ``refine`` x k candidates from the float16 base vectors (framework/retrieval/refine.py)."""

    def __init__(self, index: Any, kind: str, setting: dict[str, int], base: np.ndarray) -> None:
        from framework.retrieval.dense import DenseIndexConfig, set_search_params

        cfg = DenseIndexConfig(type=kind)
        if "ef_search" in setting:
            cfg.ef_search = setting["ef_search"]
        if "nprobe" in setting:
            cfg.nprobe = setting["nprobe"]
        set_search_params(index, cfg)
        self.index, self.base, self.refine = index, base, setting.get("refine", 1)

    def __call__(self, queries: np.ndarray) -> np.ndarray:
        from framework.retrieval.refine import rerank_exact

        _, ids = self.index.search(queries, K * self.refine)
        if self.refine > 1:
            _, ids = rerank_exact(queries, ids, self.base, K)
        return ids


def timed_search(search: Searcher, queries: np.ndarray, batch: int, limit_s: float) -> float:
    """Queries per second at ``batch`` queries per call (stops after ``limit_s`` seconds)."""
    done, start = 0, time.perf_counter()
    while done < len(queries):
        search(queries[done : done + batch])
        done += len(queries[done : done + batch])
        if time.perf_counter() - start > limit_s:
            break
    return done / (time.perf_counter() - start)


def search_child(
    index_file: Path,
    base: Path,
    queries: np.ndarray,
    gt: np.ndarray,
    kind: str,
    settings: list[dict[str, int]],
) -> list[dict[str, Any]]:
    """Recall@10 and queries/s at batch 1 and 64, per search setting."""
    import faiss

    from framework.retrieval.faiss_build import load_flags

    index = faiss.read_index(str(index_file), load_flags(kind))
    vectors = np.load(base, mmap_mode="r")
    rows = []
    for setting in settings or [{}]:
        search = Searcher(index, kind, setting, vectors)
        ids = search(queries)
        recall = float(np.mean([len(set(a) & set(b)) / K for a, b in zip(ids, gt, strict=True)]))
        rows.append(
            {
                "setting": setting,
                "recall_at_10": recall,
                "qps_batch1": timed_search(search, queries[:300], 1, 20.0),
                "qps_batch64": timed_search(search, queries, 64, 30.0),
            }
        )
    rows[0]["peak_rss_gb"] = peak_rss_gb()
    return rows


def child_main(argv: list[str]) -> None:
    """``_child build|search <json args>``: run one step and print its JSON on the last line."""
    what, payload = argv[0], json.loads(argv[1])
    if what == "corpus":
        out: Any = corpus_child(Path(payload["corpus"]), Path(payload["cache"]), payload["launch"])
    elif what == "build":
        out = build_child(Path(payload["base"]), Path(payload["index"]), payload["params"])
    else:
        q = np.load(payload["queries"])
        gt = np.load(payload["gt"])
        out = search_child(
            Path(payload["index"]),
            Path(payload["base"]),
            q,
            gt,
            payload["type"],
            payload["settings"],
        )
    print(json.dumps(out))


def run_child(what: str, payload: dict[str, Any], log: Path) -> Any:
    cmd = [sys.executable, __file__, "_child", what, json.dumps(payload)]
    start = time.perf_counter()
    with log.open("a") as err:
        proc = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=err, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"[bench] {what} {payload} failed (rc {proc.returncode}); see {log}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if isinstance(out, dict):
        out["wall_s"] = time.perf_counter() - start
    return out


# --- the plan of cells -----------------------------------------------------------------------------


def split_kind(kind: str) -> tuple[str, dict[str, int]]:
    """``ivfpq:pq_m=96`` -> ``("ivfpq", {"pq_m": 96})``: an index type and build settings of its
    own (a cell of its own in the results)."""
    base, _, rest = kind.partition(":")
    extra = dict(item.split("=", 1) for item in rest.split(",") if item)
    return base, {k: int(v) for k, v in extra.items()}


def index_params(kind: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    """The build settings of one index type at ``n`` passages (nlist and sample sizes explicit)."""
    kind, extra = split_kind(kind)
    return {**base_params(kind, n, args), **extra}


def base_params(kind: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    nlist = args.nlist or max(1, int(4 * math.sqrt(n)))
    if kind == "flat":
        return {"type": "flat"}
    if kind == "hnsw":
        return {"type": "hnsw", "hnsw_m": 32, "ef_construction": args.ef_construction}
    params: dict[str, Any] = {
        "type": kind,
        "nlist": nlist,
        "train_size": args.train_per_cell * nlist,
    }
    params.update(json.loads(args.extra_ivf or "{}"))
    if kind == "ivfpq":
        params.update(json.loads(args.extra_pq or "{}"))
    return params


def search_settings(kind: str) -> list[dict[str, int]]:
    if kind == "hnsw":
        return [{"ef_search": e} for e in (16, 32, 64, 128)]
    if kind == "ivf":
        return [{"nprobe": p} for p in (8, 16, 32, 64)]
    if kind == "ivfpq":
        return [{"nprobe": p, "refine": r} for r in (1, 4, 16) for p in (8, 16, 32, 64)]
    return [{}]


class Results:
    """The JSON of cells, rewritten after each one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
        self.data.setdefault("cells", {})

    def has(self, key: str) -> bool:
        return key in self.data["cells"]

    def put(self, key: str, value: Any) -> None:
        self.data["cells"][key] = value
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, self.path)


def machine() -> dict[str, Any]:
    import faiss

    from framework.training.precision import cpu_name

    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "memory_gib": round(mem, 1),
        "faiss": faiss.__version__,
        "omp_threads": faiss.omp_get_max_threads(),
    }


def run_indexes(args: argparse.Namespace, res: Results, stats: dict[str, np.ndarray]) -> None:
    work = Path(args.work)
    rng = np.random.default_rng([args.seed, 10**9])
    queries_file = work / "queries.npy"
    if not queries_file.is_file():
        np.save(queries_file, draw(stats, N_QUERIES, rng))
    queries = np.load(queries_file)
    log = work / "children.log"
    for n in args.sizes:
        base = base_vectors(work, n, stats, args.seed)
        ground_truth(work, n, base, queries)  # made once, read by the search children
        for kind in args.types:
            key = f"{n}/{kind}"
            if res.has(key) and not args.redo:
                continue
            print(f"[bench] {key}: building", flush=True)
            index_file = work / f"n{n}" / f"{kind.replace(':', '_')}.faiss"
            payload = {"base": str(base), "index": str(index_file)}
            built = run_child("build", {**payload, "params": index_params(kind, n, args)}, log)
            searched = run_child(
                "search",
                {
                    "index": str(index_file),
                    "base": str(base),
                    "queries": str(queries_file),
                    "gt": str(work / f"n{n}" / "gt.npy"),
                    "type": split_kind(kind)[0],
                    "settings": search_settings(split_kind(kind)[0]),
                },
                log,
            )
            res.put(key, {"n": n, "type": kind, "build": built, "search": searched})
            print(f"[bench] {key}: {json.dumps(res.data['cells'][key])[:400]}", flush=True)
            if kind != "ivfpq" and not args.keep_indexes:  # the served one is kept
                index_file.unlink(missing_ok=True)


# --- the corpus side ------------------------------------------------------------------------------


def corpus_file(work: Path, n: int) -> Path:
    """A Search-R1 JSONL corpus of ``n`` passages of ~100 words cut from the shipped summaries; the
    first ten are the load test's documents (its ``/document`` requests name their titles)."""
    from framework.retrieval.corpus import read_wiki_offline, wiki_offline_file
    from tests.unit.retrieval.corpus_fixtures import DOCS

    path = work / f"n{n}" / "corpus.jsonl"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    docs = list(read_wiki_offline(wiki_offline_file()))
    words = [w for d in docs for w in d.text.split()]
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for doc_id, title, text in DOCS:
            fh.write(json.dumps({"id": doc_id, "contents": f'"{title}"\n{text}'}) + "\n")
        for i in range(len(DOCS), n):
            start = (i * 97) % (len(words) - 100)
            title = docs[i % len(docs)].title
            text = " ".join(words[start : start + 100])
            fh.write(json.dumps({"id": str(i), "contents": f'"{title}"\n{text}'}) + "\n")
    os.replace(tmp, path)
    return path


def corpus_child(corpus: Path, cache: Path, launch: bool) -> dict[str, Any]:
    """Build the passage store (``launch=False``) or time a launch's corpus bookkeeping against the
    built store (``launch=True``: a fresh process, as each ``seekrl-train`` or DDP rank is)."""
    from framework.retrieval.corpus import CorpusConfig
    from framework.retrieval.local import LocalRetrieverConfig, open_store
    from framework.rl.plan import corpus_stages

    cfg = CorpusConfig(source="jsonl", path=str(corpus))
    start = time.perf_counter()
    store = open_store(LocalRetrieverConfig(corpus=cfg, cache_dir=str(cache), progress=False))
    opened = time.perf_counter() - start
    out: dict[str, Any] = {"open_store_s": opened, "passages": len(store)}
    if launch:
        start = time.perf_counter()
        corpus_stages(cfg, str(cache))
        out["plan_s"] = time.perf_counter() - start
        out["bookkeeping_s"] = opened + out["plan_s"]
    out["peak_rss_gb"] = peak_rss_gb()
    out["store_gb"] = store.path.stat().st_size / 1e9
    return out


def run_corpora(args: argparse.Namespace, res: Results) -> None:
    work = Path(args.work)
    log = work / "children.log"
    for n in args.sizes:
        key = f"{n}/corpus"
        if res.has(key) and not args.redo:
            continue
        start = time.perf_counter()
        corpus = corpus_file(work, n)
        made = time.perf_counter() - start
        cache = work / f"n{n}" / "cache"
        payload = {"corpus": str(corpus), "cache": str(cache)}
        built = run_child("corpus", {**payload, "launch": False}, log)
        launches = [run_child("corpus", {**payload, "launch": True}, log) for _ in range(3)]
        res.put(
            key,
            {
                "n": n,
                "jsonl_gb": corpus.stat().st_size / 1e9,
                "jsonl_write_s": made,
                "store_build": built,
                "launches": launches,
            },
        )
        print(f"[bench] {key}: {json.dumps(res.data['cells'][key])[:400]}", flush=True)


# --- serving -------------------------------------------------------------------------------------


def serve_overrides(n: int, work: Path, index_dir: Path, corpus: Path, nprobe: int) -> list[str]:
    return [
        "retriever=faiss",
        "retriever.corpus.source=jsonl",
        f"retriever.corpus.path={corpus}",
        f"retriever.cache_dir={work / f'n{n}' / 'cache'}",
        f"retriever.index.path={index_dir}",
        "retriever.index.type=ivfpq",
        f"retriever.index.nprobe={nprobe}",
        "retriever.progress=false",
    ]


def wait_for_health(port: int, server: subprocess.Popen, log: Path) -> None:
    import httpx

    deadline = time.time() + 600
    while time.time() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"[bench] seekrl-serve exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.5)
    raise RuntimeError("[bench] seekrl-serve did not answer /health within 600 s")


def run_serve(args: argparse.Namespace, res: Results) -> None:
    """Adopt each size's IVF-PQ index with its text corpus, serve it with ``seekrl-serve`` and
    drive it with ``tools/bench/retrieval_load.py``'s 64 concurrent clients."""
    sys.path.insert(0, str(REPO / "tools" / "bench"))
    import retrieval_load

    work = Path(args.work)
    for n in args.sizes:
        key = f"{n}/serve"
        index_file = work / f"n{n}" / "ivfpq.faiss"
        if (res.has(key) and not args.redo) or not index_file.is_file():
            continue
        corpus = corpus_file(work, n)
        index_dir = work / f"n{n}" / "adopted"
        common = serve_overrides(n, work, index_dir, corpus, args.serve_nprobe)
        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "framework",
                "index",
                f"adopt={index_file}",
                "adopt_sample=0",
                "smoke_query=null",
                f"hydra.run.dir={work / 'runs' / 'adopt'}",
                *common,
            ],
            cwd=REPO,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        adopt_s = time.perf_counter() - start
        port = retrieval_load.free_port()
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "framework",
                "serve",
                f"port={port}",
                f"max_body_bytes={retrieval_load.MAX_BODY_BYTES}",
                f"retriever.limits.max_queries={retrieval_load.MAX_QUERIES}",
                f"hydra.run.dir={work / 'runs' / 'serve'}",
                *common,
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=(work / "server.log").open("w"),
        )
        try:
            wait_for_health(port, server, work / "server.log")
            out = work / f"n{n}" / "load.json"
            subprocess.run(
                [
                    sys.executable,
                    str(REPO / "tools" / "bench" / "retrieval_load.py"),
                    "--url",
                    f"http://127.0.0.1:{port}",
                    "--clients",
                    "64",
                    "--seconds",
                    str(args.serve_seconds),
                    "--out",
                    str(out),
                    "--md",
                    str(out.with_suffix(".md")),
                    "--note",
                    f"IVF-PQ over {n:,} generated passages (adopted), nprobe {args.serve_nprobe}",
                ],
                cwd=REPO,
                check=True,
                stdout=subprocess.DEVNULL,
            )
        finally:
            server.terminate()
            server.wait(timeout=60)
        load = json.loads(out.read_text())
        res.put(key, {"n": n, "adopt_s": adopt_s, "load": load["results"], "meta": load["meta"]})
        print(f"[bench] {key}: {json.dumps(load['results'])[:300]}", flush=True)


# --- the page --------------------------------------------------------------------------------------


def kinds_in(cells: dict[str, Any]) -> list[str]:
    """The index kinds measured, the four types first, then variants (``ivfpq:pq_m=96``)."""
    found = {c.get("type_label", c["type"]) for c in cells.values() if "build" in c}
    return [k for k in DEFAULT_TYPES if k in found] + sorted(found - set(DEFAULT_TYPES))


def power_fit(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """``(a, b)`` of ``y = a n^b`` through the points (least squares in log-log; exact for two)."""
    pts = [(math.log(n), math.log(y)) for n, y in points if n > 0 and y > 0]
    if len(pts) < 2 or len({x for x, _ in pts}) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    b = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    return math.exp(my - b * mx), b


def chosen(rows: list[dict[str, Any]], floor: float = 0.9) -> dict[str, Any]:
    """The fastest setting (batch 64) whose recall@10 reaches ``floor``, else the most accurate."""
    good = [r for r in rows if r["recall_at_10"] >= floor]
    if good:
        return max(good, key=lambda r: r["qps_batch64"])
    return max(rows, key=lambda r: r["recall_at_10"])


def label(cell: dict[str, Any]) -> str:
    """The index kind with its resolved PQ size (``ivfpq, pq_m 48``)."""
    kind = cell["type"].partition(":")[0]
    pq_m = cell["build"].get("plan", {}).get("pq_m")
    return f"{kind}, pq_m {pq_m}" if kind == "ivfpq" and pq_m else kind


def setting_text(setting: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in setting.items()) or "exact"


def render(data: dict[str, Any], command: str) -> str:
    cells = data["cells"]
    sizes = sorted({c["n"] for c in cells.values()})
    m = data.get("machine", {})
    lines = [
        "# Retrieval at scale: 1M and 4M passages, and what they predict for wiki-18",
        "",
        f"Command: `{command}`  ",
        f"Machine: {m.get('cpu')}, {m.get('cores')} cores, {m.get('memory_gib')} GiB; "
        f"faiss {m.get('faiss')} ({m.get('omp_threads')} OpenMP threads)  ",
        "Data: see the script's docstring. Index figures use generated vectors with the shipped "
        "embeddings' statistics (not real encodings); corpus figures use generated text.",
        "",
    ]
    lines += [f"- {note}" for note in data.get("notes", [])]
    lines += [""] if data.get("notes") else []
    st = data.get("statistics")
    if st:
        r, g = st["real"], st["model_same_size"]
        lines += [
            f"The vector model: {st['clusters']} clusters fitted to the packaged MiniLM's "
            f"{st['shipped_vectors']:,} embeddings of the shipped summaries ({st['dim']} dims). "
            f"At that size the real vectors' mean nearest-neighbour cosine is "
            f"{r['nn1_cos']:.3f} (10th: {r['nn10_cos']:.3f}) against the model's "
            f"{g['nn1_cos']:.3f} ({g['nn10_cos']:.3f}); effective dimension "
            f"{r['effective_dim']:.0f} against {g['effective_dim']:.0f}. The model is less "
            "clustered than the real embeddings, so its neighbours are less distinct and its "
            "recall figures are more likely under than over what real embeddings give.",
            "",
        ]
    lines += [
        "## Indexes",
        "",
        "Build in a subprocess of its own (peak RSS is that process's, interpreter and imports "
        "included); search in another, the index memory-mapped where FAISS can. Recall@10 against "
        "the exact top 10 of 1,000 queries. The row's setting is the fastest at batch 64 whose "
        "recall@10 is at least 0.9 (else the most accurate); speed-up is against flat at the same "
        "size and batch.",
        "",
        "| passages | index | build (s) | peak RSS (GB) | on disk (GB) | setting | recall@10 "
        "| q/s batch 1 | q/s batch 64 | speed-up (64) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in sizes:
        flat = cells.get(f"{n}/flat")
        flat_qps = flat["search"][0]["qps_batch64"] if flat else None
        for kind in kinds_in(cells):
            c = cells.get(f"{n}/{kind}")
            if not c:
                continue
            b, best = c["build"], chosen(c["search"])
            speed = f"{best['qps_batch64'] / flat_qps:.1f}x" if flat_qps else "–"
            lines.append(
                f"| {n:,} | {label(c)} | {b['build_s']:.0f} | {b['peak_rss_gb']:.2f} | "
                f"{b['disk_gb']:.3f} | {setting_text(best['setting'])} | "
                f"{best['recall_at_10']:.3f} | {best['qps_batch1']:.0f} | "
                f"{best['qps_batch64']:.0f} | {speed} |"
            )
    lines += [
        "",
        "Every search setting measured:",
        "",
        "| passages | index | setting | recall@10 | q/s batch 1 | q/s batch 64 |",
        "|---|---|---|---|---|---|",
    ]
    for n in sizes:
        for kind in kinds_in(cells):
            cell = cells.get(f"{n}/{kind}", {})
            for row in cell.get("search", []):
                lines.append(
                    f"| {n:,} | {label(cell)} | {setting_text(row['setting'])} | "
                    f"{row['recall_at_10']:.3f} | {row['qps_batch1']:.0f} | "
                    f"{row['qps_batch64']:.0f} |"
                )
    lines += render_fits(cells, sizes)
    lines += render_corpus(cells, sizes)
    lines += render_serve(cells, sizes)
    return "\n".join(lines) + "\n"


def render_fits(cells: dict[str, Any], sizes: list[int]) -> list[str]:
    lines = [
        "",
        f"## Predicted at wiki-18's {WIKI18:,} passages",
        "",
        "Each figure fitted as `a * n^b` through the measured sizes (two sizes: the line through "
        "both points) and evaluated at 21M. Assumptions: the same index settings scaled as "
        "measured (nlist 4 sqrt(n)); the same dimension as measured (an e5-base index has 768: "
        "the flat and IVF-flat sizes double, an IVF-PQ index's codes do not change with d at a "
        "fixed pq_m); growth stays on the fitted curve, which for build time and memory is the "
        "optimistic reading when a new cost (swapping, a larger training sample) would appear "
        "past 4M.",
        "",
        "| index | figure | exponent b | predicted at 21M |",
        "|---|---|---|---|",
    ]
    for kind in kinds_in(cells):
        rows = [cells[f"{n}/{kind}"] for n in sizes if f"{n}/{kind}" in cells]
        if len(rows) < 2:
            continue
        figures = {
            "build (s)": [(r["n"], r["build"]["build_s"]) for r in rows],
            "peak RSS (GB)": [(r["n"], r["build"]["peak_rss_gb"]) for r in rows],
            "on disk (GB)": [(r["n"], r["build"]["disk_gb"]) for r in rows],
            "q/s batch 64": [(r["n"], chosen(r["search"])["qps_batch64"]) for r in rows],
        }
        for name, pts in figures.items():
            fit = power_fit(pts)
            if fit:
                lines.append(
                    f"| {kind} | {name} | {fit[1]:.2f} | {fit[0] * WIKI18 ** fit[1]:,.1f} |"
                )
    return lines


def render_corpus(cells: dict[str, Any], sizes: list[int]) -> list[str]:
    lines = [
        "",
        "## The passage store and a launch's bookkeeping",
        "",
        "The store is built once from the generated JSONL; a launch is a fresh process that opens "
        "the store through the cache (the source's fingerprint checked) and runs the dry run's "
        "corpus stage, as each `seekrl-train` launch and each DDP rank does. Three launches.",
        "",
        "| passages | JSONL (GB) | store build (s) | store (GB) | build peak RSS (GB) | "
        "launch bookkeeping (s) |",
        "|---|---|---|---|---|---|",
    ]
    for n in sizes:
        c = cells.get(f"{n}/corpus")
        if not c:
            continue
        b = c["store_build"]
        launch = ", ".join(f"{x['bookkeeping_s']:.3f}" for x in c["launches"])
        lines.append(
            f"| {n:,} | {c['jsonl_gb']:.2f} | {b['wall_s']:.0f} | {b['store_gb']:.2f} | "
            f"{b['peak_rss_gb']:.2f} | {launch} |"
        )
    return lines


def render_serve(cells: dict[str, Any], sizes: list[int]) -> list[str]:
    lines = [
        "",
        "## Served: 64 concurrent clients",
        "",
        "`seekrl-serve` over the adopted IVF-PQ index and the generated corpus (queries encoded by "
        "the packaged MiniLM), driven by `tools/bench/retrieval_load.py --clients 64` (about a "
        "quarter of the requests malformed, each kind with the status it must get).",
        "",
        "| passages | requests | req/s | 5xx | dropped | other status | p50 / p99 (ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in sizes:
        c = cells.get(f"{n}/serve")
        if not c:
            continue
        r = c["load"]
        lat = r["latency_ms"]["all"]
        lines.append(
            f"| {n:,} | {r['requests']} | {r['requests_per_s']:.0f} | {r['errors_5xx']} | "
            f"{r['dropped']} | {r['unexpected_status']} | {lat.get('p50', 0):.0f} / "
            f"{lat.get('p99', 0):.0f} |"
        )
    return lines


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        child_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 4_000_000])
    parser.add_argument("--types", nargs="+", default=list(DEFAULT_TYPES))
    parser.add_argument("--work", default="/tmp/retrieval_scale", help="vectors, corpora, indexes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clusters", type=int, default=1024)
    parser.add_argument("--nlist", type=int, default=0, help="IVF cells; 0 = 4 sqrt(n)")
    parser.add_argument(
        "--train-per-cell", type=int, default=50, help="IVF training rows per cell (FAISS: 39-256)"
    )
    parser.add_argument("--ef-construction", type=int, default=40)
    parser.add_argument("--extra-ivf", default="", help="JSON of further IVF build settings")
    parser.add_argument("--extra-pq", default="", help="JSON of further IVF-PQ build settings")
    parser.add_argument("--keep-indexes", action="store_true")
    parser.add_argument("--redo", action="store_true", help="repeat cells already in the JSON")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--serve-nprobe", type=int, default=32)
    parser.add_argument("--serve-seconds", type=float, default=30.0)
    parser.add_argument("--md", default=str(MD))
    parser.add_argument("--render", action="store_true", help="only rewrite the page")
    parser.add_argument("--stages", nargs="+", default=["corpus", "index", "serve"])
    args = parser.parse_args()
    res = Results(Path(args.out))
    command = "python3 tools/bench/retrieval_scale.py " + " ".join(sys.argv[1:])
    if args.render:
        Path(args.md).write_text(render(res.data, res.data.get("command", command)))
        return
    res.data["command"] = command
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    res.data["machine"] = machine()
    stats_file = work / "stats.npz"
    emb = None
    if stats_file.is_file():
        stats = dict(np.load(stats_file))
    else:
        emb = shipped_embeddings(work)
        stats = fit_statistics(emb, args.clusters, args.seed)
        np.savez(stats_file, **stats)
    if "statistics" not in res.data:  # a new results file over a work folder made before
        emb = shipped_embeddings(work) if emb is None else emb
        model = draw(stats, len(emb), np.random.default_rng([args.seed, 7]))
        res.data["statistics"] = {
            "shipped_vectors": len(emb),
            "dim": int(emb.shape[1]),
            "clusters": args.clusters,
            "real": neighbour_profile(emb),
            "model_same_size": neighbour_profile(model),
        }
    res.save()
    if "corpus" in args.stages:
        run_corpora(args, res)
    if "index" in args.stages:
        run_indexes(args, res, stats)
    if "serve" in args.stages:
        run_serve(args, res)
    Path(args.md).write_text(render(res.data, command))


if __name__ == "__main__":
    main()
