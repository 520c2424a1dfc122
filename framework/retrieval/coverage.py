"""Answer coverage: how many questions the corpus can answer at all, and how many the retriever finds.

``seekrl-index coverage dataset=<name>`` (:class:`CoverageConfig`; the run and its files:
:mod:`framework.retrieval.coverage_report`) reports per
split, per ``data_source`` and per hop count:

- **corpus support**: the share of questions whose gold answer (any of ``golden_answers``) occurs in
  some passage of the retriever's corpus;
- **answer recall@k**: the share whose top-k passages for the question text contain a gold answer.

"Occurs" means: after the answer normalisation the evaluation scores with
(:func:`framework.rewards.text.normalize_answer`: lower case, no punctuation, no articles), the
answer's tokens appear consecutively among the passage's tokens, so ``art`` is not found in
``party``. A question the corpus does not support scores 0 whatever the agent learns; a corpus that
misses the gold documents of a third of the questions costs more EM than the choice of algorithm
(arXiv 2605.27881), which is why this runs before training.

Support is one streaming pass over the passage store that looks every passage n-gram up in a set of
the normalised answers: O(tokens x longest answer), not O(passages x answers), so it scales to
wiki-18's 21M passages.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from framework.config import option
from framework.config.app import RUN_DIR
from framework.data.schema import QAItem
from framework.data.synthesis import SPLITS
from framework.problems import Problem, check, check_range
from framework.progress import Progress
from framework.retrieval.types import remote_problem
from framework.rewards.text import normalize_answer

#: the hop count's label when a question does not say it
UNKNOWN_HOPS = "unknown"
#: what the report records as the matching rule
MATCH_RULE = (
    "a gold answer's tokens occur consecutively in the passage's tokens (title and text), both "
    "normalised as the evaluation's EM does (framework.rewards.text.normalize_answer: lower case, "
    "punctuation and articles removed)"
)


@dataclass
class CoverageConfig:
    """The ``coverage`` app (``seekrl-index coverage``): corpus support and answer recall@k."""

    run_dir: str = RUN_DIR
    dataset: Any = MISSING
    retriever: Any = MISSING
    # Any, not list[str]: split=test (one name) is taken as a list of one
    split: Any = option(
        None, "a split (train, validation, test) or a list of them; None = every split it has"
    )
    k: int = option(3, "top-k passages per question for answer recall@k (the agent's search_k)")
    batch_size: int = option(64, "questions per retriever search call")
    progress: bool = option(True, "progress of the corpus scan and the searches")

    def __post_init__(self) -> None:
        if isinstance(self.split, str):
            self.split = [self.split]

    def splits(self) -> list[str]:
        """The splits to report: those asked for, else every split the dataset has (a ``files``
        dataset has those whose file is set)."""
        if self.split:
            return list(self.split)
        return [s for s in SPLITS if getattr(self.dataset, s, "") is not None]

    def problems(self) -> list[Problem]:
        asked = self.split or []
        out = check(
            isinstance(asked, list),
            "split",
            self.split,
            f"one of {list(SPLITS)} or a list of them",
            "e.g. split=test or split=[validation,test]; leave it out for every split",
        )
        for s in asked if not out else []:
            out += check(
                s in SPLITS,
                "split",
                s,
                f"one of {list(SPLITS)}",
                "e.g. split=test or split=[validation,test]; leave it out for every split",
            ) or check(
                getattr(self.dataset, s, "") is not None,
                "split",
                s,
                "a split the dataset has",
                f"set dataset.{s}=<file.jsonl|file.parquet> or choose another split",
            )
        limits = getattr(self.retriever, "limits", None)
        out += check_range(self.k, "k", low=1, high=getattr(limits, "max_k", None))
        out += check_range(self.batch_size, "batch_size", low=1)
        out += check_range(self.batch_size, "batch_size", high=getattr(limits, "max_queries", None))
        remote = remote_problem(
            self.retriever,
            "the corpus scan reads the passage store on this machine",
            "run seekrl-index coverage where the index is (retriever=faiss, bm25 or hybrid)",
        )
        return out + ([remote] if remote is not None else [])


@dataclass(frozen=True)
class AnswerSet:
    """Normalised answers ready for an n-gram scan.

    Attributes:
        answers: the normalised answers (tokens joined by single spaces).
        prefixes: every leading run of 1..n tokens of every answer, the answers included: a scan
            extends an n-gram only while it is one of these.
        longest: the most tokens in one answer.
    """

    answers: frozenset[str]
    prefixes: frozenset[str]
    longest: int


def answer_set(answers: Iterable[str]) -> AnswerSet:
    """The :class:`AnswerSet` of already normalised ``answers`` (empty strings are dropped)."""
    kept = frozenset(a for a in answers if a)
    prefixes: set[str] = set()
    longest = 0
    for answer in kept:
        tokens = answer.split(" ")
        longest = max(longest, len(tokens))
        prefixes.update(" ".join(tokens[: n + 1]) for n in range(len(tokens)))
    return AnswerSet(kept, frozenset(prefixes), longest)


def answers_in(tokens: Sequence[str], answers: AnswerSet) -> set[str]:
    """The answers of ``answers`` whose tokens occur consecutively in ``tokens``.

    Args:
        tokens: a normalised passage split on spaces.
        answers: what to look for.

    Returns:
        The answers found (normalised strings). Each start position extends its n-gram only while
        it is an answer prefix, so the work is O(len(tokens) x answers.longest) at worst.
    """
    found: set[str] = set()
    if answers.prefixes.isdisjoint(tokens):  # one C-level test rules out most passages
        return found
    n = len(tokens)
    for i, token in enumerate(tokens):
        gram, j = token, i + 1
        while gram in answers.prefixes:
            if gram in answers.answers:
                found.add(gram)
            if j == n or j - i == answers.longest:
                break
            gram, j = f"{gram} {tokens[j]}", j + 1
    return found


def contains_answer(normalised_text: str, answer: str) -> bool:
    """Whether the normalised ``answer`` occurs in ``normalised_text`` on token boundaries (the
    direct check :func:`answers_in` must agree with; used for the handful of retrieved passages)."""
    return bool(answer) and f" {answer} " in f" {normalised_text} "


def gold_answers(item: QAItem) -> list[str]:
    """The question's normalised gold answers, without those that normalise to nothing."""
    return [a for a in dict.fromkeys(normalize_answer(g) for g in item.golden_answers) if a]


def scan_corpus(
    batches: Iterable[list[str]], answers: AnswerSet, progress: Progress | None = None
) -> set[str]:
    """The answers that occur in some passage: one pass over ``batches`` of passage texts.

    Stops early once every answer has been found.

    Args:
        batches: passage texts, a list at a time (:meth:`CorpusStore.iter_texts`).
        answers: the normalised answers to look for.
        progress: advanced by each batch's passage count.
    """
    found: set[str] = set()
    for texts in batches:
        for text in texts:
            found |= answers_in(normalize_answer(text).split(), answers)
        if progress is not None:
            progress.update(len(texts))
        if len(found) == len(answers.answers):
            break
    return found


def first_rank(passages: Sequence[str], answers: Sequence[str]) -> int | None:
    """The 1-based rank of the first passage containing one of the normalised ``answers``."""
    for rank, text in enumerate(passages, start=1):
        normalised = normalize_answer(text)
        if any(contains_answer(normalised, a) for a in answers):
            return rank
    return None


def retrieval_ranks(
    search: Callable[[list[str], int], list[list[Any]]],
    items: Sequence[QAItem],
    k: int,
    batch_size: int,
    progress: Progress | None = None,
) -> list[int | None]:
    """Per question, the rank of the first of its top-``k`` passages that holds a gold answer.

    Args:
        search: a retriever's ``search(queries, k)`` (hits with ``title`` and ``text``).
        items: the questions, searched by their text, ``batch_size`` at a time.
        k: passages per question.
        batch_size: questions per search call.
        progress: advanced by each batch's question count.
    """
    ranks: list[int | None] = []
    for start in range(0, len(items), batch_size):
        batch = items[start : start + batch_size]
        for item, hits in zip(batch, search([it.question for it in batch], k), strict=True):
            ranks.append(first_rank([f"{h.title}\n{h.text}" for h in hits], gold_answers(item)))
        if progress is not None:
            progress.update(len(batch))
    return ranks


def hops_label(hops: int | None) -> str:
    return UNKNOWN_HOPS if hops is None else str(hops)


def records_for(
    items: Sequence[QAItem], supported: set[str], ranks: Sequence[int | None]
) -> list[dict[str, Any]]:
    """One record per question: what its figures are counted from."""
    return [
        {
            "id": item.id,
            "data_source": item.data_source,
            "hops": hops_label(item.hops),
            "supported": any(a in supported for a in gold_answers(item)),
            "found_at_rank": rank,
        }
        for item, rank in zip(items, ranks, strict=True)
    ]


def _row(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    n = len(records)
    supported = sum(r["supported"] for r in records)
    found = sum(r["found_at_rank"] is not None for r in records)
    return {
        "questions": n,
        "supported": supported,
        "support": supported / n if n else None,
        "found": found,
        "recall": found / n if n else None,
    }


def _hop_order(label: str) -> tuple[int, int]:
    return (1, 0) if label == UNKNOWN_HOPS else (0, int(label))


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Support and recall overall, per ``data_source`` and per hop count, from the records.

    Returns:
        ``{"all": row, "data_source": {name: row}, "hops": {label: row}}``; a row is
        ``{"questions", "supported", "support", "found", "recall"}`` (shares None for no
        questions); hop labels in increasing order, ``unknown`` last.
    """
    by_source: dict[str, list[dict[str, Any]]] = defaultdict(list)
    by_hops: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_source[r["data_source"]].append(r)
        by_hops[r["hops"]].append(r)
    return {
        "all": _row(records),
        "data_source": {s: _row(by_source[s]) for s in sorted(by_source)},
        "hops": {h: _row(by_hops[h]) for h in sorted(by_hops, key=_hop_order)},
    }


__all__ = [
    "AnswerSet",
    "CoverageConfig",
    "answer_set",
    "answers_in",
    "contains_answer",
    "first_rank",
    "gold_answers",
    "records_for",
    "retrieval_ranks",
    "scan_corpus",
    "summarize",
]
