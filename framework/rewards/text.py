"""Text handling shared by rewards: tag extraction and answer normalisation."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.DOTALL)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def extract_answer(completion: str) -> str | None:
    """The text of the last ``<answer>...</answer>`` block, stripped; ``None`` when there is none."""
    found = _ANSWER.findall(completion)
    return found[-1].strip() if found else None


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
