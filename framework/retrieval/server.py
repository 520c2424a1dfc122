"""The retrieval HTTP server: any :class:`~framework.registry.protocols.Retriever` behind Search-R1's API.

Endpoints:

``POST /retrieve``
    Search-R1's contract, so its client and verl's search tool work unchanged. Body
    ``{"queries": [str, ...], "topk": int | null, "return_scores": bool}`` (``topk`` defaults to the
    server's ``default_topk``, ``return_scores`` to false). Answer ``{"result": [...]}`` with one list
    per query, best first, of ``{"document": DOC, "score": float}`` when ``return_scores`` is true,
    else of ``DOC``. ``DOC`` is :meth:`Hit.to_search_r1`: ``id``, ``contents`` (``"Title"`` on the
    first line, then the text), plus ``passage_id``, ``doc_id``, ``title``, ``text`` and ``score``.
``POST /document``
    ``{"id": str}`` or ``{"title": str}``; answer
    ``{"document": {"id", "doc_id", "title", "text", "contents"}}``.
``GET /health``
    ``{"status": "ok", "backend": <class name>, ...}``.

Every error is JSON ``{"error": message, "type": kind}``: 400 for an invalid request (the
:class:`QueryError` text: an empty, oversized or non-UTF-8 query, too many queries, a bad ``topk``;
or a body that is not UTF-8, not JSON, or nested too deeply: see :mod:`.server_guard`), 404 for an
unknown document or route, 413 for a body over ``max_body_bytes``, 422 for a body of the wrong shape
(naming the field and what was expected). A client's mistake never gets a 5xx. 500 is kept for
faults of the server: ``"<ExceptionType>: <message> (request <id>; ...)"`` when the backend fails,
and ``request_id`` in the body; the log has the same id with the traceback. The server keeps
answering after any of them. Backend calls run in FastAPI's thread pool, one at a time (backends
need not be thread-safe).

Limits are settings: ``retriever.limits.max_queries`` (default 4096, above the 2,560 queries
Search-R1's training script sends in one request), ``retriever.limits.max_query_chars``,
``retriever.limits.max_k`` and ``max_body_bytes``, e.g.
``seekrl-serve retriever.limits.max_queries=8192 max_body_bytes=4000000``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import math
import socket
import threading
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, Strict
from starlette.exceptions import HTTPException as StarletteHTTPException

from framework.registry.protocols import Retriever
from framework.retrieval.server_guard import (
    DOCUMENT_EXAMPLE,
    JSON_ROUTES,
    RETRIEVE_EXAMPLE,
    ROUTES,
    RequestGuard,
    check_queries,
    check_text,
    error_response,
    server_fault,
    validation_message,
)
from framework.retrieval.types import (
    DocumentNotFound,
    QueryError,
    QueryLimits,
    check_request,
    document_key,
)
from framework.types import Document, Hit

log = logging.getLogger(__name__)


class RetrieveRequest(BaseModel):
    """Body of ``POST /retrieve`` (Search-R1's ``QueryRequest``); unknown keys are ignored."""

    queries: list[str] = Field(description="the queries, one result list each")
    topk: Annotated[int, Strict()] | None = Field(
        default=None, description="passages per query; null or missing: the server default"
    )
    return_scores: bool = Field(default=False, description="wrap each passage with its score")


class DocumentRequest(BaseModel):
    """Body of ``POST /document``: exactly one of ``id`` and ``title``."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(default=None, description="document id (a hit's doc_id)")
    title: str | None = Field(default=None, description="exact, then case-insensitive, title")


def _render_hit(hit: Hit, with_score: bool) -> dict[str, Any]:
    doc = hit.to_search_r1()
    score = float(hit.score)  # numpy scalars are not JSON-serialisable
    doc["score"] = score
    return {"document": doc, "score": score} if with_score else doc


def _render_document(doc: Document) -> dict[str, Any]:
    return {
        "id": doc.doc_id,
        "doc_id": doc.doc_id,
        "title": doc.title,
        "text": doc.text,
        "contents": f'"{doc.title}"\n{doc.text}',
    }


def create_app(
    retriever: Retriever,
    *,
    default_topk: int = 3,
    max_body_bytes: int = 1_000_000,
    limits: QueryLimits | None = None,
) -> FastAPI:
    """A FastAPI app serving ``retriever`` (see the module docstring for the API).

    Args:
        retriever: the backend; its calls are serialised with a lock.
        default_topk: passages per query when a request gives no ``topk``.
        max_body_bytes: larger request bodies get 413 without being read further.
        limits: bounds on queries, query length and ``topk`` (default :class:`QueryLimits`).

    Raises:
        ValueError: ``default_topk`` outside ``[1, limits.max_k]`` or ``max_body_bytes < 1``.
    """
    limits = limits or QueryLimits()
    problems = [str(p) for p in limits.problems()]
    if isinstance(default_topk, bool) or not isinstance(default_topk, int):
        problems.append(f"[serve.default_topk] got {default_topk!r}; expected an integer.")
    elif not 1 <= default_topk <= limits.max_k:
        problems.append(
            f"[serve.default_topk] got {default_topk}; expected an integer in [1, {limits.max_k}]. "
            "Fix: lower default_topk or raise limits.max_k."
        )
    if max_body_bytes < 1:
        problems.append(f"[serve.max_body_bytes] got {max_body_bytes}; expected a number >= 1.")
    if problems:
        raise ValueError("\n".join(problems))

    backend = type(retriever).__name__
    lock = threading.Lock()
    app = FastAPI(
        title="seekrl retrieval server",
        description=f"Search-R1 compatible retrieval over a {backend} backend.",
    )
    app.add_middleware(RequestGuard, max_bytes=max_body_bytes)

    def guarded(work: Callable[[], Any]) -> JSONResponse:
        """Run ``work`` under the lock; map its exceptions to JSON errors."""
        try:
            with lock:
                content = work()
            return JSONResponse(content)  # renders here, so a bad value is a 500 below
        except QueryError as exc:
            return error_response(400, str(exc), "QueryError")
        except DocumentNotFound as exc:
            return error_response(404, str(exc), "DocumentNotFound")
        except Exception as exc:
            return server_fault(exc, f"retrieval backend {backend}")

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, msg = validation_message(request.url.path, exc.errors())
        return error_response(status, msg, "InvalidJSON" if status == 400 else "ValidationError")

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        got = f"{request.method} {request.url.path} ({exc.detail})"
        if exc.status_code in (404, 405):
            msg = f"[request] got {got}; expected one of {ROUTES}. Fix: use one of those routes."
        else:  # e.g. a body FastAPI could not parse after the guard accepted it
            example = JSON_ROUTES.get(request.url.path, RETRIEVE_EXAMPLE)
            msg = f"[request] got {got}; expected a JSON body such as {example}. Fix: send one."
        return error_response(exc.status_code, msg, "HTTPException")

    @app.post("/retrieve", response_model=None)
    def retrieve(req: RetrieveRequest) -> JSONResponse:
        """Search-R1's retrieval endpoint: top-``topk`` passages per query."""
        k = default_topk if req.topk is None else req.topk

        def work() -> dict[str, Any]:
            check_queries(req.queries, limits)
            queries = check_request(req.queries, k, limits)
            results = retriever.search(queries, k)
            if len(results) != len(queries):
                raise RuntimeError(
                    f"backend {backend} returned {len(results)} result lists for "
                    f"{len(queries)} queries"
                )
            rendered = [[_render_hit(h, req.return_scores) for h in hits] for hits in results]
            for hits in rendered:  # json would refuse NaN later with a vaguer message
                for h in hits:
                    if not math.isfinite(h["score"]):
                        raise ValueError(f"backend {backend} returned a score of {h['score']}")
            return {"result": rendered}

        return guarded(work)

    @app.post("/document", response_model=None)
    def document(req: DocumentRequest) -> JSONResponse:
        """The whole document with the given id or title."""

        def work() -> dict[str, Any]:
            if (req.id is None) == (req.title is None):
                raise QueryError(
                    f"[document] got id={req.id!r}, title={req.title!r}; expected exactly one of "
                    f"them. Fix: send {DOCUMENT_EXAMPLE}."
                )
            for field, value in (("id", req.id), ("title", req.title)):
                check_text(f"request.{field}", value)
            document_key(req.id, req.title)
            doc = retriever.document(doc_id=req.id, title=req.title)
            return {"document": _render_document(doc)}

        return guarded(work)

    @app.get("/health")
    def health() -> dict[str, Any]:
        """Liveness and the server's settings (does not touch the backend)."""
        return {
            "status": "ok",
            "backend": backend,
            "default_topk": default_topk,
            "max_body_bytes": max_body_bytes,
            "limits": dataclasses.asdict(limits),
        }

    return app


# -- running ------------------------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _check_host(host: str, allow_remote: bool) -> None:
    if not allow_remote and not is_loopback(host):
        raise ValueError(
            f"[serve.host] got {host!r}; expected a loopback address (127.0.0.1, ::1, localhost). "
            "The server has no authentication, so other machines could query it. Fix: bind "
            "127.0.0.1, or pass allow_remote=True if the network is trusted."
        )


def _bind(host: str, port: int) -> socket.socket:
    """A bound (not yet listening) TCP socket; ``port=0`` picks a free port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must be IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted connections only then, and
    # without it Nagle's algorithm and delayed ACKs add ~40 ms to every small response.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise OSError(
            f"[serve.port] cannot bind {host}:{port} ({exc}); expected a free port. "
            "Fix: choose another port, or stop the process that uses it."
        ) from exc
    return sock


def _url(sock: socket.socket, host: str) -> str:
    port = sock.getsockname()[1]
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    return f"http://{shown}:{port}"


def _uvicorn_server(app: FastAPI, log_level: str) -> Any:
    import uvicorn

    config = uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        timeout_keep_alive=30,  # longer than the client's keep-alive expiry (httpx: 5 s)
    )
    return uvicorn.Server(config)


def serve(
    retriever: Retriever,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    default_topk: int = 3,
    max_body_bytes: int = 1_000_000,
    limits: QueryLimits | None = None,
    allow_remote: bool = False,
    log_level: str = "warning",
) -> None:
    """Serve ``retriever`` with uvicorn until interrupted; prints the URL once bound.

    Raises:
        ValueError: ``host`` is not a loopback address and ``allow_remote`` is false.
        OSError: the port cannot be bound.
    """
    _check_host(host, allow_remote)
    app = create_app(
        retriever, default_topk=default_topk, max_body_bytes=max_body_bytes, limits=limits
    )
    sock = _bind(host, port)
    url = _url(sock, host)
    print(
        f"seekrl retrieval server ({type(retriever).__name__}) at {url}: {ROUTES}; "
        f"e.g. curl -X POST {url}/retrieve -H 'Content-Type: application/json' "
        f"-d '{RETRIEVE_EXAMPLE}'",
        flush=True,
    )
    try:
        _uvicorn_server(app, log_level).run(sockets=[sock])
    finally:
        sock.close()


class BackgroundServer:
    """An app served by uvicorn in a daemon thread (tests, or a trainer that hosts its retriever).

    Use as a context manager: ``with BackgroundServer(app) as url: ...``; ``url`` is also
    :attr:`url` after :meth:`start`.

    Args:
        app: an ASGI app, e.g. from :func:`create_app`.
        host: bind address (loopback unless ``allow_remote``).
        port: 0 picks a free port.
        startup_timeout_s: how long :meth:`start` waits for the server to accept connections.
    """

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        allow_remote: bool = False,
        log_level: str = "warning",
        startup_timeout_s: float = 10.0,
    ) -> None:
        _check_host(host, allow_remote)
        self._app, self._host, self._port = app, host, port
        self._log_level = log_level
        self._startup_timeout_s = startup_timeout_s
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self.url = ""

    def start(self) -> str:
        """Start serving; returns the base URL once the server accepts connections."""
        if self._thread is not None:
            return self.url
        self._sock = _bind(self._host, self._port)
        self.url = _url(self._sock, self._host)
        self._server = _uvicorn_server(self._app, self._log_level)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._sock]},
            daemon=True,
            name="seekrl-serve",
        )
        self._thread.start()
        deadline = time.monotonic() + self._startup_timeout_s
        while not self._server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        if not self._server.started:
            self.stop()
            raise RuntimeError(
                f"[serve] the server at {self.url} did not start within "
                f"{self._startup_timeout_s} s; see the log above."
            )
        return self.url

    def stop(self, timeout_s: float = 5.0) -> None:
        """Ask uvicorn to exit and wait for the thread (idempotent)."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
