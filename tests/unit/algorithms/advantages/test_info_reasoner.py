"""InfoReasoner (partial; framework/algorithms/advantages/info_reasoner.py, the context_gain input in
framework/rl/providers.py) against the authors' reward (github.com/dl-m9/InfoReasoner,
``compute_score_em``): EM + 0.6 IG, IG the reader's belief with the retrieved text minus without."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.advantages.grpo import GRPOAdvantageConfig, grpo_advantage
from framework.algorithms.advantages.info_reasoner import (
    InfoReasonerConfig,
    info_reasoner_advantage,
    reader_prompt,
)
from framework.data.schema import QAItem
from framework.registry import load_components
from framework.rl import providers
from framework.rl.batch import RolloutBatch
from framework.rl.inputs import InputContext, provide_inputs
from framework.types import AdvantageInputs, Trajectory, TurnSpan
from tests.unit.training.conftest import tiny_policy  # noqa: F401  (fixture)

load_components(plugins=False)
CFG = InfoReasonerConfig(name="info_reasoner")


def advantage(rewards, gains, cfg=CFG):
    n = len(rewards)
    return info_reasoner_advantage(
        AdvantageInputs(
            torch.tensor(rewards), torch.zeros(n, dtype=torch.long), extras={"context_gain": gains}
        ),
        cfg=cfg,
    )


def test_worked_example():
    # EM [1, 0, 0, 0], gains [0.2, 0.5, 0, -0.1]: rewards + 0.6 gain = [1.12, 0.3, 0, -0.06],
    # mean 0.34, deviations [0.78, -0.04, -0.34, -0.40], Bessel std sqrt(0.8856 / 3) = 0.54332
    got = advantage([1.0, 0.0, 0.0, 0.0], [0.2, 0.5, 0.0, -0.1])
    assert_close(got, torch.tensor([1.43561, -0.07362, -0.62578, -0.73621]), atol=1e-4, rtol=0)
    assert abs(float(got.sum())) < 1e-5  # zero group mean


def test_weight_zero_is_grpo():
    rewards = [1.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    got = advantage(
        rewards, [0.3, -0.2, 0.0, 0.9, 0.1, 0.0], InfoReasonerConfig(name="i", weight=0)
    )
    want = grpo_advantage(
        AdvantageInputs(torch.tensor(rewards), torch.zeros(6, dtype=torch.long)),
        cfg=GRPOAdvantageConfig(name="grpo"),
    )
    assert_close(got, want)


def test_the_reader_prompt_is_the_authors():
    assert reader_prompt("Who directed Jaws?", None, 512) == (
        "Answer the following question as briefly as possible.\n"
        "Question: Who directed Jaws?\nAnswer:"
    )
    assert reader_prompt("Q?", "one two  three\nfour", 3) == (
        "Answer the following question as briefly as possible.\n"
        "Context: one two three\nQuestion: Q?\nAnswer:"
    )


JAWS = QAItem("q0", "Who directed Jaws?", ("Steven Spielberg", "Spielberg"), None, 1, None, "t")


def rollout(answer, evidence):
    turns = [TurnSpan(1, 2, evidence=e) for e in evidence]
    return Trajectory(0, 0, [1, 2, 3], [0, 1, 1], 1, answer=answer, turns=turns)


def test_the_gain_is_the_best_alias_with_the_evidence_minus_without(monkeypatch):
    # a reader that believes "Spielberg" 0.5 with a context naming him, 0.1 without, and the full
    # name half of that: the gain is max(0.25, 0.5) - max(0.05, 0.1) = 0.4; a context without him
    # gives 0.2 / 0.1 -> 0.2 - 0.1 = 0.1
    calls = []

    def belief(policy, tokenizer, prompts, answers, *, pad_id, batch_size):
        calls.append(len(prompts))
        out = []
        for p, a in zip(prompts, answers, strict=True):
            b = 0.5 if "Spielberg" in p else 0.2 if "Context:" in p else 0.1
            out.append(b if a == "Spielberg" else b / 2)
        return out

    monkeypatch.setattr(providers, "reader_belief", belief)
    trajs = [
        rollout("Spielberg", ["Jaws was directed by Spielberg.", ""]),
        rollout("Lucas", ["A shark film."]),
        rollout("Spielberg", []),  # retrieved nothing: 0
        rollout(None, ["Jaws was directed by Spielberg."]),  # no answer: 0
    ]
    batch = RolloutBatch.build(trajs, [JAWS], pad_id=0)
    got = provide_inputs({"advantage": CFG}, InputContext(None, None, batch))["context_gain"]
    assert got.tolist() == pytest.approx([0.4, 0.1, 0.0, 0.0])
    assert calls == [6]  # one no-context prompt per alias, and one per alias per rollout with both


def test_the_belief_is_the_teacher_forced_answer_probability(tiny_policy):  # noqa: F811
    model, tok = tiny_policy
    prompt = reader_prompt(JAWS.question, "Jaws (1975) was directed by Steven Spielberg.", 512)
    got = providers.reader_belief(
        model, tok, [prompt, prompt], ["Steven Spielberg", "Boston"], pad_id=tok.pad_token_id
    )
    # by hand: the softmax of the logits before each answer token, multiplied
    head = tok.encode(prompt, add_special_tokens=False)
    for answer, belief in zip(["Steven Spielberg", "Boston"], got, strict=True):
        tail = tok.encode(" " + answer, add_special_tokens=False)
        ids = torch.tensor([head + tail])
        with torch.no_grad():
            probs = model(input_ids=ids).logits.float().softmax(-1)[0]
        want = 1.0
        for j, token in enumerate(tail):
            want *= float(probs[len(head) + j - 1, token])
        assert belief == pytest.approx(want, rel=1e-3)


def test_bad_settings_are_refused():
    bad = InfoReasonerConfig(name="i", weight=-1, max_context_words=0, probe_batch_size=0)
    assert [p.path for p in bad.problems()] == ["weight", "max_context_words", "probe_batch_size"]
