"""Metric functions of the evaluation harness, on plain numbers (hand-checkable).

* Pass@k: the unbiased estimator of Chen et al. 2021 (arXiv 2107.03374): with ``n`` samples of which
  ``c`` are correct, ``1 - C(n - c, k) / C(n, k)``: the chance that at least one of ``k`` samples drawn
  without replacement is correct.
* pass^k: Yao et al. 2024 (tau-bench, arXiv 2406.12045): ``C(c, k) / C(n, k)``, the chance that all
  ``k`` drawn samples are correct (consistency rather than coverage).
* Pass@1 is the mean over samples; its 95% confidence interval treats questions as the unit
  (per-question accuracy, normal approximation with the sample standard deviation).
* A macro average over sources (Search-R1's "Avg." column) is the unweighted mean of the sources'
  means; its interval treats the sources as independent samples (:func:`macro_mean_ci`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased Pass@k for one question with ``n`` samples, ``c`` correct (requires ``k <= n``)."""
    _check(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k for one question: all of ``k`` samples drawn without replacement are correct."""
    _check(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _check(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")


@dataclass(frozen=True)
class Estimate:
    """A mean with its 95% confidence interval."""

    mean: float
    low: float
    high: float
    n: int

    def __str__(self) -> str:
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"


def mean_ci(values: Sequence[float], z: float = 1.96) -> Estimate:
    """Mean and normal-approximation 95% interval (clipped to [0, 1] for rates); n = 1 gives a
    zero-width interval."""
    n = len(values)
    if n == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0)
    m = sum(values) / n
    if n == 1:
        return Estimate(m, m, m, 1)
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))
    half = z * sd / math.sqrt(n)
    lo, hi = m - half, m + half
    if all(0.0 <= v <= 1.0 for v in values):
        lo, hi = max(0.0, lo), min(1.0, hi)
    return Estimate(m, lo, hi, n)


def macro_mean_ci(groups: Sequence[Sequence[float]], z: float = 1.96) -> Estimate:
    """The unweighted mean of the groups' means and its normal-approximation 95% interval.

    With ``G`` groups of means ``m_g``, sample standard deviations ``s_g`` and sizes ``n_g`` drawn
    independently, the macro mean ``M = sum(m_g) / G`` has standard error
    ``sqrt(sum(s_g**2 / n_g)) / G``; a group of one value adds no variance (as :func:`mean_ci`
    gives it a zero-width interval). Clipped to [0, 1] when every value is a rate. ``n`` is the
    number of groups; no groups (or an empty one) give NaN.
    """
    if not groups or not all(groups):
        return Estimate(float("nan"), float("nan"), float("nan"), len(groups))
    means = [sum(g) / len(g) for g in groups]
    variance = 0.0
    for g, m in zip(groups, means, strict=True):
        if len(g) > 1:
            variance += sum((v - m) ** 2 for v in g) / (len(g) - 1) / len(g)
    macro = sum(means) / len(groups)
    half = z * math.sqrt(variance) / len(groups)
    lo, hi = macro - half, macro + half
    if all(0.0 <= v <= 1.0 for g in groups for v in g):
        lo, hi = max(0.0, lo), min(1.0, hi)
    return Estimate(macro, lo, hi, len(groups))


@dataclass
class SamplingSummary:
    """Pass@1 (with CI), Pass@k and pass^k over questions, each from its ``k`` samples."""

    pass1: Estimate
    pass_k: float
    pass_hat_k: float
    k: int
    questions: int


def summarize_samples(correct: Sequence[Sequence[bool]], k: int) -> SamplingSummary:
    """``correct[q]`` holds the correctness of question ``q``'s samples (at least ``k`` each)."""
    per_q = [sum(c) / len(c) for c in correct]
    pk = [pass_at_k(len(c), sum(c), k) for c in correct]
    hk = [pass_hat_k(len(c), sum(c), k) for c in correct]
    q = len(correct)
    return SamplingSummary(
        pass1=mean_ci(per_q),
        pass_k=sum(pk) / q if q else float("nan"),
        pass_hat_k=sum(hk) / q if q else float("nan"),
        k=k,
        questions=q,
    )


@dataclass
class EntityComparison:
    """The paper's analysis: do correct rollouts match more ground-truth entities than wrong ones?"""

    questions_with_both: int
    correct_more: int
    wrong_more: int
    ties: int
    mean_matched_correct: float
    mean_matched_wrong: float

    def as_dict(self) -> dict[str, float]:
        """The report's keys for these figures."""
        return {
            "questions_with_correct_and_wrong": self.questions_with_both,
            "correct_matches_more": self.correct_more,
            "wrong_matches_more": self.wrong_more,
            "ties": self.ties,
            "mean_matched_correct": self.mean_matched_correct,
            "mean_matched_wrong": self.mean_matched_wrong,
        }


def entity_comparison(
    matched: Sequence[Sequence[float]], correct: Sequence[Sequence[bool]]
) -> EntityComparison:
    """Per question, mean matched entities of its correct vs its wrong rollouts (questions that have
    both only), and how often each side is higher."""
    more_c = more_w = ties = 0
    mc, mw = [], []
    for m, c in zip(matched, correct, strict=True):
        right = [x for x, ok in zip(m, c, strict=True) if ok]
        wrong = [x for x, ok in zip(m, c, strict=True) if not ok]
        if not right or not wrong:
            continue
        a, b = sum(right) / len(right), sum(wrong) / len(wrong)
        mc.append(a)
        mw.append(b)
        more_c += a > b
        more_w += b > a
        ties += a == b
    n = len(mc)
    return EntityComparison(
        questions_with_both=n,
        correct_more=more_c,
        wrong_more=more_w,
        ties=ties,
        mean_matched_correct=sum(mc) / n if n else float("nan"),
        mean_matched_wrong=sum(mw) / n if n else float("nan"),
    )


def histogram(values: Sequence[float], bins: int = 10) -> list[int]:
    """Counts of ``values`` in ``bins`` equal bins over [0, 1] (1.0 falls in the last bin)."""
    counts = [0] * bins
    for v in values:
        counts[min(int(v * bins), bins - 1)] += 1
    return counts
