"""``retriever.encoder.family``: e5 and bge fill the prefixes a config leaves empty, explicit prefixes
win, and the resolved prefixes (not the family's name) key the embeddings and the index."""

from __future__ import annotations

import pytest

from framework.retrieval.embeddings import embeddings_path
from framework.retrieval.encoder import (
    EncoderConfig,
    encoder_fingerprint,
    fingerprint_key,
    resolved_prefixes,
)
from tests.unit.retrieval.corpus_fixtures import faiss_cfg

BGE_QUERY = "Represent this sentence for searching relevant passages: "


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [
        (EncoderConfig(), ("", "")),
        (EncoderConfig(family="e5"), ("query: ", "passage: ")),
        (EncoderConfig(family="bge"), (BGE_QUERY, "")),
        # a prefix set explicitly wins; only the empty one is filled
        (EncoderConfig(family="e5", query_prefix="q: "), ("q: ", "passage: ")),
        (EncoderConfig(family="bge", passage_prefix="doc: "), (BGE_QUERY, "doc: ")),
        (EncoderConfig(query_prefix="query: "), ("query: ", "")),
    ],
)
def test_family_fills_the_empty_prefixes(cfg, expected):
    assert resolved_prefixes(cfg) == expected


def test_a_family_and_the_same_prefixes_set_by_hand_are_one_encoder():
    by_family = encoder_fingerprint(EncoderConfig(family="e5"))
    by_hand = encoder_fingerprint(EncoderConfig(query_prefix="query: ", passage_prefix="passage: "))
    assert by_family == by_hand
    assert by_family["passage_prefix"] == "passage: " and "family" not in by_family
    assert fingerprint_key(by_family) != fingerprint_key(encoder_fingerprint(EncoderConfig()))


def test_the_passage_prefix_keys_the_embeddings_and_the_query_prefix_only_the_index(tmp_path):
    def emb(**kw):
        return embeddings_path(
            faiss_cfg(tmp_path / "c.jsonl", tmp_path, encoder=EncoderConfig(**kw)), "c"
        )

    assert emb(family="e5") != emb()  # "passage: " changes every passage embedding
    assert emb(family="bge") == emb()  # bge prefixes queries only: the passages are reused
    assert encoder_fingerprint(EncoderConfig(family="bge")) != encoder_fingerprint(EncoderConfig())


def test_fp32_fingerprints_stay_as_before_the_new_fields():
    # the fingerprint of a float32 build without a family, as it was before store_dtype, family,
    # shard_rows and devices existed: caches and manifests made then stay valid
    fp = encoder_fingerprint(EncoderConfig(store_dtype="float32", shard_rows=7, devices=["cpu"]))
    assert set(fp) == {
        "model",
        "model_hash",
        "query_prefix",
        "passage_prefix",
        "normalize",
        "max_length",
        "dtype",
    }
    assert encoder_fingerprint(EncoderConfig())["store_dtype"] == "float16"


def test_bad_family_store_dtype_shards_and_devices_are_all_reported():
    cfg = EncoderConfig(family="gte", store_dtype="int8", shard_rows=0, devices=["gpu", "cuda:1"])
    problems = cfg.problems()
    assert [p.path for p in problems] == ["store_dtype", "family", "shard_rows", "devices"]
    assert problems[-1].got == ["gpu"]


def test_the_encoder_applies_the_family_prefixes():
    import numpy as np

    from framework.retrieval.encoder import SentenceEncoder

    enc = SentenceEncoder(EncoderConfig(family="e5"))  # the packaged MiniLM
    assert (enc.query_prefix, enc.passage_prefix) == ("query: ", "passage: ")
    text = "capital of France"

    def by_hand(prefix: str) -> np.ndarray:
        return enc.model.encode([prefix + text], normalize_embeddings=True)

    np.testing.assert_array_equal(enc.encode_queries([text]), by_hand("query: "))
    np.testing.assert_array_equal(enc.encode_passages([text]), by_hand("passage: "))
    assert not np.allclose(enc.encode_queries([text]), by_hand(""), atol=1e-3)  # it matters
