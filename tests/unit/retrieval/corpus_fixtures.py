"""A ten-document Search-R1 JSONL corpus and a deterministic fake sentence encoder.

Shared by the corpus, dense and BM25/hybrid unit tests. Nothing here loads a real model: the fake
encoder is a hashed bag of words (every alphabetic word adds a signed code over 4 of :data:`DIM`
buckets chosen by md5, so the embeddings are the same in every process), L2-normalised, and it
counts its calls.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from framework.retrieval.bm25 import BM25Params, BM25RetrieverConfig
from framework.retrieval.corpus import CorpusConfig
from framework.retrieval.dense import DenseIndexConfig, FaissRetrieverConfig
from framework.retrieval.encoder import EncoderConfig
from framework.retrieval.types import QueryLimits

#: (doc_id, title, text): distinct topics, each with words no other document uses.
DOCS: list[tuple[str, str, str]] = [
    (
        "d1",
        "Jaws (film)",
        "Jaws is a 1975 American thriller film directed by Steven Spielberg, based on the novel "
        "by Peter Benchley. A great white shark attacks beachgoers on Amity Island.",
    ),
    (
        "d2",
        "Mount Everest",
        "Mount Everest is Earth's highest mountain above sea level, located in the Mahalangur "
        "Himal sub-range of the Himalayas on the border between Nepal and China.",
    ),
    (
        "d3",
        "Photosynthesis",
        "Photosynthesis is the process by which green plants and algae convert light energy into "
        "chemical energy, releasing oxygen and fixing carbon dioxide.",
    ),
    (
        "d4",
        "Ada Lovelace",
        "Ada Lovelace was an English mathematician and writer, chiefly known for her work on "
        "Charles Babbage's proposed mechanical computer, the Analytical Engine.",
    ),
    (
        "d5",
        "Great Barrier Reef",
        "The Great Barrier Reef is the world's largest coral reef system, composed of thousands "
        "of individual reefs off the coast of Queensland, Australia.",
    ),
    (
        "d6",
        "Bossa nova",
        "Bossa nova is a style of Brazilian music that developed in Rio de Janeiro in the late "
        "1950s, blending samba rhythms with jazz harmonies.",
    ),
    (
        "d7",
        "Tardigrade",
        "Tardigrades, known as water bears or moss piglets, are eight-legged microscopic animals "
        "that survive extreme radiation, dehydration and the vacuum of space.",
    ),
    (
        "d8",
        "Hanseatic League",
        "The Hanseatic League was a medieval commercial and defensive confederation of merchant "
        "guilds and market towns in Northern Europe, centred on Lubeck.",
    ),
    (
        "d9",
        "Espresso",
        "Espresso is a coffee brewing method of Italian origin, in which nearly boiling water is "
        "forced under pressure through finely ground coffee beans.",
    ),
    (
        "d10",
        "Saturn",
        "Saturn is the sixth planet from the Sun and the second largest in the Solar System, "
        "famous for its prominent ring system made of ice and rock.",
    ),
]

#: passage_id -> row in the store (the JSONL order, every document one passage when unchunked).
ROW = {doc_id: i for i, (doc_id, _, _) in enumerate(DOCS)}

DIM = 64

#: Words the fake encoder treats as the same (a stand-in for what a real dense model "knows").
SYNONYMS = {"cinema": "film", "movie": "film"}

#: Small limits so limit errors are cheap to trigger.
LIMITS = QueryLimits(max_queries=4, max_query_chars=200, max_k=50)


def contents(title: str, text: str) -> str:
    """Search-R1's ``contents``: the quoted title, a newline, the text."""
    return f'"{title}"\n{text}'


def write_jsonl(path: Path, docs: Sequence[tuple[str, str, str]] = DOCS) -> Path:
    """Write ``docs`` as a Search-R1 JSONL file; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for doc_id, title, text in docs:
            fh.write(json.dumps({"id": doc_id, "contents": contents(title, text)}) + "\n")
    return path


def passage_texts(docs: Sequence[tuple[str, str, str]] = DOCS) -> list[str]:
    """What the index encodes for each unchunked passage (title, newline, text), in row order."""
    return [f"{title}\n{text}" for _, title, text in docs]


#: Words the fake encoder drops (they would otherwise dominate a 64-dimensional sketch).
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "based",
        "between",
        "by",
        "for",
        "from",
        "her",
        "in",
        "into",
        "is",
        "its",
        "known",
        "made",
        "of",
        "off",
        "on",
        "or",
        "that",
        "the",
        "through",
        "to",
        "under",
        "was",
        "which",
        "with",
    ]
)


def words(text: str) -> list[str]:
    """Lower-cased word tokens minus stopwords; tokens with digits are invisible to the encoder."""
    tokens = re.findall(r"[a-z0-9]+", text.lower())
    return [SYNONYMS.get(t, t) for t in tokens if t.isalpha() and t not in STOPWORDS]


def word_code(word: str) -> np.ndarray:
    """A word's sparse signed code: +-1 in 4 of the DIM buckets, chosen by md5 (a count sketch)."""
    digest = hashlib.md5(word.encode()).digest()
    code = np.zeros(DIM, dtype=np.float32)
    for j in range(4):
        code[digest[j] % DIM] += 1.0 if digest[4 + j] & 1 else -1.0
    return code


def embed(texts: Sequence[str]) -> np.ndarray:
    """Sum of the word codes, L2-normalised (all-zero rows stay zero), float32 ``[n, DIM]``."""
    out = np.zeros((len(texts), DIM), dtype=np.float32)
    for i, text in enumerate(texts):
        for w in words(text):
            out[i] += word_code(w)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)


class FakeEncoder:
    """The :class:`~framework.retrieval.encoder.SentenceEncoder` interface without a model.

    Args:
        cfg: the encoder config the retriever is configured with (prefixes are applied).
        fail_after: raise RuntimeError on the passage batch after this many successful ones.
    """

    dim = DIM

    def __init__(self, cfg: EncoderConfig | None = None, fail_after: int | None = None) -> None:
        self.cfg = cfg or EncoderConfig()
        self.fail_after = fail_after
        self.query_calls = 0
        self.passage_calls = 0
        self.passages_encoded = 0

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        self.query_calls += 1
        return embed([self.cfg.query_prefix + q for q in queries])

    def encode_passages(self, passages: Sequence[str], *, progress: bool = False) -> np.ndarray:
        if self.fail_after is not None and self.passage_calls >= self.fail_after:
            raise RuntimeError("fake encoder interrupted")
        self.passage_calls += 1
        self.passages_encoded += len(passages)
        return embed([self.cfg.passage_prefix + p for p in passages])


def corpus_cfg(path: Path, **kw) -> CorpusConfig:
    return CorpusConfig(source="jsonl", path=str(path), **kw)


def faiss_cfg(
    corpus_path: Path, cache_dir: Path, *, corpus: dict | None = None, **index
) -> FaissRetrieverConfig:
    """A faiss config over ``corpus_path`` caching under ``cache_dir`` (index fields as kwargs)."""
    # float32 storage: the exactness tests compare scores with numpy's float32 brute force
    encoder = index.pop("encoder", None) or EncoderConfig(store_dtype="float32")
    build = index.pop("build_if_missing", True)
    return FaissRetrieverConfig(
        name="faiss",
        limits=LIMITS,
        corpus=corpus_cfg(corpus_path, **(corpus or {})),
        cache_dir=str(cache_dir),
        build_if_missing=build,
        progress=False,
        encoder=encoder,
        index=DenseIndexConfig(**index),
    )


def bm25_cfg(corpus_path: Path, cache_dir: Path, **params) -> BM25RetrieverConfig:
    build = params.pop("build_if_missing", True)
    return BM25RetrieverConfig(
        name="bm25",
        limits=LIMITS,
        corpus=corpus_cfg(corpus_path),
        cache_dir=str(cache_dir),
        build_if_missing=build,
        progress=False,
        bm25=BM25Params(**params),
    )
