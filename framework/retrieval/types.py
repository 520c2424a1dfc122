"""Retrieval errors, the bounds and checks every backend applies to a request, and the retriever
config base. The interface is :class:`framework.registry.protocols.Retriever`; its results are
:class:`framework.types.Hit` and :class:`framework.types.Document`."""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from framework.config import ComponentConfig, Problem, check_range, option
from framework.registry import RETRIEVERS


class RetrievalError(RuntimeError):
    """A retrieval backend could not answer (index missing or corrupt, server down, ...)."""


class RetrieverUnavailable(RetrievalError):
    """The retriever cannot answer at all (its server is unreachable or does not answer in time).

    Unlike a failed query, this is not shown to the model as a tool error: the agent loop raises it,
    so a run stops with the message instead of training on rollouts whose every search failed.
    """


class QueryError(ValueError):
    """A request that no backend should answer: empty or oversized query, bad k, too many queries."""


class DocumentNotFound(LookupError):
    """No document with the requested id or title."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


_Closing = TypeVar("_Closing", bound="ClosedOnExit")


class ClosedOnExit(ABC):
    """``with backend:`` closes the backend at the block's end (its ``close`` says what that
    releases)."""

    @abstractmethod
    def close(self) -> None:
        """Release what the backend holds."""

    def __enter__(self: _Closing) -> _Closing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class QueryLimits:
    """Bounds every backend enforces on a search request."""

    max_queries: int = option(
        4096, "queries per search call (Search-R1's training sends up to 2,560)"
    )
    max_query_chars: int = option(2048, "characters per query")
    max_k: int = option(100, "largest k (top-k) accepted")

    def problems(self) -> list[Problem]:
        out = check_range(self.max_queries, "max_queries", low=1)
        out += check_range(self.max_query_chars, "max_query_chars", low=1)
        out += check_range(self.max_k, "max_k", low=1)
        return out


def utf8_problem(text: str) -> str | None:
    """Why ``text`` cannot be encoded as UTF-8 (a lone surrogate, e.g. from a JSON ``\\ud800``
    escape), or ``None`` when it can."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"lone surrogate {text[exc.start]!r} at position {exc.start}"
    return None


def check_request(queries: Sequence[str], k: int, limits: QueryLimits) -> list[str]:
    """Validate a search request; returns the queries as a list of str.

    Raises:
        QueryError: naming the offending query position or value and what to do.
    """
    if isinstance(queries, str):
        raise QueryError(
            "[retriever.search] got a single string; expected a list of queries. Fix: pass [query]."
        )
    queries = list(queries)
    if not queries:
        raise QueryError(
            "[retriever.search] got no queries; expected at least one. Fix: pass [query]."
        )
    if len(queries) > limits.max_queries:
        raise QueryError(
            f"[retriever.search] got {len(queries)} queries; expected at most {limits.max_queries}. "
            "Fix: split the batch or raise retriever.limits.max_queries."
        )
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= limits.max_k:
        raise QueryError(
            f"[retriever.search] got k={k!r}; expected an integer in [1, {limits.max_k}]. "
            "Fix: ask for between 1 and max_k results."
        )
    for i, q in enumerate(queries):
        if not isinstance(q, str) or not q.strip():
            raise QueryError(
                f"[retriever.search] got query {i} = {q!r}; expected non-empty text. "
                "Fix: drop empty queries."
            )
        if len(q) > limits.max_query_chars:
            raise QueryError(
                f"[retriever.search] got query {i} of {len(q)} characters; expected at most "
                f"{limits.max_query_chars}. Fix: shorten the query or raise "
                "retriever.limits.max_query_chars."
            )
        problem = utf8_problem(q)
        if problem:
            raise QueryError(
                f"[retriever.search] got query {i}, which is not valid UTF-8 text ({problem}); "
                "expected text that encodes as UTF-8. Fix: drop or repair the query."
            )
    return queries


def document_key(doc_id: str | None, title: str | None) -> tuple[str, str]:
    """``("doc_id", value)`` or ``("title", value)``; exactly one must be given.

    Raises:
        QueryError: neither or both given, or an empty value.
    """
    if (doc_id is None) == (title is None):
        raise QueryError(
            "[retriever.document] got "
            f"doc_id={doc_id!r}, title={title!r}; expected exactly one of them. Fix: pass one."
        )
    key, value = ("doc_id", doc_id) if doc_id is not None else ("title", title)
    if not isinstance(value, str) or not value.strip():
        raise QueryError(f"[retriever.document] got {key}={value!r}; expected non-empty text.")
    problem = utf8_problem(value)
    if problem:
        raise QueryError(
            f"[retriever.document] got a {key} that is not valid UTF-8 text ({problem}); "
            "expected text that encodes as UTF-8. Fix: repair the value."
        )
    return key, value


@dataclass
class RetrieverConfigBase(ComponentConfig):
    """Fields every retriever config has.

    ``local`` says whether the backend searches an index on this machine (which ``seekrl-index``
    builds and ``seekrl-serve`` serves) or is the client of a server elsewhere (``http``).
    """

    local: ClassVar[bool] = True
    limits: QueryLimits = field(default_factory=QueryLimits)


RETRIEVERS.declare_config_base(RetrieverConfigBase)


def local_retrievers() -> list[str]:
    """The registered retrievers that search an index on this machine."""
    return [e.name for e in RETRIEVERS if getattr(e.config_cls, "local", True)]


def remote_problem(retriever: Any, why: str, fix: str) -> Problem | None:
    """A config problem when ``retriever`` (a retriever config) is the client of a server rather
    than a local index (``why``: what needs a local one; ``fix``: what to do instead)."""
    if retriever is None or getattr(type(retriever), "local", True):
        return None
    expected = f"a local backend ({', '.join(local_retrievers())}): {why}"
    return Problem("retriever.name", retriever.name, expected, fix)
