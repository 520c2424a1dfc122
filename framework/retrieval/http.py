"""A retriever that asks a retrieval server over HTTP (``retriever=http``).

It speaks Search-R1's ``POST /retrieve`` API, so it works against ``seekrl-serve`` and against
Search-R1's own ``retrieval_server.py``; document lookup (``POST /document``) needs ``seekrl-serve``.
``retriever.url`` is the server's base URL; the endpoint URL Search-R1's scripts take
(``http://127.0.0.1:8000/retrieve``) is accepted too and read as its base (:func:`server_base`).
Connection errors, timeouts and 5xx answers are retried with exponential backoff; 4xx answers are
not (400 becomes :class:`QueryError`, 404 from ``/document`` :class:`DocumentNotFound`). A server
that stays unreachable or silent after the retries raises :class:`RetrieverUnavailable`.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import SplitResult, urlsplit, urlunsplit

import httpx

from framework.config import ConfigError, Problem, check, check_range, option
from framework.registry.kinds import RETRIEVERS
from framework.retrieval.types import (
    ClosedOnExit,
    DocumentNotFound,
    QueryError,
    RetrievalError,
    RetrieverConfigBase,
    RetrieverUnavailable,
    check_request,
    document_key,
)
from framework.types import Document, Hit

_SECTION = "retriever.http"
_START_FIX = "start one with `seekrl-serve` or set retriever.url"
#: the search endpoint, the one route Search-R1's server has
RETRIEVE = "/retrieve"
#: the other routes of ``seekrl-serve``: a URL ending in one is not a base URL
_OTHER_ROUTES = ("/document", "/health")
_URL_EXPECTED = (
    "an http:// or https:// URL of the retrieval server, e.g. http://127.0.0.1:8000 (or its "
    "search endpoint, http://127.0.0.1:8000/retrieve)"
)


def server_base(url: str) -> str:
    """The base URL of the server ``url`` names: trailing slashes and a final ``/retrieve`` (the
    endpoint URL Search-R1's ``retrieval_server.py`` users paste) dropped, so the client posts to
    ``<base>/retrieve`` and never to ``/retrieve/retrieve``; a path before it (a server behind a
    proxy at ``/search``) is kept. ``url`` must pass :func:`url_problems`.

    Example: ``http://127.0.0.1:8000/retrieve/`` and ``http://127.0.0.1:8000/`` both give
    ``http://127.0.0.1:8000``."""
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/")
    path = path.removesuffix(RETRIEVE).rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def url_problems(url: object, where: str = "url") -> list[Problem]:
    """What is wrong with ``url`` as ``retriever.url`` (every problem found, or none): not text,
    not http(s), no host, a port that is not a number, a query or fragment, or the URL of another
    route (``/document``, ``/health``)."""
    if not isinstance(url, str) or not url.strip():
        return [Problem(where, url, _URL_EXPECTED, f"set {where} to the server's address")]
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return [
            Problem(
                where,
                url,
                _URL_EXPECTED,
                f"write {where} as http://HOST:PORT, the address seekrl-serve prints "
                "(a URL without http:// is read as a path, not a host)",
            )
        ]
    out = check(
        _port_ok(parts),
        where,
        url,
        "a port that is a number from 1 to 65535",
        f"fix the port in {where} (http://127.0.0.1:8000)",
    )
    out += check(
        not parts.query and not parts.fragment and not any(c.isspace() for c in url.strip()),
        where,
        url,
        "a URL without spaces, ?query or #fragment (the client sends its queries as JSON)",
        f"drop the spaces and everything from a ? or # in {where}",
    )
    route = next((r for r in _OTHER_ROUTES if parts.path.rstrip("/").endswith(r)), None)
    out += check(
        route is None,
        where,
        url,
        f"the server's base URL (or its {RETRIEVE} endpoint), not its {route} route",
        f"drop {route} from {where}",
    )
    return out


def _port_ok(parts: SplitResult) -> bool:
    try:
        port = parts.port
    except ValueError:  # not a number, or out of range
        return False
    return port is None or port > 0


@dataclass
class HttpRetrieverConfig(RetrieverConfigBase):
    local: ClassVar[bool] = False  # the client of a retrieval server

    url: str = option(
        "http://127.0.0.1:8000",
        "base URL of the retrieval server (seekrl-serve or Search-R1's); its /retrieve endpoint "
        "URL is read as the same server",
    )
    timeout_s: float = option(30.0, "seconds to connect, and to wait for each answer")
    retries: int = option(3, "attempts per request, the first included (1: never retry)")
    backoff_s: float = option(0.5, "wait before the first retry; doubles on each further one")
    pool_size: int = option(8, "connections kept open to the server")

    def problems(self) -> list[Problem]:
        out = url_problems(self.url)
        out += check_range(self.timeout_s, "timeout_s", low=0, low_inclusive=False)
        out += check_range(self.retries, "retries", low=1, fix="set retries to 1 or more")
        out += check_range(self.backoff_s, "backoff_s", low=0)
        out += check_range(self.pool_size, "pool_size", low=1)
        return out


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _split_contents(contents: str) -> tuple[str, str]:
    """``(title, text)`` from Search-R1's ``contents`` (title line, quoted, then the text)."""
    title, _, text = contents.partition("\n")
    if len(title) >= 2 and title[0] == title[-1] == '"':
        title = title[1:-1]
    return title, text


def _doc_id_of(passage_id: str) -> str:
    """The document part of ``<doc_id>#<chunk>``; the id itself otherwise."""
    head, sep, tail = passage_id.rpartition("#")
    return head if sep and head and tail.isdigit() else passage_id


def _error_text(resp: httpx.Response) -> str:
    """The server's error message (``{"error": ...}``, FastAPI's ``detail``, or the raw text)."""
    try:
        body = resp.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        for key in ("error", "detail"):
            if key in body:
                return str(body[key])
    text = resp.text.strip()
    return text[:300] if text else resp.reason_phrase


@RETRIEVERS.register("http", config=HttpRetrieverConfig)
class HttpRetriever(ClosedOnExit):
    """Client of a retrieval server; thread-safe, usable as a context manager.

    Args:
        cfg: the config (validated here: a bad value raises :class:`ConfigError`).
        transport: an httpx transport to use instead of the network (tests).
    """

    def __init__(
        self, *, cfg: HttpRetrieverConfig, transport: httpx.BaseTransport | None = None
    ) -> None:
        problems = cfg.problems() + [p.under("limits") for p in cfg.limits.problems()]
        if problems:
            raise ConfigError([p.under("retriever") for p in problems])
        self.cfg = cfg
        self.base_url = server_base(cfg.url)
        self._client = httpx.Client(
            timeout=httpx.Timeout(cfg.timeout_s),
            limits=httpx.Limits(
                max_connections=cfg.pool_size, max_keepalive_connections=cfg.pool_size
            ),
            headers={"User-Agent": "seekrl-http-retriever"},
            # a proxy from the environment must not capture requests to this machine
            trust_env=not _is_loopback(urlsplit(self.base_url).hostname),
            transport=transport,
        )

    # -- the Retriever protocol -------------------------------------------------------------------
    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Top-``k`` passages per query from ``POST /retrieve``.

        Raises:
            QueryError: the request is invalid (checked here against ``cfg.limits``, or by the server).
            RetrievalError: the server is unreachable, failed, or answered in an unknown format.
        """
        queries = check_request(queries, k, self.cfg.limits)
        body = self._post(RETRIEVE, {"queries": queries, "topk": k, "return_scores": True})
        result = body.get("result")
        if not isinstance(result, list) or len(result) != len(queries):
            got = f"{len(result)} result lists" if isinstance(result, list) else repr(result)[:80]
            raise self._bad_answer(RETRIEVE, f"{got} for {len(queries)} queries")
        return [[self._hit(item) for item in hits] for hits in self._lists(result)]

    def document(self, *, doc_id: str | None = None, title: str | None = None) -> Document:
        """The document with ``doc_id`` or ``title`` from ``POST /document``.

        Raises:
            DocumentNotFound: the server has no such document.
            QueryError: neither or both of ``doc_id`` and ``title``, or an empty one.
            RetrievalError: the server is unreachable, failed, or has no ``/document`` endpoint.
        """
        key, value = document_key(doc_id, title)
        body = self._post("/document", {"id" if key == "doc_id" else "title": value})
        doc = body.get("document")
        if not isinstance(doc, dict) or not ("doc_id" in doc or "id" in doc):
            raise self._bad_answer("/document", repr(body)[:80])
        if "title" in doc and "text" in doc:
            doc_title, text = str(doc["title"]), str(doc["text"])
        else:
            doc_title, text = _split_contents(str(doc.get("contents", "")))
        return Document(doc_id=str(doc.get("doc_id", doc.get("id"))), title=doc_title, text=text)

    def close(self) -> None:
        """Close the connection pool (idempotent)."""
        self._client.close()

    def health(self) -> dict[str, Any]:
        """The server's ``GET /health`` answer (one attempt).

        Raises:
            RetrievalError: the server is unreachable or unhealthy.
        """
        url = self.base_url + "/health"
        try:
            resp = self._client.get(url)
            resp.raise_for_status()
            return resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise RetrievalError(
                f"[{_SECTION}] cannot get {url} ({type(exc).__name__}: {exc}); expected a "
                f"running retrieval server. Fix: {_START_FIX}."
            ) from exc

    # -- internals --------------------------------------------------------------------------------
    def _post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        """POST ``payload``; the JSON answer, retrying transport errors and 5xx answers."""
        url = self.base_url + path
        attempts = self.cfg.retries
        failure = ""
        unreachable = False
        cause: BaseException | None = None
        for attempt in range(1, attempts + 1):
            try:
                resp = self._client.post(url, json=payload)
            except httpx.TransportError as exc:  # connect/read/write errors, timeouts, protocol
                failure, cause = f"{type(exc).__name__}: {exc}", exc
                unreachable = not isinstance(exc, httpx.TimeoutException)
            else:
                if resp.status_code < 400:
                    return self._json(resp, path)
                if resp.status_code < 500:
                    raise self._client_error(resp, path)
                failure = f"HTTP {resp.status_code}: {_error_text(resp)}"
                cause, unreachable = None, False
            if attempt < attempts:
                time.sleep(self.cfg.backoff_s * 2 ** (attempt - 1))
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        if unreachable:
            raise RetrieverUnavailable(
                f"[{_SECTION}] cannot reach {url} after {tries} ({failure}); expected a running "
                f"retrieval server. Fix: {_START_FIX}."
            ) from cause
        if isinstance(cause, httpx.TimeoutException):
            raise RetrieverUnavailable(
                f"[{_SECTION}] no answer from {url} after {tries} ({failure}); expected one "
                f"within timeout_s={self.cfg.timeout_s}. Fix: raise retriever.timeout_s, send "
                "smaller batches, or check the server."
            ) from cause
        raise RetrievalError(  # a 5xx: a fault of the server on this request, not an outage
            f"[{_SECTION}] the server at {url} failed after {tries} ({failure}); expected "
            "an answer. Fix: see the server's log."
        )

    def _client_error(self, resp: httpx.Response, path: str) -> Exception:
        """The exception for a 4xx answer (never retried)."""
        text = _error_text(resp)
        url = self.base_url + path
        if resp.status_code in (400, 413):
            return QueryError(text)
        kind = ""
        try:
            body = resp.json()
            kind = body.get("type", "") if isinstance(body, dict) else ""
        except ValueError:
            pass
        if resp.status_code == 404 and path == "/document" and kind == "DocumentNotFound":
            return DocumentNotFound(text)
        if resp.status_code in (404, 405):
            return RetrievalError(
                f"[{_SECTION}] got HTTP {resp.status_code} from {url} ({text}); expected a "
                "seekrl retrieval server (Search-R1's offers /retrieve only). "
                f"Fix: {_START_FIX}."
            )
        return RetrievalError(
            f"[{_SECTION}] got HTTP {resp.status_code} from {url} ({text}); expected a "
            "Search-R1 compatible retrieval server. Fix: check retriever.url and the server version."
        )

    def _json(self, resp: httpx.Response, path: str) -> dict[str, Any]:
        try:
            body = resp.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise self._bad_answer(path, repr(resp.text[:80]))
        return body

    def _bad_answer(self, path: str, got: str) -> RetrievalError:
        return RetrievalError(
            f"[{_SECTION}] got {got} from {self.base_url}{path}; expected Search-R1's answer "
            '({"result": [[...] per query]}). Fix: point retriever.url at a retrieval server.'
        )

    def _lists(self, result: list[Any]) -> list[list[Any]]:
        for hits in result:
            if not isinstance(hits, list):
                raise self._bad_answer(RETRIEVE, f"a result entry {repr(hits)[:80]}")
        return result

    def _hit(self, item: Any) -> Hit:
        """A :class:`Hit` from ``{"document": DOC, "score": s}`` or a bare ``DOC``."""
        if isinstance(item, dict) and isinstance(item.get("document"), dict):
            doc, score = item["document"], item.get("score", item["document"].get("score"))
        else:
            doc, score = item, item.get("score") if isinstance(item, dict) else None
        if not isinstance(doc, dict) or not ("contents" in doc or {"title", "text"} <= doc.keys()):
            raise self._bad_answer(RETRIEVE, f"a passage {repr(item)[:80]}")
        passage_id = str(doc.get("passage_id", doc.get("id", "")))
        if "title" in doc and "text" in doc:
            title, text = str(doc["title"]), str(doc["text"])
        else:
            title, text = _split_contents(str(doc["contents"]))
        try:
            value = float(score) if score is not None else 0.0
        except (TypeError, ValueError):
            raise self._bad_answer(RETRIEVE, f"a score {score!r}") from None
        doc_id = str(doc["doc_id"]) if "doc_id" in doc else _doc_id_of(passage_id)
        return Hit(passage_id=passage_id, doc_id=doc_id, title=title, text=text, score=value)
