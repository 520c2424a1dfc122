"""The retrieval server: Search-R1's /retrieve contract, /document, /health, and every error path."""

from __future__ import annotations

import json
import threading
import urllib.request

import httpx
import pytest

from framework.retrieval.server import BackgroundServer, create_app, is_loopback, serve
from framework.retrieval.types import QueryLimits
from tests.unit.retrieval.server_fakes import (
    DEFAULT_TOPK,
    EXPLODE,
    MAX_BODY_BYTES,
    PASSAGES,
    FakeRetriever,
    running_server,
)

TIMEOUT = 5.0


@pytest.fixture(scope="module")
def server():
    with running_server() as (url, fake):
        yield url, fake


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server[0], timeout=TIMEOUT) as c:
        yield c


def retrieve(client: httpx.Client, body: object) -> httpx.Response:
    return client.post("/retrieve", json=body)


def assert_alive(client: httpx.Client) -> None:
    """The server still answers a valid request correctly."""
    r = retrieve(client, {"queries": ["capital of France"], "topk": 1})
    assert r.status_code == 200, r.text
    assert r.json()["result"][0][0]["title"] == "Paris"


# -- the Search-R1 contract -----------------------------------------------------------------------


def test_retrieve_with_scores_has_search_r1_shape(client, server):
    queries = ["capital of France", "who wrote hamlet", "river in Egypt"]
    r = retrieve(client, {"queries": queries, "topk": 3, "return_scores": True})
    assert r.status_code == 200
    body = r.json()
    assert list(body) == ["result"]
    assert len(body["result"]) == 3
    expected = server[1].search(queries, 3)
    for items, hits in zip(body["result"], expected):
        assert len(items) == 3
        for item, hit in zip(items, hits):
            assert set(item) == {"document", "score"}
            assert isinstance(item["score"], float) and item["score"] == hit.score
            doc = item["document"]
            assert doc["id"] == hit.passage_id
            assert doc["contents"] == f'"{hit.title}"\n{hit.text}'
        scores = [i["score"] for i in items]
        assert scores == sorted(scores, reverse=True)
    assert body["result"][1][0]["document"]["id"] == "hamlet"


def test_retrieve_without_scores_returns_bare_documents(client):
    for body in (
        {"queries": ["Eiffel Tower"], "topk": 2},
        {"queries": ["Eiffel Tower"], "topk": 2, "return_scores": False},
    ):
        result = retrieve(client, body).json()["result"]
        assert len(result) == 1 and len(result[0]) == 2
        doc = result[0][0]
        assert "document" not in doc
        assert doc["id"] == "paris#1"
        assert doc["contents"] == '"Paris"\nThe Eiffel Tower stands in Paris on the Seine.'
        assert {"passage_id", "doc_id", "title", "text", "score"} <= set(doc)


@pytest.mark.parametrize(
    "body", [{"queries": ["Nobel Prize"]}, {"queries": ["Nobel Prize"], "topk": None}]
)
def test_default_topk(client, body):
    result = retrieve(client, body).json()["result"]
    assert len(result[0]) == DEFAULT_TOPK
    assert result[0][0]["doc_id"] == "curie"


def test_search_r1_and_verl_clients_work_unchanged(server):
    """Search-R1's generation.py and verl's search_r1_like_utils.py, logic kept verbatim."""
    try:
        import requests
    except ImportError:  # the same calls over urllib
        requests = _UrllibRequests()
    search_url = server[0] + "/retrieve"

    # Search-R1: LLMGenerationManager._batch_search / _passages2string
    def _batch_search(queries):
        payload = {"queries": queries, "topk": 3, "return_scores": True}
        return requests.post(search_url, json=payload, timeout=TIMEOUT).json()

    def _passages2string(retrieval_result):
        format_reference = ""
        for idx, doc_item in enumerate(retrieval_result):
            content = doc_item["document"]["contents"]
            title = content.split("\n")[0]
            text = "\n".join(content.split("\n")[1:])
            format_reference += f"Doc {idx + 1}(Title: {title}) {text}\n"
        return format_reference

    results = _batch_search(["who wrote hamlet", "Nile delta"])["result"]
    texts = [_passages2string(r) for r in results]
    assert texts[0].startswith(
        'Doc 1(Title: "Hamlet") Hamlet is a tragedy written by William Shakespeare.\n'
    )
    assert texts[1].startswith('Doc 1(Title: "Nile") The Nile delta meets the Mediterranean Sea.')

    # verl: call_search_api + perform_single_search_batch's parsing
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    payload = {"queries": ["Marie Curie"], "topk": 2, "return_scores": True}
    response = requests.post(search_url, headers=headers, json=payload, timeout=TIMEOUT)
    response.raise_for_status()
    raw_results = response.json().get("result", [])
    titles = []
    for retrieval in raw_results:
        for doc_item in retrieval:
            content = doc_item["document"]["contents"]
            titles.append(content.split("\n")[0])
    assert titles[0] == '"Marie Curie"' and len(titles) == 2


class _UrllibRequests:
    """``requests.post`` over urllib, for machines without requests."""

    class _Response:
        def __init__(self, status: int, data: bytes) -> None:
            self.status_code, self._data = status, data

        def json(self):
            return json.loads(self._data)

        def raise_for_status(self) -> None:
            assert self.status_code < 400

    def post(self, url, json=None, headers=None, timeout=None):
        import json as _json

        req = urllib.request.Request(
            url,
            data=_json.dumps(json).encode(),
            headers=headers or {"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return self._Response(resp.status, resp.read())


# -- /document and /health ------------------------------------------------------------------------


def test_document_by_id(client):
    r = client.post("/document", json={"id": "nile"})
    assert r.status_code == 200
    doc = r.json()["document"]
    assert doc["id"] == doc["doc_id"] == "nile"
    assert doc["title"] == "Nile"
    assert doc["text"] == f"{PASSAGES[3][3]} {PASSAGES[4][3]}"
    assert doc["contents"] == f'"Nile"\n{doc["text"]}'


@pytest.mark.parametrize("title", ["Marie Curie", "marie curie"])
def test_document_by_title(client, title):
    r = client.post("/document", json={"title": title})
    assert r.status_code == 200
    assert r.json()["document"]["doc_id"] == "curie"


def test_unknown_document_is_404(client):
    r = client.post("/document", json={"id": "atlantis"})
    assert r.status_code == 404
    assert "atlantis" in r.json()["error"]
    assert r.json()["type"] == "DocumentNotFound"
    assert_alive(client)


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({}, 400, "exactly one"),
        ({"id": "nile", "title": "Nile"}, 400, "exactly one"),
        ({"id": "  "}, 400, "non-empty"),
        ({"doc_id": "nile"}, 422, "request.doc_id"),
        ({"id": 5}, 422, "request.id"),
    ],
)
def test_bad_document_requests(client, body, status, needle):
    r = client.post("/document", json=body)
    assert r.status_code == status
    assert needle in r.json()["error"]
    assert_alive(client)


def test_health(client):
    body = client.get("/health").json()
    assert body["status"] == "ok"
    assert body["backend"] == "FakeRetriever"
    assert body["default_topk"] == DEFAULT_TOPK


def test_unknown_route_and_method_are_json_errors(client):
    r = client.get("/retrieve")
    assert r.status_code == 405 and "POST /retrieve" in r.json()["error"]
    r = client.post("/search", json={"queries": ["x"]})
    assert r.status_code == 404 and "POST /retrieve" in r.json()["error"]


# -- bad requests --------------------------------------------------------------------------------

BAD_BODIES = [
    ({"queries": [""]}, 400, "non-empty"),
    ({"queries": ["ok", "   "]}, 400, "query 1"),
    ({"queries": []}, 400, "no queries"),
    ({"queries": ["x" * 65]}, 400, "at most 64"),
    ({"queries": ["a", "b", "c", "d", "e"]}, 400, "at most 4"),
    ({"queries": ["a"], "topk": 0}, 400, "k=0"),
    ({"queries": ["a"], "topk": -2}, 400, "k=-2"),
    ({"queries": ["a"], "topk": 6}, 400, "k=6"),
    (
        {"queries": "capital of France"},
        422,
        "[request.queries] got 'capital of France'; expected a list",
    ),
    ({"topk": 3}, 422, "[request.queries] got nothing"),
    ({"queries": ["a", 7]}, 422, "[request.queries.1] got 7; expected a string"),
    ({"queries": ["a"], "topk": "three"}, 422, "[request.topk]"),
    ({"queries": ["a"], "topk": True}, 422, "[request.topk]"),
    ({"queries": ["a"], "topk": 2.5}, 422, "[request.topk]"),
    ({"queries": ["a"], "return_scores": "maybe"}, 422, "[request.return_scores]"),
    (["capital of France"], 422, "expected a JSON object"),
]


@pytest.mark.parametrize(("body", "status", "needle"), BAD_BODIES)
def test_bad_retrieve_requests(client, body, status, needle):
    r = retrieve(client, body)
    assert r.status_code == status, r.text
    assert needle in r.json()["error"]
    assert_alive(client)


def test_non_json_body_is_400(client):
    r = client.post(
        "/retrieve", content=b'{"queries": [nope', headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 400
    assert "not valid JSON" in r.json()["error"]
    assert_alive(client)


def test_empty_body_is_422(client):
    r = client.post("/retrieve")
    assert r.status_code == 422
    assert "got an empty body; expected a JSON object" in r.json()["error"]
    assert_alive(client)


def test_json_without_content_type_is_accepted(client):
    """``curl -d`` sends form encoding; the body is still read as JSON."""
    r = client.post(
        "/retrieve",
        content=b'{"queries": ["who wrote hamlet"], "topk": 1}',
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 200
    assert r.json()["result"][0][0]["id"] == "hamlet"


def test_oversized_body_is_413(client):
    body = {"queries": ["capital"] * 1000}
    r = retrieve(client, body)
    assert r.status_code == 413
    assert f"at most {MAX_BODY_BYTES} bytes" in r.json()["error"]
    assert_alive(client)


def test_oversized_streamed_body_is_413(client):
    """No Content-Length (chunked): the size actually read counts."""

    def chunks():
        yield b'{"queries": ['
        for _ in range(300):
            yield b'"capital of France", '
        yield b'"x"]}'

    r = client.post("/retrieve", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert_alive(client)


def test_backend_exception_is_500_and_server_stays_up(client):
    r = retrieve(client, {"queries": [EXPLODE]})
    assert r.status_code == 500
    assert r.json()["error"] == "RuntimeError: index shard 3 is corrupt"
    assert_alive(client)


def test_backend_calls_are_serialised():
    """Parallel requests never overlap inside the backend (the fake raises if they do)."""
    fake = FakeRetriever(delay_s=0.02)
    with running_server(fake) as (url, _), httpx.Client(base_url=url, timeout=TIMEOUT) as c:
        statuses: list[int] = []

        def hit() -> None:
            for _ in range(2):
                statuses.append(retrieve(c, {"queries": ["Paris"], "topk": 1}).status_code)

        threads = [threading.Thread(target=hit) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT)
    assert statuses == [200] * 8
    assert fake.calls == 8


# -- construction and serving ---------------------------------------------------------------------


def test_create_app_checks_its_arguments():
    with pytest.raises(ValueError, match="default_topk"):
        create_app(FakeRetriever(), default_topk=6, limits=QueryLimits(max_k=5))
    with pytest.raises(ValueError, match="max_body_bytes"):
        create_app(FakeRetriever(), max_body_bytes=0)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.7", "example.org"])
def test_serve_refuses_remote_hosts(host):
    with pytest.raises(ValueError, match=r"serve\.host.*allow_remote=True"):
        serve(FakeRetriever(), host, 0)
    with pytest.raises(ValueError, match="allow_remote"):
        BackgroundServer(create_app(FakeRetriever()), host, 0)


def test_is_loopback():
    assert all(map(is_loopback, ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.0.0.1", "example.org"]))


def test_bound_socket_is_tcp_so_accepted_connections_get_nodelay():
    # asyncio sets TCP_NODELAY on accepted sockets only when the listening socket's proto is
    # IPPROTO_TCP; with proto 0, Nagle plus delayed ACKs added ~40 ms to every response.
    import socket

    from framework.retrieval.server import _bind

    sock = _bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()
