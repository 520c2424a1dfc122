"""Answerability of synthesized questions and the quality report."""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from framework.data.schema import QAItem
from framework.progress import Progress
from framework.registry.protocols import Retriever
from framework.retrieval.types import DocumentNotFound


def evidence_queries(item: QAItem) -> list[str]:
    """One query per evidence document, as an agent would search.

    The anchor's article is searched with the question itself; each later article with the name by
    which the previous article mentions it (what an agent reads there).
    """
    mentions = list(item.extra.get("mentions", []))
    chain = item.chain or ()
    later = range(1, max(len(chain), len(mentions) + 1))
    return [item.question, *(mentions[j - 1] if j <= len(mentions) else chain[j] for j in later)]


def answerability(
    items: Sequence[QAItem],
    retriever: Retriever,
    k: int,
    batch: int = 256,
    *,
    progress: bool = False,
) -> list[list[bool]]:
    """Per item, per evidence document of its chain: is it in the corpus and in the top ``k``?"""
    queries = [(i, j, q) for i, it in enumerate(items) for j, q in enumerate(evidence_queries(it))]
    found: dict[tuple[int, int], bool] = {}
    with Progress("answerability", len(queries), "query", enabled=progress) as bar:
        for start in range(0, len(queries), batch):
            part = queries[start : start + batch]
            results = retriever.search([q for _, _, q in part], k)
            for (i, j, _), hits in zip(part, results, strict=True):
                found[(i, j)] = (items[i].chain or ())[j] in {h.doc_id for h in hits}
            bar.update(len(part))
    out = []
    for i, it in enumerate(items):
        flags = []
        for j, doc in enumerate(it.chain or ()):
            try:
                retriever.document(doc_id=doc)
            except DocumentNotFound:
                flags.append(False)
                continue
            flags.append(found[(i, j)])
        out.append(flags)
    return out


def report(
    splits: dict[str, list[QAItem]],
    *,
    graph_stats: dict[str, Any],
    sampling: dict[str, Any],
    answerability_rates: dict[str, Any] | None,
    settings: dict[str, Any],
    seed: int,
    shortfall: Sequence[dict[str, Any]] = (),
    overlaps: dict[str, int] | None = None,
    answers: dict[str, dict[str, int]] | None = None,
    samples_per_hop: int = 3,
) -> tuple[dict[str, Any], str]:
    """The quality report as data and as markdown.

    ``shortfall`` lists the (split, hops) quotas left short, with why (see
    :func:`framework.data.datasets.unfilled_quotas`); the report says when the hop mix is exact.
    """
    per_hop = {
        s: dict(sorted(Counter(it.hops for it in items).items())) for s, items in splits.items()
    }
    data = {
        "sizes": {s: len(v) for s, v in splits.items()},
        "per_hop": per_hop,
        "shortfall": list(shortfall),
        "overlaps": overlaps,
        "answers": answers,
        "sampling": sampling,
        "answerability": answerability_rates,
        "graph": graph_stats,
        "settings": settings,
    }
    rng = random.Random(seed)
    test = splits.get("test") or next(iter(splits.values()))
    by_hop: dict[int, list[QAItem]] = defaultdict(list)
    for it in test:
        by_hop[it.hops or 0].append(it)
    lines = ["# Synthesized questions: quality report", ""]
    lines += ["| split | questions | " + " | ".join(f"{h} hop" for h in sorted(by_hop)) + " |"]
    lines += ["|---|---|" + "---|" * len(by_hop)]
    for s, items in splits.items():
        lines.append(
            f"| {s} | {len(items)} | "
            + " | ".join(str(per_hop[s].get(h, 0)) for h in sorted(by_hop))
            + " |"
        )
    lines.append("")
    if shortfall:
        lines += ["Unfilled quotas (the hop mix is not exact):", ""]
        lines += [
            f"- {s['split']} {s['hops']}-hop: {s['got']} of {s['wanted']}; {s['why']}"
            for s in shortfall
        ]
    else:
        lines.append("Every split's hop mix is exact (each per-hop quota is filled).")
    if overlaps is not None:
        lines += [
            "",
            "Held-out questions that leak into the training data (framework/data/leakage.py; "
            "0 of every kind is required): "
            + ", ".join(f"{k} {v}" for k, v in overlaps.items())
            + ".",
        ]
    if answers:
        lines += [
            "",
            "Distinct answers: "
            + "; ".join(
                f"{s} {a['distinct_answers']} of {a['questions']} questions (at most "
                f"{a['max_repeats']} per answer)"
                for s, a in answers.items()
            )
            + ".",
        ]
    rej = sampling["rejections"]
    lines += [
        "",
        f"Walks sampled: {sampling['attempts']}; rejected: "
        + ", ".join(f"{k} {v}" for k, v in sorted(rej.items()))
        + "; skipped: "
        + ", ".join(f"{k} {v}" for k, v in sorted(sampling["skipped"].items()))
        + f". Answer-uniqueness rejections: {rej.get('answer_not_unique', 0)}.",
        "",
    ]
    if answerability_rates:
        a = answerability_rates
        lines += [
            f"Answerability (every hop's evidence document is in the corpus and in the top "
            f"{a['k']} of the `{a['retriever']}` retriever for a query built from the question): "
            f"{a['rate']:.3f} of {a['checked']} generated questions; dropped {a['dropped']}.",
            "",
            "| hops | answerable |",
            "|---|---|",
            *[f"| {h} | {r:.3f} |" for h, r in sorted(a["per_hop"].items())],
            "",
        ]
    g = graph_stats
    lines += [
        f"Entity graph: {g['articles']} articles, {g['edges']} edges, {g['articles_with_out_edges']} "
        f"articles with out-links, {g['hubs_over_max_in_degree']} hubs excluded as bridges/answers.",
        "",
        "## Sample questions (test split)",
        "",
    ]
    for h in sorted(by_hop):
        for it in rng.sample(by_hop[h], min(samples_per_hop, len(by_hop[h]))):
            lines.append(
                f"- ({h} hop) {it.question}  \n  answer: {it.golden_answers[0]}; chain: {' -> '.join(it.chain or ())}"
            )
    return data, "\n".join(lines) + "\n"


def write_report(directory: Path, data: dict[str, Any], markdown: str) -> Path:
    (directory / "quality_report.json").write_text(json.dumps(data, indent=2, ensure_ascii=False))
    path = directory / "quality_report.md"
    path.write_text(markdown)
    return path
