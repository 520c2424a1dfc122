"""Load test of the retrieval server: 64 concurrent clients, valid and malformed requests mixed.

    python3 tools/bench/retrieval_load.py                    # 64 clients for 20 s
    python3 tools/bench/retrieval_load.py --seconds 5 --clients 8
    python3 tools/bench/retrieval_load.py --url http://127.0.0.1:8000   # a server already running

Starts ``seekrl-serve`` (BM25 over the ten-document test corpus, so the figures measure the server,
not an index) on a free loopback port, then runs ``--clients`` concurrent clients for ``--seconds``,
each sending its next request as soon as the last one is answered. About a quarter of the requests
are malformed (a lone surrogate in a query or title, a body that is not UTF-8, JSON nested too
deeply, not JSON at all, wrong types, too many queries, an oversized body, an unknown route); each
kind has the status it must get. Reports requests, answers by status, 5xx, dropped connections
(transport errors and timeouts), answers other than the expected status, and latency p50/p99, to
``docs/benchmarks/retrieval_load.json`` and a section of ``docs/benchmarks/retrieval.md``. The
target is zero 5xx and zero dropped. With ``--url`` the same mix drives any Search-R1 compatible
server (a peer), whose expected statuses may differ.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.unit.retrieval.corpus_fixtures import DOCS, write_jsonl  # noqa: E402

#: the server's limits in this test (``max_body_bytes`` above a 2,560-query Search-R1 batch)
MAX_QUERIES = 4096
MAX_BODY_BYTES = 262_144
SECTION_BEGIN = "<!-- retrieval_load:begin -->"
SECTION_END = "<!-- retrieval_load:end -->"
WORDS = sorted({w.strip(".,'()").lower() for _, t, x in DOCS for w in f"{t} {x}".split()} - {""})


@dataclass(frozen=True)
class Kind:
    """One kind of request: how often it is sent, and the status it must get."""

    name: str
    weight: float
    expected: int
    valid: bool


KINDS = [
    Kind("retrieve", 55, 200, True),
    Kind("retrieve_batch64", 8, 200, True),
    Kind("retrieve_search_r1_2560", 0.5, 200, True),
    Kind("document", 6, 200, True),
    Kind("document_unknown", 2, 404, True),
    Kind("lone_surrogate_query", 3, 400, False),
    Kind("lone_surrogate_title", 2, 400, False),
    Kind("body_not_utf8", 3, 400, False),
    Kind("json_too_deep", 2, 400, False),
    Kind("not_json", 3, 400, False),
    Kind("wrong_type", 3, 422, False),
    Kind("empty_query", 2, 400, False),
    Kind("too_many_queries", 1, 400, False),
    Kind("topk_out_of_range", 2, 400, False),
    Kind("oversized_body", 1, 413, False),
    Kind("unknown_route", 2, 404, False),
]


def _query(rng: random.Random) -> str:
    return " ".join(rng.sample(WORDS, rng.randint(2, 5)))


def _retrieve(queries: list[str], topk: int = 3) -> bytes:
    return json.dumps({"queries": queries, "topk": topk, "return_scores": True}).encode()


def build_request(kind: str, rng: random.Random) -> tuple[str, bytes]:
    """``(path, body)`` of one request of ``kind``; hand-built bytes where a client library would
    refuse to send them."""
    if kind == "retrieve":
        return "/retrieve", _retrieve([_query(rng) for _ in range(rng.randint(1, 4))])
    if kind == "retrieve_batch64":
        return "/retrieve", _retrieve([_query(rng) for _ in range(64)])
    if kind == "retrieve_search_r1_2560":
        return "/retrieve", _retrieve([_query(rng) for _ in range(2560)])
    if kind == "document":
        return "/document", json.dumps({"title": rng.choice(DOCS)[1]}).encode()
    if kind == "document_unknown":
        return "/document", b'{"id": "no-such-document"}'
    if kind == "lone_surrogate_query":
        return "/retrieve", b'{"queries": ["\\ud800 abc"], "topk": 3}'
    if kind == "lone_surrogate_title":
        return "/document", b'{"title": "Saturn \\udfff"}'
    if kind == "body_not_utf8":
        return "/retrieve", '{"queries": ["café crème"]}'.encode("latin-1")
    if kind == "json_too_deep":
        depth = rng.choice([40, 5000])
        return "/retrieve", b'{"queries": ' + b"[" * depth + b"]" * depth + b"}"
    if kind == "not_json":
        return "/retrieve", rng.choice(
            [b'{"queries": [', b"queries=jaws", b"\x00\x01", b"{'q': 1}"]
        )
    if kind == "wrong_type":
        return "/retrieve", rng.choice([b'{"queries": "jaws"}', b'{"queries": [1]}', b"null"])
    if kind == "empty_query":
        return "/retrieve", b'{"queries": ["   "]}'
    if kind == "too_many_queries":
        return "/retrieve", _retrieve(["jaws"] * (MAX_QUERIES + 1))
    if kind == "topk_out_of_range":
        return "/retrieve", _retrieve(["jaws"], rng.choice([0, -1, 101]))
    if kind == "oversized_body":
        return "/retrieve", _retrieve(["saturn rings"] * (MAX_BODY_BYTES // 10))
    if kind == "unknown_route":
        return "/search", _retrieve(["jaws"])
    raise ValueError(f"[bench.kind] got {kind!r}; expected one of {[k.name for k in KINDS]}.")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, workdir: Path) -> subprocess.Popen:
    """``seekrl-serve`` with BM25 over the ten-document test corpus; returns once it answers."""
    corpus = write_jsonl(workdir / "corpus.jsonl")
    overrides = [
        "retriever=bm25",
        "retriever.corpus.source=jsonl",
        f"retriever.corpus.path={corpus}",
        f"retriever.cache_dir={workdir / 'cache'}",
        "retriever.progress=false",
        f"retriever.limits.max_queries={MAX_QUERIES}",
        f"max_body_bytes={MAX_BODY_BYTES}",
        f"port={port}",
        f"hydra.run.dir={workdir / 'run'}",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "framework", "serve", *overrides],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=(workdir / "server.log").open("w"),
        text=True,
    )
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            log = (workdir / "server.log").read_text()[-2000:]
            raise RuntimeError(f"[bench] seekrl-serve exited ({proc.returncode}): {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError("[bench] seekrl-serve did not answer /health within 180 s")


async def client(
    http: httpx.AsyncClient, seed: int, stop_at: float, records: list[tuple[str, Any, float]]
) -> None:
    """Send requests until ``stop_at``; record ``(kind, status or exception name, seconds)``."""
    rng = random.Random(seed)
    names, weights = [k.name for k in KINDS], [k.weight for k in KINDS]
    headers = {"Content-Type": "application/json"}
    while time.perf_counter() < stop_at:
        kind = rng.choices(names, weights)[0]
        path, body = build_request(kind, rng)
        start = time.perf_counter()
        try:
            resp = await http.post(path, content=body, headers=headers)
            resp.json()  # every answer, error or not, must be JSON
            outcome: Any = resp.status_code
        except (httpx.HTTPError, OSError) as exc:
            outcome = type(exc).__name__
        except ValueError:
            outcome = "not JSON"
        records.append((kind, outcome, time.perf_counter() - start))


async def drive(url: str, clients: int, seconds: float, timeout_s: float) -> tuple[list, float]:
    """Run ``clients`` concurrent clients for ``seconds``; returns the records and the wall time."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=limits) as http:
        await http.post("/retrieve", content=_retrieve(["warm up"]))
        records: list[tuple[str, Any, float]] = []
        start = time.perf_counter()
        await asyncio.gather(
            *(client(http, seed, start + seconds, records) for seed in range(clients))
        )
        return records, time.perf_counter() - start


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def latency_ms(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    if not values:
        return {}
    return {"p50": 1000 * percentile(values, 0.5), "p99": 1000 * percentile(values, 0.99)}


def summarize(records: list[tuple[str, Any, float]], wall_s: float) -> dict[str, Any]:
    """Totals, answers by status, 5xx, dropped, unexpected statuses and latency, overall and by kind."""
    expected = {k.name: k for k in KINDS}
    statuses = Counter(str(o) for _, o, _ in records)
    by_kind: dict[str, Any] = {}
    for name in expected:
        rows = [r for r in records if r[0] == name]
        by_kind[name] = {
            "requests": len(rows),
            "expected": expected[name].expected,
            "statuses": dict(Counter(str(o) for _, o, _ in rows)),
            "latency_ms": latency_ms([s for _, _, s in rows]),
        }
    answered = [r for r in records if isinstance(r[1], int)]
    return {
        "requests": len(records),
        "wall_s": wall_s,
        "requests_per_s": len(records) / wall_s,
        "valid_requests": sum(expected[k].valid for k, _, _ in records),
        "malformed_requests": sum(not expected[k].valid for k, _, _ in records),
        "by_status": dict(sorted(statuses.items())),
        "errors_5xx": sum(1 for _, o, _ in answered if o >= 500),
        "dropped": len(records) - len(answered),
        "unexpected_status": sum(1 for k, o, _ in answered if o != expected[k].expected),
        "latency_ms": {
            "all": latency_ms([s for _, _, s in answered]),
            "valid": latency_ms([s for k, _, s in answered if expected[k].valid]),
            "malformed": latency_ms([s for k, _, s in answered if not expected[k].valid]),
        },
        "by_kind": by_kind,
    }


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def render(report: dict[str, Any]) -> str:
    """The Markdown section for ``retrieval.md``."""
    meta, r = report["meta"], report["results"]
    lat = r["latency_ms"]
    lines = [
        SECTION_BEGIN,
        f"## Load: {meta['clients']} concurrent clients, valid and malformed requests",
        "",
        f"Command: `{meta['command']}`  ",
        f"Machine: {meta['machine']}  ",
        f"Date: {meta['date']}  ",
        f"Server: {meta['server']}. {meta['clients']} concurrent clients (one asyncio process, "
        f"each sending its next request when the last is answered) for {r['wall_s']:.0f} s; "
        f"{r['malformed_requests'] / max(r['requests'], 1):.0%} of the requests malformed.",
    ]
    if meta.get("note"):
        lines.append(f"Note: {meta['note']}")
    lines += [
        "",
        f"**{r['requests']} requests ({r['requests_per_s']:.0f}/s): {r['errors_5xx']} answered "
        f"5xx, {r['dropped']} dropped, {r['unexpected_status']} with a status other than the "
        f"expected one.** Latency p50 / p99: {lat['all'].get('p50', 0):.1f} / "
        f"{lat['all'].get('p99', 0):.1f} ms overall, {lat['valid'].get('p50', 0):.1f} / "
        f"{lat['valid'].get('p99', 0):.1f} ms valid, {lat['malformed'].get('p50', 0):.1f} / "
        f"{lat['malformed'].get('p99', 0):.1f} ms malformed.",
        "",
        "| request kind | sent | expected | got | p50 (ms) | p99 (ms) |",
        "|---|---|---|---|---|---|",
    ]
    for name, k in r["by_kind"].items():
        got = ", ".join(f"{s}: {n}" for s, n in sorted(k["statuses"].items())) or "–"
        kl = k["latency_ms"]
        lines.append(
            f"| {name} | {k['requests']} | {k['expected']} | {got} | "
            f"{kl.get('p50', 0):.1f} | {kl.get('p99', 0):.1f} |"
        )
    lines += [
        "",
        "Answers by status: " + ", ".join(f"{s}: {n}" for s, n in r["by_status"].items()) + ". "
        "No peer server was measured here (none is installed); `--url` runs the same mix against "
        "one. Figures from `python3 tools/bench/retrieval_load.py`, also in "
        "[retrieval_load.json](retrieval_load.json).",
        SECTION_END,
    ]
    return "\n".join(lines)


def write_section(md: Path, section: str) -> None:
    """Replace the load-test section of ``md`` (or append it), keeping the rest of the file."""
    text = md.read_text() if md.exists() else "# Retrieval benchmark\n"
    if SECTION_BEGIN in text and SECTION_END in text:
        head, rest = text.split(SECTION_BEGIN, 1)
        text = head + section + rest.split(SECTION_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    md.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--timeout", type=float, default=60.0, help="per-request client timeout")
    parser.add_argument("--url", default=None, help="drive this server instead of starting one")
    parser.add_argument("--note", default="", help="a line for the report (e.g. other load)")
    parser.add_argument("--out", default=str(REPO / "docs" / "benchmarks" / "retrieval_load.json"))
    parser.add_argument("--md", default=str(REPO / "docs" / "benchmarks" / "retrieval.md"))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="seekrl-load-") as tmp:
        proc = None
        url = args.url
        if url is None:
            port = free_port()
            proc = start_server(port, Path(tmp))
            url = f"http://127.0.0.1:{port}"
        try:
            records, wall = asyncio.run(drive(url, args.clients, args.seconds, args.timeout))
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=30)
        server_log = (Path(tmp) / "server.log").read_text() if proc is not None else ""
    results = summarize(records, wall)
    if proc is not None:
        results["server_log_tracebacks"] = server_log.count("Traceback")
    meta = {
        "command": shlex.join(["python3", "tools/bench/retrieval_load.py", *sys.argv[1:]]),
        "machine": f"{cpu_model()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "server": (
            f"seekrl-serve, BM25 over the {len(DOCS)}-document test corpus, "
            f"max_queries={MAX_QUERIES}, max_body_bytes={MAX_BODY_BYTES}"
            if args.url is None
            else f"{args.url} (external)"
        ),
        "clients": args.clients,
        "seconds": args.seconds,
        "note": args.note,
        "mix": {k.name: {"weight": k.weight, "expected": k.expected} for k in KINDS},
    }
    report = {"meta": meta, "results": results}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    section = render(report)
    write_section(Path(args.md), section)
    print(section)
    if results["errors_5xx"] or results["dropped"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
