"""Text handling shared by rewards: tag extraction, answer normalisation and the answer metrics.

The tags read here, ``<answer>`` and ``<think>``, are those of every shipped agent protocol
(``seekrl`` and ``search_r1``, :mod:`framework.rollout.protocol`), so the rewards read a rollout
the same way whichever protocol wrote it; a protocol with other answer tags would need its own.

:data:`ANSWER_METRICS` is the one table of answer metrics (``em``, ``substring``, ``f1``): rewards,
judges, the training accuracy and config validation all read it, so a new metric is one line there.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from framework.problems import table_entry

_ANSWER_OPEN, _ANSWER_CLOSE = "<answer>", "</answer>"
_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.DOTALL)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def extract_answer(completion: str) -> str | None:
    """The text of the last ``<answer>...</answer>`` block, stripped; ``None`` when there is none.

    Blocks are matched as ``re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)`` would (each
    opening tag to the next closing tag, scanning on after it), but in linear time: that regex
    rescans to the end from every unclosed ``<answer>``, quadratic in the number of them.
    """
    body: tuple[int, int] | None = None
    pos = 0
    while (start := completion.find(_ANSWER_OPEN, pos)) >= 0:
        start += len(_ANSWER_OPEN)
        end = completion.find(_ANSWER_CLOSE, start)
        if end < 0:  # no later opening tag can be closed either
            break
        body, pos = (start, end), end + len(_ANSWER_CLOSE)
    return None if body is None else completion[body[0] : body[1]].strip()


def extract_think(completion: str) -> str:
    """All ``<think>`` contents joined by newlines (an unclosed final block counts to the end)."""
    return "\n".join(m.strip() for m in _THINK.findall(completion))


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    text = text.lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, golds: Sequence[str]) -> bool:
    """Normalised exact match against any gold answer."""
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(g) for g in golds)


def substring_match(prediction: str, golds: Sequence[str]) -> bool:
    """Any normalised gold answer occurs inside the normalised prediction."""
    pred = normalize_answer(prediction)
    return any(normalize_answer(g) and normalize_answer(g) in pred for g in golds)


def token_f1(prediction: str, golds: Sequence[str]) -> float:
    """Best SQuAD token F1 of ``prediction`` against the gold answers (0 when none overlap)."""
    pred = normalize_answer(prediction).split()
    best = 0.0
    for gold in golds:
        ref = normalize_answer(gold).split()
        common = sum((Counter(pred) & Counter(ref)).values())
        if common == 0:
            continue
        precision, recall = common / len(pred), common / len(ref)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


@dataclass(frozen=True)
class AnswerMetric:
    """How a final answer is scored against its gold answers.

    Attributes:
        score: ``(prediction, golds)`` to a score in [0, 1].
        graded: the score takes values between 0 and 1 (token F1), so a right/wrong verdict needs a
            threshold; otherwise it is 0 or 1 and is itself the verdict.
    """

    score: Callable[[str, Sequence[str]], float]
    graded: bool = False

    def correct(self, prediction: str, golds: Sequence[str], threshold: float = 1.0) -> bool:
        """The verdict: a graded score at or above ``threshold``; a 0/1 score as it is."""
        value = self.score(prediction, golds)
        return value >= threshold if self.graded else bool(value)


#: metric name -> how an answer is scored (``reward.metric``, ``reward.correctness``,
#: ``judge.metric``)
ANSWER_METRICS: dict[str, AnswerMetric] = {
    "em": AnswerMetric(exact_match),
    "substring": AnswerMetric(substring_match),
    "f1": AnswerMetric(token_f1, graded=True),
}


def answer_metric(name: str, where: str) -> AnswerMetric:
    """The table entry of metric ``name``; ``where`` is the config path named in the error.

    Raises:
        ValueError: ``name`` is not in :data:`ANSWER_METRICS`.
    """
    return table_entry(ANSWER_METRICS, name, where)


@runtime_checkable
class ReportsVerdict(Protocol):
    """A reward config that says by which answer metric it calls an answer correct: training
    accuracy and the logged metrics read this instead of the reward's field names."""

    def verdict_metric(self) -> str | None:
        """An entry of :func:`verdict_metrics`, or None when the reward judges no answer (or
        scores it on a graded scale such as F1)."""
        ...


@runtime_checkable
class ReportsEntityRule(Protocol):
    """A reward config that says how it matches a question's entities in a rollout's thinking
    (the partial-credit figures of the logged metrics use the trained reward's own rule)."""

    def entity_rule(self) -> Any:
        """A rule with ``matching()`` and ``skip_question_entities`` (:class:`~framework.rewards.entity_match.RulesEntities`: E-GRPO's config is one), or None."""
        ...


def verdict_of(metric: str) -> str | None:
    """``metric`` when it is a verdict (not graded), else None."""
    return metric if metric in verdict_metrics() else None


def verdict_metrics() -> list[str]:
    """The metrics whose score is itself a right/wrong verdict (not graded): what ``correctness``
    options may name."""
    return [name for name, metric in ANSWER_METRICS.items() if not metric.graded]
