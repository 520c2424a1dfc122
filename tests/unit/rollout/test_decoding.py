"""The decoding loop: hand cases for the sampling filters, agreement with ``model.generate``,
finished rows leaving the batch, and KV prefix reuse giving the same tokens as a full prefill."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from framework.rollout.decoding import PrefixCache, _Entry, filter_logits, sample_tokens
from framework.rollout.hf_backend import (
    SamplingConfig,
    TransformersBackend,
    TransformersBackendConfig,
)
from framework.rollout.parser import STOP_STRINGS

LOGP = torch.tensor([[math.log(0.5), math.log(0.3), math.log(0.15), math.log(0.05)]])
NEG = float("-inf")


def test_nucleus_keeps_tokens_whose_more_likely_mass_is_below_top_p():
    # mass before each token, most likely first: 0, 0.5, 0.8, 0.95
    assert torch.isinf(filter_logits(LOGP, top_p=0.7)).tolist() == [[False, False, True, True]]
    assert torch.isinf(filter_logits(LOGP, top_p=0.5)).tolist() == [[False, True, True, True]]
    assert torch.isinf(filter_logits(LOGP, top_p=0.96)).tolist() == [[False] * 4]
    assert torch.isinf(filter_logits(LOGP, top_p=0.01)).tolist() == [[False, True, True, True]]
    # the order of the vocabulary does not matter
    shuffled = LOGP[:, [2, 0, 3, 1]]
    assert torch.isinf(filter_logits(shuffled, top_p=0.7)).tolist() == [[True, False, True, False]]


def test_top_k_and_both_filters():
    assert torch.isinf(filter_logits(LOGP, top_k=3)).tolist() == [[False, False, False, True]]
    assert torch.equal(filter_logits(LOGP, top_k=0), LOGP)
    assert torch.equal(filter_logits(LOGP, top_k=4), LOGP)
    both = filter_logits(LOGP, top_k=2, top_p=0.99)  # top-k first, then the nucleus of the rest
    assert torch.isinf(both).tolist() == [[False, False, True, True]]


def test_greedy_and_sampling_frequencies():
    logits = torch.tensor([[0.0, 2.0, 1.0], [5.0, NEG, 4.0]])
    assert sample_tokens(logits, 0.0).tolist() == [1, 0]
    torch.manual_seed(0)
    rows = LOGP.expand(40_000, 4)
    counts = torch.bincount(sample_tokens(rows, 1.0), minlength=4).float() / 40_000
    assert torch.allclose(counts, torch.tensor([0.5, 0.3, 0.15, 0.05]), atol=0.01)
    # temperature 2 flattens: p ~ sqrt(p) renormalised
    flat = torch.tensor([0.5, 0.3, 0.15, 0.05]).sqrt()
    counts = torch.bincount(sample_tokens(rows, 2.0), minlength=4).float() / 40_000
    assert torch.allclose(counts, flat / flat.sum(), atol=0.01)
    # a filtered (probability 0) token is never drawn, even when it is the first one
    masked = torch.tensor([[NEG, 0.0, NEG, 0.0]]).expand(5_000, 4)
    assert set(sample_tokens(masked, 1.0).tolist()) == {1, 3}
    assert set(sample_tokens(LOGP.expand(5_000, 4), 1.0, top_p=0.7).tolist()) == {0, 1}


def test_prefix_cache_hands_out_the_longest_proper_prefix_once():
    kv = [(torch.zeros(1, 1, 1), torch.zeros(1, 1, 1))]
    cache = PrefixCache(max_tokens=10)
    for tokens in [(1, 2), (1, 2, 3), (1, 2, 3, 4), (9,)]:
        cache.put(_Entry(tokens, kv))
    assert cache.take([1, 2, 3, 4]).tokens == (1, 2, 3)  # (1, 2, 3, 4) is not a proper prefix
    assert cache.take([1, 2, 3, 5]).tokens == (1, 2)  # (1, 2, 3) was handed out
    assert cache.take([7, 1, 2]) is None
    assert (cache.hits, cache.reused_tokens, len(cache)) == (2, 5, 2)
    cache.put(_Entry((5,) * 7, kv))  # 4 + 1 + 7 > 10: the oldest entry goes
    assert cache.tokens == 8 and cache.take([1, 2, 3, 4, 5]) is None
    cache.put(_Entry((6,) * 11, kv))  # larger than the whole cache: not kept
    assert cache.tokens == 8
    cache.clear()
    assert len(cache) == 0


# -- with the tiny policy (float64, so that reordered sums cannot flip a token) --------------------
@pytest.fixture(scope="module")
def tiny64(tiny_policy):
    model, tok = tiny_policy
    return copy.deepcopy(model).double(), tok


def backend(model, tok, decoder="loop", temperature=0.0, **kw) -> TransformersBackend:
    cfg = TransformersBackendConfig(
        sampling=SamplingConfig(temperature=temperature, seed=3), decoder=decoder, **kw
    )
    return TransformersBackend(cfg=cfg, model=model, tokenizer=tok)


def sequences(tok) -> list[list[int]]:
    texts = ["Hi", "Where was the director of Jaws born?", "<think>Search the film first.</think>"]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


@pytest.mark.slow
def test_loop_equals_model_generate_greedy(tiny64):
    model, tok = tiny64
    seqs, limits = sequences(tok), [4, 9, 13]
    ours = backend(model, tok).generate(seqs, limits, STOP_STRINGS)
    theirs = backend(model, tok, decoder="generate").generate(seqs, limits, STOP_STRINGS)
    assert ours == theirs
    assert [len(g.token_ids) for g in ours] == limits  # the random policy never stops early


def test_finished_rows_leave_the_batch(tiny64):
    model, tok = tiny64
    sizes = []
    hook = model.register_forward_pre_hook(
        lambda m, a, kw: sizes.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        backend(model, tok).generate(sequences(tok), [1, 3, 5], STOP_STRINGS)
    finally:
        hook.remove()
    assert [len(s) for s in sequences(tok)] == [1, 9, 11]
    # prefill in groups of like length (1 alone; 9 and 11 together: 22 positions for 20 tokens),
    # then one decoding batch whose rows leave as they end (after 1, 3 and 5 tokens)
    assert sizes == [(1, 1), (2, 11), (2, 1), (2, 1), (1, 1), (1, 1)]


def two_turns(model, tok, prefix_cache_tokens: int):
    """Sampled generation, then each sequence extended by its output and a 'tool response'."""
    b = backend(model, tok, temperature=1.0, prefix_cache_tokens=prefix_cache_tokens)
    seqs = sequences(tok)
    first = b.generate(seqs, [6, 8, 5], STOP_STRINGS)
    second_in = [
        s + g.token_ids + tok.encode(f"<tool_response>doc {i}</tool_response>")
        for i, (s, g) in enumerate(zip(seqs, first))
    ]
    second = b.generate(second_in, [7, 4, 6], STOP_STRINGS)
    return first, second, b


@pytest.mark.slow
def test_prefix_reuse_gives_the_tokens_of_a_full_prefill(tiny64):
    model, tok = tiny64
    first, second, reusing = two_turns(model, tok, prefix_cache_tokens=4096)
    first_ref, second_ref, plain = two_turns(model, tok, prefix_cache_tokens=0)
    assert plain.prefix_cache is None
    assert (first, second) == (first_ref, second_ref)
    stats = reusing.prefix_cache
    assert stats.hits == 3
    # each reused entry is the first call's sequence and all but its last generated token
    expected = sum(len(s) + len(g.token_ids) - 1 for s, g in zip(sequences(tok), first))
    assert stats.reused_tokens == expected
    assert len(stats) == 3  # the second call's rows are kept in turn


def test_update_weights_drops_kept_entries(tiny64):
    model, tok = tiny64
    b = backend(model, tok, temperature=1.0)
    b.generate(sequences(tok), [3, 3, 3], STOP_STRINGS)
    assert len(b.prefix_cache) == 3
    b.update_weights(model)
    assert len(b.prefix_cache) == 0


def test_decoder_is_validated():
    problems = TransformersBackendConfig(decoder="fast").problems()
    assert [p.path for p in problems] == ["decoder"]
    assert [p.path for p in TransformersBackendConfig(prefix_cache_tokens=-1).problems()] == [
        "prefix_cache_tokens"
    ]


def test_entries_kept_in_another_dtype_are_converted(tiny_policy):
    from framework.rollout.decoding import decode

    model, tok = tiny_policy
    model = copy.deepcopy(model)
    seqs = sequences(tok)
    kw = dict(stop=STOP_STRINGS, eos_ids=set(), pad_id=0, token_text=tok.decode, temperature=0.0)
    cache = PrefixCache(4096)
    first = decode(model, seqs, [3, 3, 3], prefix_cache=cache, **kw)
    assert {e.kv[0][0].dtype for e in cache._entries} == {torch.float32}
    model.double()  # e.g. kept under autocast, reused outside it
    nxt = [s + g + [5, 6] for s, g in zip(seqs, first)]
    reused = decode(model, nxt, [4, 4, 4], prefix_cache=cache, **kw)
    assert cache.hits == 3
    assert reused == decode(model, nxt, [4, 4, 4], **kw)


def test_prefill_groups_pad_little_and_cap_their_size(monkeypatch):
    from framework.rollout import decoding

    # sorted by length; a row joins while rows x longest <= 1.125 x real tokens
    assert decoding.prefill_groups({0: 100, 1: 10, 2: 104, 3: 11, 4: 300}) == [[1, 3], [0, 2], [4]]
    monkeypatch.setattr(decoding, "PREFILL_GROUP_TOKENS", 250)
    assert decoding.prefill_groups({0: 100, 1: 100, 2: 100}) == [[0, 1], [2]]


def _entry(tokens):
    return _Entry(tuple(tokens), kv=[])


def test_prefix_cache_drops_entries_no_call_continued():
    """An entry stored in call N and not taken in call N+1 belonged to a sequence that ended: it
    is dropped at call N+2; one that is taken in N+1 and stored again lives on."""
    cache = PrefixCache(max_tokens=100)
    cache.new_call()  # call 1 stores two rows
    cache.put(_entry([1, 2, 3]))
    cache.put(_entry([4, 5]))
    cache.new_call()  # call 2 continues only the first row
    assert cache.take([1, 2, 3, 9]).tokens == (1, 2, 3)
    cache.put(_entry([1, 2, 3, 9, 8]))
    assert len(cache) == 2  # [4, 5] may still be continued in this call
    cache.new_call()  # call 3: [4, 5] was not continued in call 2
    assert [e.tokens for e in cache._entries] == [(1, 2, 3, 9, 8)]
    assert cache.take([4, 5, 6]) is None


def test_prefix_cache_counts_live_tokens_evicted_for_room():
    cache = PrefixCache(max_tokens=5)
    cache.new_call()
    cache.put(_entry([1, 2, 3]))
    cache.put(_entry([4, 5, 6]))  # 6 tokens > 5: the oldest goes
    assert [e.tokens for e in cache._entries] == [(4, 5, 6)]
    assert cache.evicted_tokens == 3


def test_packed_decode_attention_gives_sdpa_results_with_and_without_padding(tiny64):
    """One-token decode steps with a mask and without one (transformers drops an all-ones mask):
    the packed attention (the faster CPU kernel for the unmasked case) matches plain SDPA."""
    from transformers import DynamicCache

    from framework.rollout.decoding import (
        PACKED_SDPA,
        cache_argument,
        use_packed_decode_attention,
    )

    model, tok = tiny64
    plain = copy.deepcopy(model)
    assert use_packed_decode_attention(model) and model.config._attn_implementation == PACKED_SDPA
    ids = torch.tensor([tok.encode("Who directed Jaws? He was born in", add_special_tokens=False)])
    ids = ids.expand(2, -1)
    for padded in (False, True):
        mask = torch.ones(2, ids.shape[1] + 1, dtype=torch.long)
        mask[1, 0] = 0 if padded else 1
        logits = []
        for m in (plain, model):
            kv = {cache_argument(m): DynamicCache()}
            with torch.no_grad():
                m(input_ids=ids, attention_mask=mask[:, :-1], use_cache=True, **kv)
                step = m(
                    input_ids=torch.tensor([[7], [7]]), attention_mask=mask, use_cache=True, **kv
                )
            logits.append(step.logits)
        torch.testing.assert_close(logits[1], logits[0], rtol=0, atol=1e-10)


def test_the_cache_goes_by_the_name_the_models_forward_takes():
    from types import SimpleNamespace

    from framework.rollout.decoding import cache_argument, returned_cache

    class New(torch.nn.Module):
        def forward(self, input_ids=None, cache=None, **kwargs): ...

    class Old(torch.nn.Module):
        def forward(self, input_ids=None, past_key_values=None, **kwargs): ...

    class Wrapped(torch.nn.Module):  # as peft wraps a policy: its forward takes **kwargs only
        def __init__(self, base):
            super().__init__()
            self.base = base

        def get_base_model(self):
            return self.base

        def forward(self, *args, **kwargs): ...

    assert cache_argument(New()) == "cache" and cache_argument(Wrapped(New())) == "cache"
    assert cache_argument(Old()) == "past_key_values"
    assert cache_argument(Wrapped(Old())) == "past_key_values"
    kv = object()
    assert returned_cache({"cache": kv}) is kv
    old_output = SimpleNamespace(past_key_values=kv, get=lambda name: None)
    assert returned_cache(old_output) is kv


def test_decoding_uses_no_deprecated_cache_argument(tiny64):
    # transformers 5.24 warns that LlamaForCausalLM's past_key_values goes in 5.40
    import warnings

    model, tok = tiny64
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        backend(model, tok).generate(sequences(tok), [3, 3, 3], STOP_STRINGS)
    assert not [w for w in seen if "past_key_values" in str(w.message)], [
        str(w.message) for w in seen
    ]
