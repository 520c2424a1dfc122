"""The agent's tools, one table: each tool's argument check and its handler.

:data:`TOOLS` is the ``seekrl`` protocol's table (another protocol brings its own, built from the
same :class:`Tool` and, for search, :func:`search_results`). It maps a tool name to a
:class:`Tool`. The parser (:func:`framework.rollout.parser.parse_call`) asks it whether a name is a
tool and how to read its arguments; the agent loop (:class:`framework.rollout.engine.AgentLoop`)
asks its protocol's table how to answer the calls and which rollout statistic each call counts
towards. Adding a tool is one line in :data:`TOOLS` (plus its two functions); the system prompt
that describes the tools to the model stays in the agent config (``agent.system_prompt``), and a
test checks that it names exactly the tools of this table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from framework.registry.protocols import Retriever
from framework.retrieval.types import (
    DocumentNotFound,
    QueryError,
    RetrievalError,
    RetrieverUnavailable,
)
from framework.rollout.config import AgentConfig
from framework.types import (  # ToolCall re-exported: the parser and the tests import it from here
    Document,
    Hit,
    ToolCall,
)

MAX_QUERIES_PER_CALL = 8


@dataclass(frozen=True)
class ToolResult:
    """What a tool answers to one call.

    Attributes:
        text: what the model is shown.
        evidence: the retrieved content within ``text`` (passages, pages), without what echoes the
            model's own words (query headers, the title it asked for, error messages): what
            rewards that ask "did the rollout see this entity" read
            (:attr:`~framework.types.TurnSpan.evidence`).
    """

    text: str
    evidence: str = ""

    @staticmethod
    def of(answer: ToolResult | str) -> ToolResult:
        """``answer`` as a result; a plain string (a plugin tool's) is all evidence."""
        return answer if isinstance(answer, ToolResult) else ToolResult(answer, answer)


@dataclass(frozen=True)
class Tool:
    """One tool of the agent.

    Attributes:
        parse: the call's ``arguments`` object to a :class:`ToolCall`, or a message saying what is
            wrong with them (it becomes the model's error observation). Must never raise.
        answer: ``(calls, retriever, cfg)`` to one :class:`ToolResult` (or plain text, all of it
            evidence) per call, in order. It gets every call of this tool from every rollout of a
            turn at once, so that it can batch them (all searches go to the retriever in one
            request).
        stat: the rollout statistic (``Trajectory.stats``) that the tool's calls add to.
        count: how much one call adds to ``stat``.
    """

    parse: Callable[[dict[str, object]], ToolCall | str]
    answer: Callable[[Sequence[ToolCall], Retriever, AgentConfig], Sequence[ToolResult | str]]
    stat: str
    count: Callable[[ToolCall], int]


def clean(text: str) -> str:
    """``text`` with anything that is not encodable as UTF-8 (lone surrogates from ``\\ud800``
    escapes) replaced, so observations that echo it can always be tokenised."""
    return text.encode("utf-8", "replace").decode("utf-8").strip()


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, or its type when the message is empty."""
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending in ``...`` when it was cut."""
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


# -- search ----------------------------------------------------------------------------------------
def parse_search(args: dict[str, object]) -> ToolCall | str:
    """``{"queries": [...]}`` (or one ``"query"`` string): 1 to 8 non-empty strings."""
    queries = args.get("queries", args.get("query"))
    if isinstance(queries, str):
        queries = [queries]
    if not isinstance(queries, list) or not queries:
        return "search needs 'queries': a non-empty list of strings"
    cleaned = tuple(clean(q) for q in queries if isinstance(q, str) and clean(q))
    if len(cleaned) != len(queries):
        return "search 'queries' must all be non-empty strings"
    if len(cleaned) > MAX_QUERIES_PER_CALL:
        return f"search takes at most {MAX_QUERIES_PER_CALL} queries per call"
    return ToolCall("search", queries=cleaned)


def answer_search(
    calls: Sequence[ToolCall], retriever: Retriever, cfg: AgentConfig
) -> list[ToolResult]:
    """The top ``cfg.search_k`` passages of every query of ``calls``, each call's as one result
    (:func:`search_results` asks the retriever)."""
    results = search_results(calls, retriever, cfg.search_k)
    return [_search_observation(c, results, cfg) for c in calls]


def search_results(
    calls: Sequence[ToolCall], retriever: Retriever, k: int
) -> dict[str, list[Hit] | str]:
    """Query -> its top ``k`` hits, or why its search failed: all distinct queries of ``calls`` in
    one retriever call, and query by query only when that call fails (one bad query must not cost
    the others). Every protocol's search tool asks the retriever through this.

    Raises:
        RetrieverUnavailable: no query can be answered (the rollout cannot go on).
    """
    unique = list(dict.fromkeys(q for c in calls for q in c.queries))
    results: dict[str, list[Hit] | str] = {}
    if unique:
        try:
            results = dict(zip(unique, retriever.search(unique, k), strict=True))
        except RetrieverUnavailable:
            raise  # no query can be answered: the rollout cannot go on
        except (QueryError, RetrievalError):
            for q in unique:
                try:
                    results[q] = retriever.search([q], k)[0]
                except RetrieverUnavailable:
                    raise
                except (QueryError, RetrievalError) as exc:
                    results[q] = f"search failed: {first_line(exc)}"
    if isinstance(retriever, CountingRetriever):
        retriever.record(results)
    return results


class CountingRetriever:
    """A retriever as the tools see it during one agent-loop run: every call goes to ``inner``,
    and :func:`answer_search` records the outcome of each distinct query of a turn here (found
    passages, no passage, or failed), which the run reports as ``retrieval/queries``,
    ``retrieval/empty`` and ``retrieval/failed`` (the health monitor ``retrieval_empty`` reads
    them)."""

    def __init__(self, inner: Retriever) -> None:
        self.inner = inner
        self.counts = {"queries": 0, "empty": 0, "failed": 0}

    def record(self, results: Mapping[str, list[Hit] | str]) -> None:
        self.counts["queries"] += len(results)
        self.counts["failed"] += sum(isinstance(r, str) for r in results.values())
        self.counts["empty"] += sum(isinstance(r, list) and not r for r in results.values())

    def search(self, queries: Sequence[str], k: int) -> list:
        return self.inner.search(queries, k)

    def document(self, *, doc_id: str | None = None, title: str | None = None) -> Document:
        return self.inner.document(doc_id=doc_id, title=title)

    def close(self) -> None:
        self.inner.close()


def _search_observation(
    call: ToolCall, results: Mapping[str, list[Hit] | str], cfg: AgentConfig
) -> ToolResult:
    """Each query's header then its numbered passages; the evidence is the passages alone (a
    failure and the header, which repeats the model's query, are not)."""
    blocks, evidence = [], []
    for q in call.queries:
        got = results.get(q, [])
        if isinstance(got, str):
            blocks.append(f'Query "{q}": {got}')
            continue
        lines = [
            f"[{i}] {h.title}: {clip(h.text, cfg.max_passage_chars)}" for i, h in enumerate(got, 1)
        ]
        blocks.append("\n".join([f'Query "{q}":', *lines]) if got else f'Query "{q}": no results.')
        evidence.append("\n".join(lines) if got else "no results.")
    return ToolResult("\n".join(blocks), "\n".join(evidence))


# -- visit -----------------------------------------------------------------------------------------
def parse_visit(args: dict[str, object]) -> ToolCall | str:
    """``{"title": ...}`` (or ``"url"``) or ``{"doc_id": ...}``, with an optional ``"goal"``."""
    doc_id, title = args.get("doc_id"), args.get("title", args.get("url"))
    given_goal = args.get("goal")
    goal = clean(given_goal) if isinstance(given_goal, str) else None
    if isinstance(doc_id, str) and clean(doc_id):
        return ToolCall("visit", doc_id=clean(doc_id), goal=goal)
    if isinstance(title, str) and clean(title):
        return ToolCall("visit", title=clean(title), goal=goal)
    return "visit needs 'title' (or 'doc_id'): the page to read"


def answer_visit(
    calls: Sequence[ToolCall], retriever: Retriever, cfg: AgentConfig
) -> list[ToolResult]:
    """The first ``cfg.max_visit_chars`` characters of each page (all evidence), or why it cannot
    be read (none)."""
    out = []
    for call in calls:
        try:
            doc = retriever.document(doc_id=call.doc_id, title=call.title)
        except DocumentNotFound:
            missing = f"Error: no page titled {call.title or call.doc_id!r}. Search for it first."
            out.append(ToolResult(missing))
        except RetrieverUnavailable:
            raise
        except (QueryError, RetrievalError) as exc:
            out.append(ToolResult(f"Error: {first_line(exc)}"))
        else:
            page = f"Page {doc.title}:\n{clip(doc.text, cfg.max_visit_chars)}"
            out.append(ToolResult(page, page))
    return out


#: tool name -> how its arguments are read and its calls answered
TOOLS: dict[str, Tool] = {
    "search": Tool(parse_search, answer_search, stat="queries", count=lambda c: len(c.queries)),
    "visit": Tool(parse_visit, answer_visit, stat="visits", count=lambda c: 1),
}


def tool_stats(tools: Mapping[str, Tool] | None = None) -> tuple[str, ...]:
    """The rollout statistics that ``tools`` (default: :data:`TOOLS`, the ``seekrl`` protocol's)
    count, in table order (no repeats)."""
    return tuple(dict.fromkeys(tool.stat for tool in (TOOLS if tools is None else tools).values()))
