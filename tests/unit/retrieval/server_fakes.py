"""An in-memory retriever over six passages and a served instance of it, for the HTTP tests."""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from framework.retrieval.server import BackgroundServer, create_app
from framework.retrieval.types import DocumentNotFound, QueryLimits, check_request, document_key
from framework.types import Document, Hit

#: (passage_id, doc_id, title, text)
PASSAGES = [
    ("paris#0", "paris", "Paris", "Paris is the capital of France."),
    ("paris#1", "paris", "Paris", "The Eiffel Tower stands in Paris on the Seine."),
    ("hamlet", "hamlet", "Hamlet", "Hamlet is a tragedy written by William Shakespeare."),
    ("nile#0", "nile", "Nile", "The Nile is a river flowing north through Egypt."),
    ("nile#1", "nile", "Nile", "The Nile delta meets the Mediterranean Sea."),
    ("curie", "curie", "Marie Curie", "Marie Curie won the Nobel Prize in physics and chemistry."),
]

#: Server limits of the shared test server (small, so limit errors are cheap to trigger).
LIMITS = QueryLimits(max_queries=4, max_query_chars=64, max_k=5)
DEFAULT_TOPK = 2
MAX_BODY_BYTES = 4096
#: A query that makes the fake backend raise.
EXPLODE = "explode now"


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


class FakeRetriever:
    """Word-overlap scoring (shared words / sqrt(passage words)); raises on :data:`EXPLODE`.

    It also fails loudly if two calls overlap, which the server's lock must prevent.
    """

    def __init__(self, limits: QueryLimits = LIMITS, delay_s: float = 0.0) -> None:
        self.limits = limits
        self.delay_s = delay_s
        self.calls = 0
        self._busy = threading.Lock()

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        queries = check_request(queries, k, self.limits)
        if not self._busy.acquire(blocking=False):
            raise AssertionError("concurrent call into a backend that is not thread-safe")
        try:
            self.calls += 1
            time.sleep(self.delay_s)
            if EXPLODE in queries:
                raise RuntimeError("index shard 3 is corrupt")
            out = []
            for q in queries:
                qw = _words(q)
                scored = [
                    (len(qw & _words(t + " " + x)) / math.sqrt(len(_words(x))), i)
                    for i, (_, _, t, x) in enumerate(PASSAGES)
                ]
                scored.sort(key=lambda s: (-s[0], s[1]))
                out.append([Hit(*PASSAGES[i], score=s) for s, i in scored[:k]])
            return out
        finally:
            self._busy.release()

    def document(self, *, doc_id: str | None = None, title: str | None = None) -> Document:
        key, value = document_key(doc_id, title)
        rows = [p for p in PASSAGES if p[1] == value] if key == "doc_id" else []
        if key == "title":
            rows = [p for p in PASSAGES if p[2] == value] or [
                p for p in PASSAGES if p[2].lower() == value.lower()
            ]
        if not rows:
            raise DocumentNotFound(f"[retriever.document] got {key}={value!r}; no such document.")
        return Document(rows[0][1], rows[0][2], " ".join(r[3] for r in rows))

    def close(self) -> None:
        pass


@contextmanager
def running_server(retriever: FakeRetriever | None = None) -> Iterator[tuple[str, FakeRetriever]]:
    """``(base_url, retriever)`` of a server on a free loopback port, stopped on exit."""
    retriever = retriever or FakeRetriever()
    app = create_app(
        retriever, default_topk=DEFAULT_TOPK, max_body_bytes=MAX_BODY_BYTES, limits=LIMITS
    )
    with BackgroundServer(app, "127.0.0.1", 0) as url:
        yield url, retriever
