"""The HTTP retriever: round trip through the real server, retries, error mapping, config."""

from __future__ import annotations

import dataclasses
import socket
import time

import httpx
import pytest

from framework.config import ConfigError
from framework.registry import BUILTIN_MODULES, RETRIEVERS
from framework.registry.protocols import Retriever
from framework.retrieval.http import HttpRetriever, HttpRetrieverConfig, server_base
from framework.retrieval.types import DocumentNotFound, QueryError, QueryLimits, RetrievalError
from framework.types import Document, Hit
from tests.unit.retrieval.server_fakes import EXPLODE, running_server


@pytest.fixture(scope="module")
def server():
    with running_server() as (url, fake):
        yield url, fake


@pytest.fixture(scope="module")
def remote(server):
    cfg = HttpRetrieverConfig(name="http", url=server[0], timeout_s=5, retries=2, backoff_s=0.01)
    with HttpRetriever(cfg=cfg) as r:
        yield r


def make(transport: httpx.MockTransport, **kw) -> HttpRetriever:
    cfg = HttpRetrieverConfig(name="http", url="http://127.0.0.1:9", backoff_s=0.0, **kw)
    return HttpRetriever(cfg=cfg, transport=transport)


def counting(handler):
    """A mock transport and the list of requests it saw."""
    seen: list[httpx.Request] = []

    def wrapped(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request, len(seen))

    return httpx.MockTransport(wrapped), seen


# -- against the real server ----------------------------------------------------------------------


def test_is_a_retriever(remote):
    assert isinstance(remote, Retriever)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_round_trip_equals_the_backend(remote, server, k):
    queries = ["capital of France", "who wrote hamlet", "Nile river Egypt", "Nobel Prize physics"]
    assert remote.search(queries, k) == server[1].search(queries, k)


def test_document_round_trip(remote, server):
    assert remote.document(doc_id="paris") == server[1].document(doc_id="paris")
    assert remote.document(title="hamlet") == Document(
        "hamlet", "Hamlet", "Hamlet is a tragedy written by William Shakespeare."
    )
    with pytest.raises(DocumentNotFound, match="atlantis"):
        remote.document(doc_id="atlantis")
    with pytest.raises(QueryError, match="exactly one"):
        remote.document()


def test_server_side_400_becomes_query_error(server):
    """The client's limits are looser than the server's: the server's message comes back."""
    cfg = HttpRetrieverConfig(name="http", url=server[0], timeout_s=5, limits=QueryLimits(max_k=50))
    with (
        HttpRetriever(cfg=cfg) as r,
        pytest.raises(QueryError, match=r"k=6; expected an integer in \[1, 5\]"),
    ):
        r.search(["Paris"], 6)


def test_backend_failure_becomes_retrieval_error(remote):
    with pytest.raises(RetrievalError, match="RuntimeError: index shard 3 is corrupt"):
        remote.search([EXPLODE], 1)
    assert remote.search(["Paris"], 1)[0][0].title == "Paris"


def test_health(remote):
    assert remote.health()["backend"] == "FakeRetriever"


def test_unreachable_server_names_the_url_and_the_fix():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    cfg = HttpRetrieverConfig(name="http", url=url, timeout_s=2, retries=2, backoff_s=0.01)
    start = time.monotonic()
    with HttpRetriever(cfg=cfg) as r, pytest.raises(RetrievalError) as info:
        r.search(["Paris"], 1)
    assert time.monotonic() - start < 5
    msg = str(info.value)
    assert f"cannot reach {url}/retrieve after 2 attempts (ConnectError" in msg
    assert "seekrl-serve" in msg and "retriever.url" in msg


# -- retries and error mapping (mock transport) ---------------------------------------------------

OK = {"result": [[{"document": {"id": "7", "contents": '"T"\nbody'}, "score": 0.5}]]}


def test_5xx_is_retried_then_succeeds():
    transport, seen = counting(
        lambda req, n: (
            httpx.Response(503, json={"error": "busy"}) if n == 1 else httpx.Response(200, json=OK)
        )
    )
    with make(transport) as r:
        assert r.search(["q"], 1) == [[Hit("7", "7", "T", "body", 0.5)]]
    assert len(seen) == 2


def test_5xx_every_time_gives_up_after_the_attempts():
    transport, seen = counting(
        lambda req, n: httpx.Response(500, json={"error": "ValueError: bad"})
    )
    with (
        make(transport, retries=3) as r,
        pytest.raises(RetrievalError, match=r"failed after 3 attempts.*ValueError: bad"),
    ):
        r.search(["q"], 1)
    assert len(seen) == 3


def test_timeouts_are_retried_and_reported():
    def handler(req, n):
        raise httpx.ReadTimeout("timed out", request=req)

    transport, seen = counting(handler)
    with (
        make(transport, retries=2) as r,
        pytest.raises(RetrievalError, match=r"no answer from .*timeout_s"),
    ):
        r.search(["q"], 1)
    assert len(seen) == 2


def test_400_is_not_retried():
    transport, seen = counting(
        lambda req, n: httpx.Response(400, json={"error": "[retriever.search] bad k"})
    )
    with make(transport) as r, pytest.raises(QueryError, match="bad k"):
        r.search(["q"], 1)
    assert len(seen) == 1


def test_invalid_requests_fail_before_sending():
    transport, seen = counting(lambda req, n: httpx.Response(200, json=OK))
    with make(transport) as r:
        too_many = ["q"] * (QueryLimits().max_queries + 1)
        for queries, k in [([""], 1), (["q"], 0), ("q", 1), (too_many, 1), (["q\ud800"], 1)]:
            with pytest.raises(QueryError):
                r.search(queries, k)
    assert seen == []


def test_request_body_is_search_r1s():
    transport, seen = counting(lambda req, n: httpx.Response(200, json=OK))
    with make(transport) as r:
        r.search(["q"], 1)
    import json

    assert json.loads(seen[0].content) == {"queries": ["q"], "topk": 1, "return_scores": True}
    assert seen[0].url.path == "/retrieve"


@pytest.mark.parametrize(
    ("url", "posted"),
    [
        ("http://127.0.0.1:9", "http://127.0.0.1:9/retrieve"),
        ("http://127.0.0.1:9/", "http://127.0.0.1:9/retrieve"),
        # what Search-R1's users paste (its retrieval_server.py's endpoint), with or without a /
        ("http://127.0.0.1:9/retrieve", "http://127.0.0.1:9/retrieve"),
        ("http://127.0.0.1:9/retrieve/", "http://127.0.0.1:9/retrieve"),
        # a server behind a proxy keeps its path prefix
        ("https://search.example/api/retrieve", "https://search.example/api/retrieve"),
        ("  http://127.0.0.1:9/api/  ", "http://127.0.0.1:9/api/retrieve"),
    ],
)
def test_an_endpoint_url_is_read_as_its_server(url, posted):
    """A pasted ``.../retrieve`` URL posts to ``/retrieve``, never to ``/retrieve/retrieve``."""
    transport, seen = counting(lambda req, n: httpx.Response(200, json=OK))
    cfg = HttpRetrieverConfig(name="http", url=url, backoff_s=0.0)
    with HttpRetriever(cfg=cfg, transport=transport) as r:
        r.search(["q"], 1)
    assert str(seen[0].url) == posted
    assert r.base_url == server_base(url) == posted.removesuffix("/retrieve")


def test_parses_plain_search_r1_servers():
    """Only ``id`` and ``contents`` (Search-R1's corpus rows), with or without scores."""
    bare = {"result": [[{"id": "12#3", "contents": '"A title"\nline one\nline two'}]]}
    transport, _ = counting(lambda req, n: httpx.Response(200, json=bare))
    with make(transport) as r:
        assert r.search(["q"], 1) == [[Hit("12#3", "12", "A title", "line one\nline two", 0.0)]]


@pytest.mark.parametrize(
    "body",
    [
        {"results": []},
        {"result": "nope"},
        {"result": [[{"document": {"id": "x"}}]]},
        {"result": [[], []]},
    ],
)
def test_malformed_answers_are_retrieval_errors(body):
    transport, _ = counting(lambda req, n: httpx.Response(200, json=body))
    with make(transport) as r, pytest.raises(RetrievalError, match="expected Search-R1's answer"):
        r.search(["q"], 1)


def test_document_404_without_marker_means_no_endpoint():
    """Search-R1's own server has no /document: say so rather than 'not found'."""
    transport, _ = counting(lambda req, n: httpx.Response(404, json={"detail": "Not Found"}))
    with make(transport) as r, pytest.raises(RetrievalError, match="/retrieve only"):
        r.document(doc_id="x")


def test_close_closes_the_pool():
    transport, _ = counting(lambda req, n: httpx.Response(200, json=OK))
    r = make(transport)
    with r:
        pass
    with pytest.raises(RuntimeError):
        r.search(["q"], 1)


# -- config and registry --------------------------------------------------------------------------


def test_default_config_is_valid():
    assert HttpRetrieverConfig(name="http").problems() == []


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"url": "127.0.0.1:8000"}, "url"),
        ({"url": "ftp://host"}, "url"),
        ({"url": "http://"}, "url"),
        ({"url": ""}, "url"),
        ({"url": "localhost:8000/retrieve"}, "url"),
        ({"url": "http://127.0.0.1:80x0/retrieve"}, "url"),
        ({"url": "http://127.0.0.1:8000/retrieve?topk=3"}, "url"),
        ({"url": "http://127.0.0.1:8000/health"}, "url"),
        ({"url": "http://127.0.0.1:8000/document/"}, "url"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"retries": 0}, "retries"),
        ({"backoff_s": -1}, "backoff_s"),
        ({"pool_size": 0}, "pool_size"),
    ],
)
def test_config_problems(change, path):
    cfg = dataclasses.replace(HttpRetrieverConfig(name="http"), **change)
    problems = cfg.problems()
    assert [p.path for p in problems] == [path]
    assert str(problems[0]).startswith(f"[{path}] got ")
    with pytest.raises(ConfigError, match=rf"\[retriever\.{path}\]"):
        HttpRetriever(cfg=cfg)


def test_a_malformed_url_says_what_to_write():
    cfg = dataclasses.replace(HttpRetrieverConfig(name="http"), url="127.0.0.1:8000/retrieve")
    with pytest.raises(ConfigError) as err:
        HttpRetriever(cfg=cfg)
    message = str(err.value)
    assert "[retriever.url] got '127.0.0.1:8000/retrieve'; expected an http:// or https:// URL" in (
        message
    )
    assert "Fix: write retriever.url as http://HOST:PORT" in message


def test_registered_as_http():
    """Importing the module registers it; load_components imports the module."""
    assert "framework.retrieval.http" in BUILTIN_MODULES
    entry = RETRIEVERS.get("http")
    assert entry.target is HttpRetriever and entry.config_cls is HttpRetrieverConfig
    with RETRIEVERS.bind(HttpRetrieverConfig(name="http"))() as r:
        assert isinstance(r, HttpRetriever)
