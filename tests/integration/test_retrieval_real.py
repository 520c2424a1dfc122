"""The index command and the real encoder: MiniLM over a few hundred shipped Wikipedia summaries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from framework.retrieval.corpus import CorpusConfig, read_wiki_offline, wiki_offline_file
from framework.retrieval.dense import FaissRetriever, FaissRetrieverConfig
from framework.retrieval.hybrid import HybridRetriever, HybridRetrieverConfig

# the real assets: MiniLM embeddings of a Wikipedia slice, about 20 s to build
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
LIMIT = 300


def index_cli(cache: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "framework",
            "index",
            f"retriever.corpus.limit={LIMIT}",
            f"retriever.cache_dir={cache}",
            f"hydra.run.dir={cache}/run",
            *overrides,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )


def summary_of(stdout: str) -> dict:
    return json.loads(stdout[stdout.index("{") : stdout.rindex("}") + 1])


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """A cache holding the flat MiniLM index over the first LIMIT summaries, built by the CLI."""
    path = tmp_path_factory.mktemp("retrieval_cache")
    proc = index_cli(path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = summary_of(proc.stdout)
    assert summary["built_now"] and summary["passages"] == LIMIT and summary["dim"] == 384
    assert (
        "2001: A Space Odyssey" in proc.stdout.split("query")[-1]
    )  # the smoke query's own article
    return path


def test_index_command_reuses_a_matching_index(cache):
    proc = index_cli(cache, "smoke_query=null")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary_of(proc.stdout)["built_now"] is False


def test_title_queries_find_their_own_article(cache):
    cfg = FaissRetrieverConfig(name="faiss", corpus=CorpusConfig(limit=LIMIT), cache_dir=str(cache))
    retriever = FaissRetriever(cfg=cfg)
    assert retriever.build_seconds is None  # loaded from the CLI's cache, not rebuilt
    docs = list(read_wiki_offline(wiki_offline_file()))[:LIMIT]
    titles = [d.title for d in docs[::15]]  # 20 articles spread over the corpus
    hits = retriever.search(titles, 1)
    found = [h[0].title for h in hits]
    misses = [(t, f) for t, f in zip(titles, found, strict=True) if t != f]
    assert len(misses) <= 1, misses
    doc = retriever.document(doc_id=titles[0])
    assert doc.title == titles[0] and doc.text == docs[0].text
    retriever.close()


def test_hybrid_and_bm25_over_the_same_corpus(cache):
    cfg = HybridRetrieverConfig(
        name="hybrid", corpus=CorpusConfig(limit=LIMIT), cache_dir=str(cache), progress=False
    )
    retriever = HybridRetriever(cfg=cfg)
    assert retriever.dense.build_seconds is None and retriever.sparse.build_seconds is not None
    (hits,) = retriever.search(["2001: A Space Odyssey Kubrick"], 3)
    assert hits[0].title == "2001: A Space Odyssey"
    retriever.close()


def test_serve_command_answers_search_r1_clients(cache):
    import socket
    import time

    import httpx

    from framework.retrieval.http import HttpRetriever, HttpRetrieverConfig

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "framework",
            "serve",
            f"port={port}",
            f"retriever.corpus.limit={LIMIT}",
            f"retriever.cache_dir={cache}",
            f"hydra.run.dir={cache}/serve",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            assert server.poll() is None, server.stderr.read()[-3000:]
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.time() < deadline, "seekrl-serve did not come up"
            time.sleep(0.5)
        # what Search-R1's and verl's search tools send and read
        payload = {"queries": ["2001: A Space Odyssey", "Painting by Georges Seurat"], "topk": 3}
        resp = httpx.post(f"{url}/retrieve", json={**payload, "return_scores": True}, timeout=30)
        assert resp.status_code == 200, resp.text
        result = resp.json()["result"]
        assert len(result) == 2 and all(len(r) == 3 for r in result)
        first = result[0][0]["document"]["contents"]
        assert first.split("\n")[0] == '"2001: A Space Odyssey"'
        assert isinstance(result[0][0]["score"], float)
        bare = httpx.post(f"{url}/retrieve", json=payload, timeout=30).json()["result"]
        assert bare[0][0]["contents"] == first  # without scores: documents only
        # bad input gets a clear error and the server keeps answering
        assert httpx.post(f"{url}/retrieve", json={"queries": [""]}, timeout=30).status_code == 400
        with HttpRetriever(cfg=HttpRetrieverConfig(name="http", url=url)) as client:
            (hits,) = client.search(["2001: A Space Odyssey"], 2)
            assert hits[0].title == "2001: A Space Odyssey"
            assert client.document(title="2001: A Space Odyssey").text.startswith("2001")
    finally:
        server.terminate()
        server.wait(timeout=30)
