"""InfoReasoner (reconstructed; framework/algorithms/semantic_gain.py, the evidence_similarity
input in framework/rl/providers.py) against ../shared/METHODS-2.md item 15."""

from __future__ import annotations

import math

import numpy as np
import pytest

from framework.algorithms.semantic_gain import InfoReasonerConfig, info_reasoner_advantage
from framework.algorithms.turn_advantages import IGPOAdvantageConfig, igpo_advantage
from framework.rl.providers import _encoder, evidence_similarities
from tests.unit.algorithms.test_turn_advantages import layout, per_turn


def test_it_is_igpo_with_the_similarity_as_belief():
    sims = [[0.0, 0.4, 0.7], [0.0, 0.1, 0.0]]
    case = dict(
        rollouts=[[(2, 1), (2, 1), (2, 0)], [(2, 1), (2, 0)]], groups=[0, 0], rewards=[1.0, 0.0]
    )
    got = per_turn(
        info_reasoner_advantage(
            layout(**case, extras={"evidence_similarity": sims}),
            cfg=InfoReasonerConfig(name="info_reasoner"),
        ),
        layout(**case, extras={"evidence_similarity": sims}),
    )
    want = per_turn(
        igpo_advantage(
            layout(**case, extras={"answer_probs": sims}), cfg=IGPOAdvantageConfig(name="igpo")
        ),
        layout(**case, extras={"answer_probs": sims}),
    )
    assert got == want
    # by hand: turn rewards {0.4, 0.3, 1.0} and {0.1, 0.0}: mean 0.36, unbiased std s
    s = math.sqrt(sum((r - 0.36) ** 2 for r in (0.4, 0.3, 1.0, 0.1, 0.0)) / 4) + 1e-6
    z = [(r - 0.36) / s for r in (0.4, 0.3, 1.0, 0.1, 0.0)]
    assert got[0] == pytest.approx([z[0] + z[1] + z[2], z[1] + z[2], z[2]], rel=1e-5)
    assert got[1] == pytest.approx([z[3] + z[4], z[4]], rel=1e-5)


def test_similarities_are_of_the_evidence_so_far():
    vectors = {"a": [1.0, 0.0], "b": [0.0, 1.0], "a\nb": [0.6, 0.8], "gold": [0.6, 0.8]}

    def encode(texts):
        return np.array([vectors[t] for t in texts], dtype=np.float32)

    got = evidence_similarities([["a", "b", ""], ["", ""]], ["gold", "gold"], encode)
    # rollout 0: before turn 0 nothing (0), before turn 1 "a" (0.6), before turn 2 "a\nb" (1.0);
    # rollout 1 saw no evidence
    assert got.tolist() == [pytest.approx([0.0, 0.6, 1.0]), [0.0, 0.0, 0.0]]


def test_the_packaged_encoder_rates_evidence_naming_the_answer_higher():
    encode = _encoder(None).encode_passages
    got = evidence_similarities(
        [["", ""], ["", ""]],
        ["Steven Spielberg", "Steven Spielberg"],
        encode,
    )
    assert got.abs().sum() == 0
    got = evidence_similarities(
        [
            ["Jaws is a 1975 film directed by Steven Spielberg.", ""],
            ["Boston is the capital of Massachusetts.", ""],
        ],
        ["Steven Spielberg", "Steven Spielberg"],
        encode,
    )
    assert float(got[0, 1]) > float(got[1, 1]) + 0.2
