"""Request checks of the retrieval server: no client mistake reaches the backend or gets a 5xx.

:class:`RequestGuard` (ASGI middleware) refuses oversized bodies (413) and bodies that are not UTF-8,
not JSON or nested too deeply (400, :func:`body_problem`), and turns any exception the app lets
through into a 500 with a request id that the log repeats with the traceback (:func:`server_fault`).
:func:`check_queries` and :func:`check_text` name the request field of a query that is not UTF-8 or
of too many queries; :func:`validation_message` words pydantic's errors on a body of the wrong shape.
"""

from __future__ import annotations

import json
import logging
import reprlib
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from fastapi.responses import JSONResponse

from framework.retrieval.types import QueryError, QueryLimits, utf8_problem

#: one logger for the whole server (records name the request id)
log = logging.getLogger("framework.retrieval.server")

RETRIEVE_EXAMPLE = '{"queries": ["who wrote hamlet"], "topk": 3, "return_scores": true}'
DOCUMENT_EXAMPLE = '{"id": "<doc id>"} or {"title": "<title>"}'
ROUTES = "POST /retrieve, POST /document, GET /health"
JSON_ROUTES = {"/retrieve": RETRIEVE_EXAMPLE, "/document": DOCUMENT_EXAMPLE}
#: request bodies are two levels deep; deeper JSON is refused before it is validated
MAX_JSON_DEPTH = 32
#: What each request field should hold, for validation messages.
_EXPECTED = {
    "queries": "a list of query strings",
    "topk": "an integer (or null for the server default)",
    "return_scores": "true or false",
    "id": "a document id string",
    "title": "a document title string",
}


def error_response(
    status: int, message: str, kind: str, request_id: str | None = None
) -> JSONResponse:
    """The JSON error every failure answers with (``request_id`` for server faults)."""
    # a message that quotes unencodable input must still render as UTF-8
    content = {"error": message.encode("utf-8", "backslashreplace").decode("utf-8"), "type": kind}
    if request_id is not None:
        content["request_id"] = request_id
    return JSONResponse(content, status_code=status)


def new_request_id() -> str:
    """A short random id that ties a 500 answer to its log record."""
    return uuid.uuid4().hex[:12]


def server_fault(exc: BaseException, where: str) -> JSONResponse:
    """Log ``exc`` with its traceback under a new request id; the 500 answer that names the id."""
    request_id = new_request_id()
    log.error("request %s: %s failed", request_id, where, exc_info=exc)
    msg = (
        f"{type(exc).__name__}: {exc} (request {request_id}; the server log has the traceback "
        "under this id)"
    )
    return error_response(500, msg, type(exc).__name__, request_id)


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother = 3, 6, 6, 60, 60


def _shorten(value: Any, limit: int = 80) -> str:
    """A bounded repr: cheap for a huge list, safe for deep nesting, ASCII escapes for surrogates."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def json_depth(value: Any, limit: int) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0, ``[]`` is 1), counted up to ``limit + 1``."""
    depth, level = 0, [value]
    while depth <= limit:
        level = [v for v in level if isinstance(v, (list, dict))]
        if not level:
            break
        depth += 1
        level = [c for v in level for c in (v.values() if isinstance(v, dict) else v)]
    return depth


def body_problem(body: bytes, example: str) -> tuple[str, str] | None:
    """``(type, message)`` saying why ``body`` is not a JSON document we can validate, or None.

    The body must be UTF-8 (a BOM is allowed), valid JSON, and nested at most
    :data:`MAX_JSON_DEPTH` levels.
    """
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return "InvalidEncoding", (
            f"[request] got a body that is not UTF-8 text (byte 0x{body[exc.start]:02x} at offset "
            f"{exc.start}: {exc.reason}); expected JSON encoded as UTF-8, such as {example}. "
            "Fix: encode the body as UTF-8 (requests: json=...)."
        )
    deep = (
        f"[request] got JSON nested more than {MAX_JSON_DEPTH} levels deep; expected a JSON "
        f"object such as {example}. Fix: send that object itself, not nested in arrays or objects."
    )
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return "InvalidJSON", (
            f"[request] got a body that is not valid JSON ({exc.msg} at line {exc.lineno} "
            f"column {exc.colno}); expected a JSON object such as {example}. "
            "Fix: send the body as JSON (requests: json=...)."
        )
    except RecursionError:
        return "InvalidJSON", deep
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        return "InvalidJSON", (
            f"[request] got a body that is not valid JSON ({exc}); expected a JSON object such "
            f"as {example}. Fix: send the body as JSON (requests: json=...)."
        )
    brackets = body.count(b"[") + body.count(b"{")  # fewer cannot nest that deep: skip the walk
    if brackets > MAX_JSON_DEPTH and json_depth(value, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        return "InvalidJSON", deep
    return None


def validation_message(path: str, errors: Sequence[dict[str, Any]]) -> tuple[int, str]:
    """``(status, message)`` for pydantic errors on a request body (400 when it is not JSON)."""
    example = DOCUMENT_EXAMPLE if path == "/document" else RETRIEVE_EXAMPLE
    lines = []
    for err in errors:
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        kind = err.get("type", "")
        if kind == "json_invalid":
            reason = (err.get("ctx") or {}).get("error", "malformed JSON")
            return 400, (
                f"[request] got a body that is not valid JSON ({reason}); expected a JSON object "
                f"such as {example}. Fix: send the body as JSON (requests: json=...)."
            )
        if not loc:
            got = "an empty body" if kind == "missing" else _shorten(err.get("input"))
            lines.append(
                f"[request] got {got}; expected a JSON object such as {example}. "
                "Fix: send an object with those keys."
            )
            continue
        field = loc[0]
        where = "request." + ".".join(loc)
        if kind == "missing":
            lines.append(
                f"[{where}] got nothing; expected {_EXPECTED.get(field, 'a value')}. "
                f"Fix: add it, e.g. {example}."
            )
        elif kind == "extra_forbidden":
            lines.append(
                f"[{where}] got {_shorten(err.get('input'))}; expected only the keys of "
                f"{example}. Fix: remove '{field}'."
            )
        else:
            expected = _EXPECTED.get(field, "a valid value")
            if len(loc) > 1:  # an element of a list
                expected = "a string"
            lines.append(
                f"[{where}] got {_shorten(err.get('input'))}; expected {expected}. "
                f"Fix: send e.g. {example}."
            )
    return 422, "\n".join(lines) or f"[request] invalid body; expected e.g. {example}."


def check_text(where: str, text: str | None) -> None:
    """Refuse request text that cannot be encoded as UTF-8 (backends and JSON could not use it).

    Raises:
        QueryError: naming ``where`` (e.g. ``request.queries.0``) and the offending position.
    """
    problem = None if text is None else utf8_problem(text)
    if problem:
        raise QueryError(
            f"[{where}] got {_shorten(text)}, which is not valid UTF-8 text ({problem}); expected "
            "text that encodes as UTF-8. Fix: send valid Unicode (a JSON \\ud800-\\udfff escape "
            "must be half of a surrogate pair)."
        )


def check_queries(queries: Sequence[str], limits: QueryLimits) -> None:
    """The checks of :func:`check_request` that name a request field and the server's setting.

    Raises:
        QueryError: too many queries, or one that is not valid UTF-8 text.
    """
    if len(queries) > limits.max_queries:
        raise QueryError(
            f"[request.queries] got {len(queries)} queries; expected at most {limits.max_queries} "
            "per request (the server's retriever.limits.max_queries). Fix: split the batch, or "
            "restart the server with a higher limit (seekrl-serve "
            f"retriever.limits.max_queries={len(queries)})."
        )
    for i, query in enumerate(queries):
        check_text(f"request.queries.{i}", query)


class RequestGuard:
    """ASGI middleware in front of the app; no client mistake gets past it as a 5xx.

    - 413 for a body over ``max_bytes`` (declared or actual);
    - 400 for a body on a JSON route that is not UTF-8, not JSON or too deep (:func:`body_problem`);
    - JSON whatever the Content-Type says (so ``curl -d`` works);
    - 500 with a request id, logged with the traceback, for any exception the app lets through
      (instead of Starlette's plain-text "Internal Server Error").

    The body is read into memory (it is small by construction) and replayed to the app.
    """

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self._guard(scope, receive, tracked)
        except Exception as exc:
            where = f"{scope.get('method')} {scope.get('path')}"
            if started:  # too late for an answer; the server closes the connection
                log.error("%s failed after its answer started", where, exc_info=exc)
                raise
            await server_fault(exc, where)(scope, receive, send)

    async def _guard(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                await self._reject(scope, receive, send, 400, f"a Content-Length of {declared!r}")
                return
            if size > self.max_bytes:
                await self._reject(scope, receive, send, 413, f"a body of {size} bytes")
                return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                await self._reject(
                    scope, receive, send, 413, f"a body of more than {self.max_bytes} bytes"
                )
                return
        example = JSON_ROUTES.get(scope.get("path", ""))
        problem = body_problem(bytes(body), example) if body and example else None
        if problem is not None:
            await error_response(400, problem[1], problem[0])(scope, receive, send)
            return
        content_type = headers.get(b"content-type", b"")
        if body and b"json" not in content_type:
            scope = dict(scope)
            scope["headers"] = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
            scope["headers"].append((b"content-type", b"application/json"))
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                return await receive()  # waits for the disconnect
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    async def _reject(
        self, scope: dict, receive: Callable, send: Callable, status: int, got: str
    ) -> None:
        if status == 413:
            msg = (
                f"[request] got {got}; expected at most {self.max_bytes} bytes (the server's "
                "max_body_bytes). Fix: send fewer or shorter queries per request, or restart the "
                "server with a larger limit (seekrl-serve max_body_bytes=...)."
            )
            response = error_response(413, msg, "PayloadTooLarge")
        else:
            msg = f"[request] got {got}; expected a byte count. Fix: send a valid header."
            response = error_response(400, msg, "BadRequest")
        await response(scope, receive, send)
