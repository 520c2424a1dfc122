"""The retrieval server: Search-R1's /retrieve contract, /document, /health, and every error path."""

from __future__ import annotations

import json
import logging
import threading
import urllib.request

import httpx
import pytest

from framework.retrieval.server import BackgroundServer, create_app, is_loopback, serve
from framework.retrieval.server_guard import (
    MAX_JSON_DEPTH,
    body_problem,
    error_response,
    json_depth,
)
from framework.retrieval.types import QueryError, QueryLimits, check_request, document_key
from tests.unit.retrieval.server_fakes import (
    DEFAULT_TOPK,
    EXPLODE,
    LIMITS,
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


def test_backend_exception_is_500_with_a_logged_request_id(client, caplog):
    with caplog.at_level(logging.ERROR, logger="framework.retrieval.server"):
        r = retrieve(client, {"queries": [EXPLODE]})
    assert r.status_code == 500
    body = r.json()
    request_id = body["request_id"]
    assert body["type"] == "RuntimeError"
    assert body["error"].startswith(
        f"RuntimeError: index shard 3 is corrupt (request {request_id};"
    )
    [record] = [rec for rec in caplog.records if request_id in rec.getMessage()]
    assert record.exc_info is not None and record.exc_info[0] is RuntimeError
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


# -- hardening: every client mistake is a 4xx about the real problem; 5xx only for server faults ---


def post_raw(client: httpx.Client, path: str, body: bytes) -> httpx.Response:
    """POST hand-built bytes, as a client with its own JSON encoder (or a broken one) would."""
    return client.post(path, content=body, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (
            b'{"queries": ["\\ud800 abc"], "topk": 3}',
            "[request.queries.0] got '\\ud800 abc', which is not valid UTF-8 text "
            "(lone surrogate '\\ud800' at position 0)",
        ),
        (
            b'{"queries": ["fine", "ab\\udfff"]}',
            "[request.queries.1] got 'ab\\udfff', which is not valid UTF-8 text "
            "(lone surrogate '\\udfff' at position 2)",
        ),
    ],
)
def test_query_that_is_not_utf8_is_400(client, body, needle):
    r = post_raw(client, "/retrieve", body)
    assert r.status_code == 400, r.text
    assert r.json()["type"] == "QueryError"
    assert needle in r.json()["error"]
    assert_alive(client)


def test_a_surrogate_pair_is_valid_text(client):
    r = post_raw(client, "/retrieve", b'{"queries": ["Paris \\ud83d\\ude00"], "topk": 1}')
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("field", ["id", "title"])
def test_document_key_that_is_not_utf8_is_400(client, field):
    r = post_raw(client, "/document", b'{"%s": "Nile \\ud800"}' % field.encode())
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert f"[request.{field}] got 'Nile \\ud800', which is not valid UTF-8 text" in error
    assert "position 5" in error
    assert_alive(client)


@pytest.mark.parametrize("path", ["/retrieve", "/document"])
def test_body_that_is_not_utf8_is_400(client, path):
    r = post_raw(client, path, '{"queries": ["café"]}'.encode("latin-1"))
    assert r.status_code == 400, r.text
    assert r.json()["type"] == "InvalidEncoding"
    error = r.json()["error"]
    assert "[request] got a body that is not UTF-8 text (byte 0xe9 at offset 17" in error
    assert "route" not in error
    assert_alive(client)


def test_utf8_body_with_a_bom_is_accepted(client):
    r = post_raw(client, "/retrieve", b'\xef\xbb\xbf{"queries": ["who wrote hamlet"], "topk": 1}')
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 1500], ids=["over-limit", "recursion"])
def test_json_nested_too_deeply_is_400(client, depth):
    body = b'{"queries": ' + b"[" * depth + b"]" * depth + b"}"
    r = post_raw(client, "/retrieve", body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert f"got JSON nested more than {MAX_JSON_DEPTH} levels deep" in error
    assert "route" not in error
    assert_alive(client)


def test_json_at_the_depth_limit_is_validated_not_refused(client):
    depth = MAX_JSON_DEPTH - 1  # plus the enclosing object
    r = post_raw(client, "/retrieve", b'{"queries": ' + b"[" * depth + b"]" * depth + b"}")
    assert r.status_code == 422, r.text
    assert "[request.queries.0]" in r.json()["error"]


def test_too_many_queries_names_the_setting(client):
    r = retrieve(client, {"queries": ["a"] * (LIMITS.max_queries + 1)})
    assert r.status_code == 400
    error = r.json()["error"]
    assert f"got {LIMITS.max_queries + 1} queries; expected at most {LIMITS.max_queries}" in error
    assert "retriever.limits.max_queries=" in error


def test_oversized_body_names_the_setting(client):
    r = retrieve(client, {"queries": ["capital"] * 1000})
    assert r.status_code == 413
    assert "max_body_bytes" in r.json()["error"]


#: hand-built bodies no well-behaved client sends; each must get a JSON 4xx, never a 5xx
MALFORMED = [
    ("/retrieve", b"null"),
    ("/retrieve", b"[]"),
    ("/retrieve", b'"who wrote hamlet"'),
    ("/retrieve", b"{"),
    ("/retrieve", b"\xff\xfe{\x00}\x00"),
    ("/retrieve", b"\x00"),
    ("/retrieve", b'{"queries": null}'),
    ("/retrieve", b'{"queries": [null]}'),
    ("/retrieve", b'{"queries": [["a"]]}'),
    ("/retrieve", b'{"queries": {"a": 1}}'),
    ("/retrieve", b'{"queries": ["a"], "topk": 1e999}'),
    ("/retrieve", b'{"queries": ["a"], "topk": NaN}'),
    ("/retrieve", b'{"queries": ["a"], "topk": 99999999999999999999999999}'),
    ("/retrieve", b'{"queries": ["a"], "topk": "3"}'),
    ("/retrieve", b'{"queries": ["a"], "return_scores": []}'),
    ("/retrieve", b'{"queries": ["\\ud800"]}'),
    ("/retrieve", b'{"queries": ["' + b"x" * 3000 + b'"]}'),
    ("/retrieve", b'{"queries": ["a"]} trailing'),
    ("/document", b"null"),
    ("/document", b'{"id": null, "title": null}'),
    ("/document", b'{"id": ["nile"]}'),
    ("/document", b'{"title": "\\udfff"}'),
    ("/document", b'{"id": "nile", "extra": {"deep": [[[[1]]]]}}'),
]


@pytest.mark.parametrize(("path", "body"), MALFORMED)
def test_malformed_requests_are_4xx_json(client, path, body):
    r = post_raw(client, path, body)
    assert 400 <= r.status_code < 500, r.text
    assert set(r.json()) == {"error", "type"} and r.json()["error"].startswith("[")


def test_unexpected_exception_is_500_with_a_logged_request_id(caplog):
    """A fault outside the backend (here a route that raises) still answers JSON with an id."""
    app = create_app(FakeRetriever())

    def boom() -> None:
        raise KeyError("settings")

    app.add_api_route("/boom", boom, methods=["GET"])
    with (
        caplog.at_level(logging.ERROR, logger="framework.retrieval.server"),
        BackgroundServer(app) as url,
        httpx.Client(base_url=url, timeout=TIMEOUT) as c,
    ):
        r = c.get("/boom")
        assert r.status_code == 500
        body = r.json()
        assert body["type"] == "KeyError" and body["request_id"] in body["error"]
        [record] = [rec for rec in caplog.records if body["request_id"] in rec.getMessage()]
        assert "GET /boom" in record.getMessage() and record.exc_info[0] is KeyError
        assert c.get("/health").status_code == 200


@pytest.fixture(scope="module")
def default_client():
    """A server with the default limits (4096 queries, 1 MB bodies)."""
    fake = FakeRetriever(limits=QueryLimits())
    with (
        BackgroundServer(create_app(fake)) as url,
        httpx.Client(base_url=url, timeout=30.0) as c,
    ):
        yield c


def test_default_limit_takes_search_r1_batches(default_client):
    """Search-R1's training script sends up to 2,560 queries in one request."""
    assert QueryLimits().max_queries >= 2560
    r = retrieve(default_client, {"queries": [f"Paris {i}" for i in range(2560)], "topk": 1})
    assert r.status_code == 200, r.text[:300]
    assert len(r.json()["result"]) == 2560


def test_integer_too_long_for_python_is_400(default_client):
    r = post_raw(default_client, "/retrieve", b'{"queries": ["a"], "topk": ' + b"9" * 5000 + b"}")
    assert r.status_code == 400, r.text
    assert "not valid JSON" in r.json()["error"] and "digits" in r.json()["error"]


# -- the checks as pure functions -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "kind", "needle"),
    [
        (b'{"queries": ["a"]}', None, None),
        (b'\xef\xbb\xbf{"queries": ["a"]}', None, None),
        (b'{"queries": ["' + b"[" * 100 + b'"]}', None, None),  # brackets inside a string
        (b"\xc3(", "InvalidEncoding", "byte 0xc3 at offset 0"),
        (b'{"queries": [', "InvalidJSON", "not valid JSON (Expecting value at line 1 column 14)"),
        (b"[" * 2000 + b"]" * 2000, "InvalidJSON", "nested more than"),
    ],
)
def test_body_problem(body, kind, needle):
    problem = body_problem(body, "{...}")
    if kind is None:
        assert problem is None
    else:
        assert problem is not None and problem[0] == kind and needle in problem[1]


@pytest.mark.parametrize(
    ("value", "depth"),
    [(1, 0), ("s", 0), ([], 1), ({}, 1), ([[]], 2), ({"a": [1, {"b": []}]}, 4)],
)
def test_json_depth(value, depth):
    assert json_depth(value, 5) == depth


def test_json_depth_stops_counting_past_the_limit():
    assert json_depth(json.loads("[" * 50 + "]" * 50), 5) == 6


def test_error_response_renders_text_that_is_not_utf8():
    response = error_response(400, "got '\ud800'", "QueryError")
    assert json.loads(response.body)["error"] == "got '\\ud800'"


def test_in_process_checks_refuse_text_that_is_not_utf8():
    with pytest.raises(
        QueryError, match=r"query 1, which is not valid UTF-8 text \(lone surrogate"
    ):
        check_request(["ok", "x\ud800"], 1, QueryLimits())
    with pytest.raises(QueryError, match="title that is not valid UTF-8 text"):
        document_key(None, "\udc80")
