"""Retrieval benchmark: build time, QPS and latency, recall, and HTTP against in-process.

    python3 tools/bench/retrieval.py                 # full shipped corpus (~10k summaries)
    python3 tools/bench/retrieval.py --limit 2000    # quicker

Every backend runs on the same corpus, encoder and queries in one process; the HTTP figures come from
a real ``seekrl-serve`` subprocess over the same cached index. Figures go to
``docs/benchmarks/retrieval.md`` and ``.json`` (paths configurable). Queries are the one-line
descriptions of randomly drawn articles ("Painting by Georges Seurat"), so each query also has a
known target article: ``target@10`` is the share of queries whose article is in the top 10.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from framework.retrieval.bm25 import BM25Retriever, BM25RetrieverConfig  # noqa: E402
from framework.retrieval.corpus import CorpusConfig, read_wiki_offline, wiki_offline_file  # noqa: E402
from framework.retrieval.dense import (  # noqa: E402
    DenseIndexConfig,
    FaissRetriever,
    FaissRetrieverConfig,
    build_faiss_index,
    compute_embeddings,
)
from framework.retrieval.hybrid import HybridRetriever, HybridRetrieverConfig  # noqa: E402

K = 10
BATCH = 64
#: where tools/bench/retrieval_load.py's section starts; kept when this benchmark rewrites the file
LOAD_SECTION = "<!-- retrieval_load:begin -->"


def description_queries(n: int, limit: int, seed: int) -> list[tuple[str, str]]:
    """``(query, target title)`` pairs: descriptions of random articles within the first ``limit``."""
    data = json.loads(wiki_offline_file().read_text())
    titles = {
        d.title
        for i, d in enumerate(read_wiki_offline(wiki_offline_file()))
        if not limit or i < limit
    }
    pairs = [
        (item["description"], item["title"])
        for item in data.values()
        if item.get("title") in titles and len(str(item.get("description", ""))) > 12
    ]
    random.Random(seed).shuffle(pairs)
    return pairs[:n]


def timed(fn: Any, batches: list[Any]) -> dict[str, float]:
    """Run ``fn`` on each batch; QPS over all queries, latency percentiles per call (ms)."""
    fn(batches[0])  # warm-up (lazy init, caches)
    lat = []
    queries = 0
    start = time.perf_counter()
    for b in batches:
        t = time.perf_counter()
        fn(b)
        lat.append((time.perf_counter() - t) * 1000)
        queries += len(b)
    total = time.perf_counter() - start
    lat.sort()
    return {
        "qps": queries / total,
        "p50_ms": statistics.median(lat),
        "p95_ms": lat[min(len(lat) - 1, int(0.95 * len(lat)))],
        "calls": len(lat),
    }


def batched(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def target_at_k(results: list[list[Any]], targets: list[str]) -> float:
    return float(
        np.mean([t in {h.title for h in hits} for hits, t in zip(results, targets, strict=True)])
    )


def recall_against(results: list[list[Any]], reference: list[list[Any]]) -> float:
    """Mean |top-k ∩ flat top-k| / k."""
    vals = [
        len({h.passage_id for h in r} & {h.passage_id for h in f}) / max(len(f), 1)
        for r, f in zip(results, reference, strict=True)
    ]
    return float(np.mean(vals))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, overrides: list[str]) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "framework", "serve", f"port={port}", *overrides],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    import httpx

    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"seekrl-serve exited: {proc.stderr.read()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("seekrl-serve did not answer /health within 180 s")


def run(args: argparse.Namespace) -> dict[str, Any]:
    corpus = CorpusConfig(limit=args.limit)
    common = {"corpus": corpus, "cache_dir": args.cache_dir, "progress": True}
    pairs = description_queries(args.queries, args.limit, args.seed)
    queries, targets = [q for q, _ in pairs], [t for _, t in pairs]
    b1, b64 = batched(queries, 1), batched(queries, BATCH)
    report: dict[str, Any] = {"queries": len(queries), "k": K, "batch": BATCH, "backends": {}}

    flat = FaissRetriever(cfg=FaissRetrieverConfig(name="faiss", **common))
    report["corpus_passages"] = len(flat.store)
    report["embed_dim"] = flat.encoder.dim
    enc = flat.encoder
    query_emb = enc.encode_queries(queries)
    report["query_encoding"] = {
        "batch1": timed(lambda b: enc.encode_queries(b), b1),
        "batch64": timed(lambda b: enc.encode_queries(b), b64),
    }
    emb_rows = [query_emb[i : i + 1] for i in range(len(queries))]
    emb_64 = [query_emb[i : i + BATCH] for i in range(0, len(queries), BATCH)]
    reference = flat.search_embeddings(query_emb, K)

    embeddings = compute_embeddings(flat.store, enc, flat._embeddings_path())  # cached
    sample = [t for batch in flat.store.iter_texts(batch=512) for t in batch][:512]
    start = time.perf_counter()
    enc.encode_passages(sample)
    report["passage_encoding_per_s"] = len(sample) / (time.perf_counter() - start)
    for typ in ("flat", "hnsw", "ivf", "ivfpq"):
        index_cfg = DenseIndexConfig(type=typ)
        start = time.perf_counter()
        build_faiss_index(embeddings, index_cfg)
        build = time.perf_counter() - start
        cfg = FaissRetrieverConfig(name="faiss", index=index_cfg, **common)
        r = flat if typ == "flat" else FaissRetriever(cfg=cfg, encoder=enc)
        results = r.search_embeddings(query_emb, K)
        report["backends"][f"faiss_{typ}"] = {
            "build_s_from_embeddings": build,
            "params": dataclasses.asdict(index_cfg),
            "no_encoding": {
                "batch1": timed(lambda e, r=r: r.search_embeddings(e, K), emb_rows),
                "batch64": timed(lambda e, r=r: r.search_embeddings(e, K), emb_64),
            },
            "with_encoding": {
                "batch1": timed(lambda b, r=r: r.search(b, K), b1),
                "batch64": timed(lambda b, r=r: r.search(b, K), b64),
            },
            "recall@10_vs_flat": recall_against(results, reference),
            "target@10": target_at_k(results, targets),
        }

    bm25 = BM25Retriever(cfg=BM25RetrieverConfig(name="bm25", **common))
    start = time.perf_counter()
    bm25.build()
    bm25_build = time.perf_counter() - start
    results = bm25.search(queries, K)
    report["backends"]["bm25"] = {
        "build_s": bm25_build,
        "with_encoding": {
            "batch1": timed(lambda b: bm25.search(b, K), b1),
            "batch64": timed(lambda b: bm25.search(b, K), b64),
        },
        "recall@10_vs_flat": recall_against(results, reference),
        "target@10": target_at_k(results, targets),
    }

    hybrid = HybridRetriever(cfg=HybridRetrieverConfig(name="hybrid", **common))
    results = hybrid.search(queries, K)
    report["backends"]["hybrid_rrf"] = {
        "with_encoding": {
            "batch1": timed(lambda b: hybrid.search(b, K), b1),
            "batch64": timed(lambda b: hybrid.search(b, K), b64),
        },
        "recall@10_vs_flat": recall_against(results, reference),
        "target@10": target_at_k(results, targets),
    }

    # the same flat index behind seekrl-serve, queried through the HTTP client backend
    from framework.retrieval.http import HttpRetriever, HttpRetrieverConfig

    port = free_port()
    overrides = [f"retriever.corpus.limit={args.limit}"]
    if args.cache_dir:
        overrides.append(f"retriever.cache_dir={args.cache_dir}")
    server = start_server(port, overrides)
    try:
        client = HttpRetriever(cfg=HttpRetrieverConfig(name="http", url=f"http://127.0.0.1:{port}"))
        http_results = client.search(queries, K)
        report["http_vs_inprocess"] = {
            "backend": "faiss_flat",
            "http": {
                "batch1": timed(lambda b: client.search(b, K), b1),
                "batch64": timed(lambda b: client.search(b, K), b64),
            },
            "inprocess": report["backends"]["faiss_flat"]["with_encoding"],
            "same_results": [[h.passage_id for h in r] for r in http_results]
            == [[h.passage_id for h in r] for r in flat.search(queries, K)],
        }
        client.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    return report


def render(report: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = [
        "# Retrieval benchmark",
        "",
        f"Command: `{meta['command']}`  ",
        f"Machine: {meta['machine']}  ",
        f"Date: {meta['date']}  ",
        f"Corpus: {report['corpus_passages']} passages (shipped Wikipedia summaries), encoder "
        f"all-MiniLM-L6-v2 (dim {report['embed_dim']}), {report['queries']} description queries, "
        f"k = {report['k']}, batch = {report['batch']}. Medians of one run; read them as ±20 %.",
        "",
        f"Passage encoding: {report['passage_encoding_per_s']:.0f} passages/s (the whole corpus once, "
        f"then cached: about {report['corpus_passages'] / report['passage_encoding_per_s']:.0f} s). "
        "Query encoding alone: "
        f"{report['query_encoding']['batch1']['qps']:.0f} q/s at batch 1, "
        f"{report['query_encoding']['batch64']['qps']:.0f} q/s at batch 64.",
        "",
        "| backend | build (s) | QPS b1, no enc | QPS b64, no enc | QPS b1 | p50 b1 (ms) | QPS b64 | p50 b64 (ms) | recall@10 vs flat | target@10 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in report["backends"].items():
        build = r.get("build_s_from_embeddings", r.get("build_s"))
        build_text = f"{build:.2f}" if build is not None else "– (its parts)"
        ne = r.get("no_encoding")
        we = r["with_encoding"]
        lines.append(
            f"| {name} | {build_text} | "
            + (f"{ne['batch1']['qps']:.0f} | {ne['batch64']['qps']:.0f} | " if ne else "– | – | ")
            + f"{we['batch1']['qps']:.0f} | {we['batch1']['p50_ms']:.1f} | {we['batch64']['qps']:.0f} | "
            f"{we['batch64']['p50_ms']:.1f} | {r['recall@10_vs_flat']:.3f} | {r['target@10']:.3f} |"
        )
    h = report["http_vs_inprocess"]
    lines += [
        "",
        "Build times for FAISS are from the cached embeddings (encoding excluded); BM25 includes "
        'tokenisation. "no enc" = search with precomputed query embeddings.',
        "",
        "## HTTP server against in-process (faiss flat, with query encoding)",
        "",
        "| path | QPS b1 | p50 b1 (ms) | QPS b64 | p50 b64 (ms) |",
        "|---|---|---|---|---|",
    ]
    for path in ("inprocess", "http"):
        r = h[path]
        lines.append(
            f"| {path} | {r['batch1']['qps']:.0f} | {r['batch1']['p50_ms']:.1f} | "
            f"{r['batch64']['qps']:.0f} | {r['batch64']['p50_ms']:.1f} |"
        )
    ratio1 = h["http"]["batch1"]["qps"] / h["inprocess"]["batch1"]["qps"]
    ratio64 = h["http"]["batch64"]["qps"] / h["inprocess"]["batch64"]["qps"]
    flat = report["backends"]["faiss_flat"]
    hnsw = report["backends"]["faiss_hnsw"]
    lines += [
        "",
        f"Ratios: HTTP / in-process QPS = {ratio1:.2f} at batch 1, {ratio64:.2f} at batch 64 "
        f"(identical results: {h['same_results']}). HNSW / flat search QPS without encoding = "
        f"{hnsw['no_encoding']['batch1']['qps'] / flat['no_encoding']['batch1']['qps']:.2f} at batch 1, "
        f"{hnsw['no_encoding']['batch64']['qps'] / flat['no_encoding']['batch64']['qps']:.2f} at batch 64.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--limit", type=int, default=0, help="first N articles (0 = all)")
    parser.add_argument("--queries", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", default=None, help="index cache (default: the framework's)")
    parser.add_argument("--out", default=str(REPO / "docs" / "benchmarks" / "retrieval"))
    args = parser.parse_args()
    report = run(args)
    meta = {
        "command": "python3 "
        + " ".join(
            [
                str(Path(sys.argv[0]).relative_to(REPO))
                if Path(sys.argv[0]).is_absolute()
                else sys.argv[0],
                *sys.argv[1:],
            ]
        ),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, {platform.python_version()}, "
        f"torch threads {__import__('torch').get_num_threads()}",
        "date": time.strftime("%Y-%m-%d"),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, **report}, indent=2))
    md = out.with_suffix(".md")
    old = md.read_text() if md.exists() else ""
    load = old[old.index(LOAD_SECTION) :] if LOAD_SECTION in old else ""  # retrieval_load.py's
    md.write_text(render(report, meta) + ("\n" + load if load else ""))
    print(render(report, meta))


if __name__ == "__main__":
    main()
