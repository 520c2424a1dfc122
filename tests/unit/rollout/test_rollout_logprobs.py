"""The rollout backend's per-token log-probs: the sampler's, the decoding loop's against the tiny
model's filtered and tempered logits, the backends' generations, the agent loop's alignment with
``token_ids``, and vLLM's output read back."""

from __future__ import annotations

import copy
import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch

from framework.rollout.config import AgentConfig
from framework.rollout.decoding import (
    decode_with_logprobs,
    filter_logits,
    sample_tokens,
    sample_with_logprobs,
)
from framework.rollout.engine import AgentLoop
from framework.rollout.hf_backend import (
    SamplingConfig,
    TransformersBackend,
    TransformersBackendConfig,
    cut_generation,
)
from framework.rollout.parser import STOP_STRINGS
from framework.rollout.vllm_backend import sampled_logprobs
from framework.types import Generation

from .fakes import FakeBackend, FakeRetriever, FakeTokenizer, search_call

LOGP = torch.tensor([[math.log(0.5), math.log(0.3), math.log(0.15), math.log(0.05)]])


# -- the sampler -----------------------------------------------------------------------------------
def test_sampler_logprob_is_of_the_filtered_renormalised_distribution():
    torch.manual_seed(0)
    picked, logp = sample_with_logprobs(LOGP.expand(200, 4), 1.0, top_p=0.7)
    # the nucleus keeps tokens 0 and 1 (0.5 + 0.3): renormalised 0.625 and 0.375
    want = {0: math.log(0.5 / 0.8), 1: math.log(0.3 / 0.8)}
    assert set(picked.tolist()) == {0, 1}
    for tok, lp in zip(picked.tolist(), logp.tolist(), strict=True):
        assert lp == pytest.approx(want[tok], abs=1e-6)


def test_sampler_logprob_at_temperature_two_and_zero():
    torch.manual_seed(1)
    picked, logp = sample_with_logprobs(LOGP, 2.0)
    p = torch.tensor([0.5, 0.3, 0.15, 0.05]).sqrt()  # softmax(log p / 2) = sqrt(p) renormalised
    assert logp.item() == pytest.approx(math.log(p[picked.item()] / p.sum()), abs=1e-6)
    # greedy: the argmax with its unprocessed log-softmax
    picked, logp = sample_with_logprobs(torch.tensor([[0.0, 2.0, 1.0]]), 0.0)
    assert picked.tolist() == [1]
    assert logp.item() == pytest.approx(2.0 - math.log(1 + math.e**2 + math.e), abs=1e-6)


def test_sampler_draws_the_same_tokens_as_sample_tokens():
    rows = LOGP.expand(500, 4)
    torch.manual_seed(7)
    plain = sample_tokens(rows, 1.3, top_k=3)
    torch.manual_seed(7)
    picked, _ = sample_with_logprobs(rows, 1.3, top_k=3)
    assert torch.equal(plain, picked)


# -- the decoding loop on the tiny model -----------------------------------------------------------
@pytest.fixture(scope="module")
def tiny64(tiny_policy):
    model, tok = tiny_policy
    return copy.deepcopy(model).double(), tok


def _sequences(tok) -> list[list[int]]:
    texts = ["Hi", "Where was the director of Jaws born?", "<think>Search the film first.</think>"]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.7, 50, 0.9), (0.0, 0, 1.0)]
)
def test_loop_logprobs_are_log_softmax_of_the_processed_logits(tiny64, temperature, top_k, top_p):
    """Each returned log-prob equals log_softmax(filter(logits / T)) of a full forward pass over
    the sequence so far (log_softmax(logits) at T = 0), at the token that was drawn."""
    model, tok = tiny64
    seqs, limits = _sequences(tok), [5, 7, 6]
    torch.manual_seed(0)
    new, logps = decode_with_logprobs(
        model,
        seqs,
        limits,
        stop=[],
        eos_ids=set(),
        pad_id=0,
        token_text=tok.decode,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
    )
    for seq, gen, got in zip(seqs, new, logps, strict=True):
        assert len(got) == len(gen) > 0
        full = torch.tensor([seq + gen])
        with torch.no_grad():
            logits = model(input_ids=full).logits[0, len(seq) - 1 : -1]  # predicts gen[i]
        logits = logits.float()
        if temperature > 0:
            logits = filter_logits(logits / temperature, top_k, top_p)
        want = torch.log_softmax(logits, -1).gather(-1, torch.tensor(gen).unsqueeze(-1))
        assert torch.allclose(torch.tensor(got), want.squeeze(-1), atol=1e-4), (got, want)


def _backend(model, tok, decoder, temperature=1.0) -> TransformersBackend:
    cfg = TransformersBackendConfig(
        sampling=SamplingConfig(temperature=temperature, seed=3), decoder=decoder
    )
    return TransformersBackend(cfg=cfg, model=model, tokenizer=tok)


@pytest.mark.slow
def test_backend_generations_carry_logprobs_with_the_loop_only(tiny64):
    model, tok = tiny64
    seqs, limits = _sequences(tok), [4, 9, 13]
    loop = _backend(model, tok, "loop").generate(seqs, limits, STOP_STRINGS)
    for g in loop:
        assert g.logprobs is not None and len(g.logprobs) == len(g.token_ids)
        assert all(lp <= 0.0 for lp in g.logprobs)
    generate = _backend(model, tok, "generate", temperature=0.0).generate(
        seqs, limits, STOP_STRINGS
    )
    assert all(g.logprobs is None for g in generate)


def test_cut_generation_cuts_the_logprobs_with_the_tokens():
    decode = lambda ids: "".join(chr(96 + i) for i in ids)  # noqa: E731  1 -> "a", 2 -> "b", ...
    gen = cut_generation([1, 2, 3, 4], ["bc"], {9}, 10, decode, [-0.1, -0.2, -0.3, -0.4])
    assert gen == Generation([1, 2, 3], "stop")
    assert gen.logprobs == [-0.1, -0.2, -0.3]
    assert cut_generation([1, 2], [], set(), 10, decode).logprobs is None
    # log-probs take no part in equality
    assert Generation([1], "eos", [-1.0]) == Generation([1], "eos")


# -- the agent loop --------------------------------------------------------------------------------
class LogprobBackend(FakeBackend):
    """The scripted backend, with log-prob ``-(turn + 1) / 100 - i / 1000`` on the i-th token of
    each turn; turns listed in ``without`` come back without log-probs."""

    def __init__(self, *args, without: tuple[int, ...] = (), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.without = without
        self.n_calls = 0

    def generate(self, sequences, max_new_tokens, stop):
        gens = super().generate(sequences, max_new_tokens, stop)
        turn = self.n_calls
        self.n_calls += 1
        if turn in self.without:
            return gens
        return [
            dataclasses.replace(
                g, logprobs=[-(turn + 1) / 100 - i / 1000 for i in range(len(g.token_ids))]
            )
            for g in gens
        ]


def _run(backend):
    cfg = AgentConfig(system_prompt="Tools: search.")
    return AgentLoop(backend, FakeRetriever(), cfg).run(["Who directed Jaws?"], 1)


SCRIPT = [
    "<think>Search.</think>" + search_call("Jaws director"),
    "<think>Spielberg.</think><answer>Steven Spielberg</answer>",
]


def test_agent_loop_aligns_rollout_logprobs_with_token_ids():
    [t] = _run(LogprobBackend(FakeTokenizer(), [SCRIPT]))
    lp = t.rollout_logprobs
    assert lp is not None and len(lp) == len(t.token_ids)
    assert lp[: t.prompt_len] == [0.0] * t.prompt_len
    # 0.0 on every token the model did not generate (prompt, tool response)
    assert all(x == 0.0 for x, m in zip(lp, t.loss_mask, strict=True) if m == 0)
    # the generated tokens carry each turn's log-probs, in order
    for turn, span in enumerate(t.turns):
        want = [-(turn + 1) / 100 - i / 1000 for i in range(span.end - span.start)]
        assert lp[span.start : span.end] == pytest.approx(want)
    assert len(t.turns) == 2 and t.status == "ok"


def test_agent_loop_without_logprobs_leaves_none():
    [t] = _run(FakeBackend(FakeTokenizer(), [SCRIPT]))
    assert t.rollout_logprobs is None
    [t] = _run(LogprobBackend(FakeTokenizer(), [SCRIPT], without=(1,)))  # second turn lacks them
    assert t.rollout_logprobs is None


# -- vLLM's output ---------------------------------------------------------------------------------
def test_vllm_sampled_logprobs_are_read_per_token():
    entry = lambda x: SimpleNamespace(logprob=x, rank=1)  # noqa: E731
    out = SimpleNamespace(
        token_ids=[5, 9], logprobs=[{5: entry(-0.5)}, {9: entry(-1.25), 3: entry(-0.1)}]
    )
    assert sampled_logprobs(out) == [-0.5, -1.25]
    assert sampled_logprobs(SimpleNamespace(token_ids=[5], logprobs=None)) is None
    assert sampled_logprobs(SimpleNamespace(token_ids=[5], logprobs=[{4: entry(-0.2)}])) is None
    assert sampled_logprobs(SimpleNamespace(token_ids=[], logprobs=[])) == []
