"""cut_generation hand cases and properties; TransformersBackend with the tiny random policy."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.registry.protocols import RolloutBackend
from framework.rollout.config import AgentConfig
from framework.rollout.engine import AgentLoop
from framework.rollout.hf_backend import (
    SamplingConfig,
    TransformersBackend,
    TransformersBackendConfig,
    cut_generation,
)
from framework.rollout.parser import STOP_STRINGS
from framework.types import Generation

from .fakes import (
    EOS,
    FakeBackend,
    FakeRetriever,
    FakeTokenizer,
    Turn,
    check_invariants,
    search_call,
    visit_call,
)

# -- cut_generation with a toy vocabulary of multi-character tokens ---------------------------------
VOCAB = {
    0: "<pad>",
    2: "<eos>",
    3: "ab",
    4: "</tool",
    5: "_cal",
    6: "l>",
    7: "</answer>xyz",  # completes a stop string mid-token
    8: "</ans",
    9: "wer>",
    10: "</tool_call>",
}
STOP = list(STOP_STRINGS)


def vdecode(ids) -> str:
    return "".join(VOCAB[int(i)] for i in ids)


def cut(new, limit=100, stop=STOP, eos=frozenset({EOS})):
    return cut_generation(list(new), stop, set(eos), limit, vdecode)


def test_stop_string_split_over_tokens():
    assert cut([3, 4, 5, 6, 3, 3]) == Generation([3, 4, 5, 6], "stop")
    assert cut([3, 8, 9, 3]) == Generation([3, 8, 9], "stop")


def test_stop_string_completed_mid_token_keeps_that_token():
    assert cut([3, 7, 3]) == Generation([3, 7], "stop")
    assert cut([7]) == Generation([7], "stop")


def test_eos_before_stop():
    assert cut([3, EOS, 4, 5, 6]) == Generation([3, EOS], "eos")
    assert cut([EOS, 10]) == Generation([EOS], "eos")


def test_stop_before_eos():
    assert cut([4, 5, 6, EOS, EOS]) == Generation([4, 5, 6], "stop")


def test_padding_after_finish_is_dropped():
    assert cut([3, 3, EOS, EOS, EOS, EOS]) == Generation([3, 3, EOS], "eos")  # pad == eos
    assert cut([3, 10, 0, 0, 0]) == Generation([3, 10], "stop")  # pad != eos
    assert cut([3, 10, 0, 0], eos={EOS, 0}) == Generation([3, 10], "stop")


def test_limit():
    assert cut([3] * 10, limit=4) == Generation([3] * 4, "length")
    assert cut([3, 4, 5, 6], limit=3) == Generation([3, 4, 5], "length")  # stop beyond the limit
    assert cut([3, 3, 3, EOS], limit=3) == Generation([3, 3, 3], "length")  # eos beyond it
    assert cut([3, 4, 5, 6], limit=4) == Generation([3, 4, 5, 6], "stop")  # exactly at it
    assert cut([3, 3], limit=0) == Generation([], "length")
    assert cut([], limit=5) == Generation([], "length")


def test_earliest_stop_string_wins_whatever_its_order_in_stop():
    new = [3, 8, 9, 10]
    assert cut(new, stop=["</tool_call>", "</answer>"]) == Generation([3, 8, 9], "stop")
    assert cut(new, stop=["</answer>", "</tool_call>"]) == Generation([3, 8, 9], "stop")
    assert cut(new, stop=[]) == Generation(new, "length")


TOK = FakeTokenizer()
pieces = st.lists(
    st.one_of(
        st.sampled_from(["</tool_call>", "</answer>", "</tool", "_call>", "</", "😀", "é", "<"]),
        st.text(max_size=6),
    ),
    max_size=12,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(pieces, st.integers(0, 80), st.booleans(), st.integers(0, 5))
def test_cut_generation_properties_with_a_byte_tokenizer(text, limit, eos, pad):
    new = TOK.encode(text) + ([EOS] if eos else []) + [EOS] * pad
    gen = cut_generation(new, STOP, {EOS}, limit, TOK.decode)
    ids = gen.token_ids
    assert new[: len(ids)] == ids and len(ids) <= limit
    out = TOK.decode(ids)
    has_stop = any(s in out for s in STOP)
    if gen.finish == "stop":
        assert has_stop and not any(s in TOK.decode(ids[:-1]) for s in STOP)
        assert EOS not in ids
    elif gen.finish == "eos":
        assert ids[-1] == EOS and EOS not in ids[:-1] and not has_stop
    else:
        assert gen.finish == "length" and not has_stop and EOS not in ids
        assert len(ids) == min(limit, len(new))
    # the cut is the shortest prefix that explains the finish
    full = TOK.decode(new[:limit])
    if any(s in full.split("<eos>")[0] for s in STOP):
        assert gen.finish == "stop"


# -- TransformersBackend with the tiny random policy -----------------------------------------------
def greedy_backend(model, tok, micro_batch: int = 32) -> TransformersBackend:
    cfg = TransformersBackendConfig(
        sampling=SamplingConfig(temperature=0.0), micro_batch=micro_batch
    )
    return TransformersBackend(cfg=cfg, model=model, tokenizer=tok)


def some_sequences(tok) -> list[list[int]]:
    texts = [
        "Hi",
        "Where was the director of Jaws born? Think first.",
        "<think>Search for the film, then for its director, then for the city.</think><tool_call>",
    ]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


def test_backend_protocol_and_eos(tiny_policy):
    model, tok = tiny_policy
    backend = greedy_backend(model, tok)
    assert isinstance(backend, RolloutBackend)
    assert tok.eos_token_id in backend.eos_ids
    assert backend.pad_id == tok.pad_token_id


def test_generate_respects_per_sequence_limits(tiny_policy):
    model, tok = tiny_policy
    backend = greedy_backend(model, tok)
    seqs = some_sequences(tok)
    assert len({len(s) for s in seqs}) == 3
    limits = [3, 7, 12]
    gens = backend.generate(seqs, limits, STOP_STRINGS)
    assert len(gens) == 3
    for g, lim in zip(gens, limits):
        assert isinstance(g, Generation) and g.finish in ("stop", "eos", "length")
        assert 1 <= len(g.token_ids) <= lim
        assert all(isinstance(i, int) for i in g.token_ids)
        if g.finish == "length":
            assert len(g.token_ids) == lim
    # a shorter limit gives a prefix of the longer one's greedy continuation
    again = backend.generate(seqs, [12, 12, 12], STOP_STRINGS)
    for g, a in zip(gens, again):
        assert a.token_ids[: len(g.token_ids)] == g.token_ids


@pytest.mark.slow
def test_left_padding_does_not_change_greedy_results(tiny_policy):
    model, tok = tiny_policy
    seqs = some_sequences(tok)
    batched = greedy_backend(model, tok).generate(seqs, [10, 10, 10], STOP_STRINGS)
    alone = [greedy_backend(model, tok).generate([s], [10], STOP_STRINGS)[0] for s in seqs]
    assert [g.token_ids for g in batched] == [g.token_ids for g in alone]
    # micro-batching (and the length sort behind it) does not change the order of the results
    micro = greedy_backend(model, tok, micro_batch=2).generate(seqs[::-1], [10] * 3, STOP_STRINGS)
    assert [g.token_ids for g in micro] == [g.token_ids for g in batched[::-1]]


@pytest.mark.slow
def test_update_weights_copies_the_other_models_weights(tiny_policy):
    import torch

    from framework.rollout.policy import PolicyConfig, load_policy

    model, tok = tiny_policy
    other, _ = load_policy(PolicyConfig(source="tiny", seed=1))
    seqs = some_sequences(tok)
    mine = greedy_backend(copy.deepcopy(model), tok)
    theirs = greedy_backend(other, tok)
    before = mine.generate(seqs, [12] * 3, STOP_STRINGS)
    target = theirs.generate(seqs, [12] * 3, STOP_STRINGS)
    assert [g.token_ids for g in before] != [g.token_ids for g in target]

    held = mine.model
    mine.update_weights(other)
    assert mine.model is held  # weights copied in place, the module is kept
    for (k, a), b in zip(mine.model.state_dict().items(), other.state_dict().values()):
        assert torch.equal(a, b.to(a.dtype)), k  # cast to the rollout dtype
    assert (
        mine.model.state_dict()["lm_head.weight"].data_ptr()
        != other.state_dict()["lm_head.weight"].data_ptr()
    )
    after = mine.generate(seqs, [12] * 3, STOP_STRINGS)
    assert [g.token_ids for g in after] == [g.token_ids for g in target]
    mine.update_weights(mine.model)  # same module: a no-op
    assert [g.token_ids for g in mine.generate(seqs, [12] * 3, STOP_STRINGS)] == [
        g.token_ids for g in target
    ]


def test_agent_loop_with_the_tiny_backend(tiny_policy):
    model, tok = tiny_policy
    cfg = TransformersBackendConfig(sampling=SamplingConfig(temperature=1.0, seed=3))
    backend = TransformersBackend(cfg=cfg, model=model, tokenizer=tok)
    acfg = AgentConfig(max_turns=3, max_new_tokens_per_turn=16, max_total_tokens=400)
    loop = AgentLoop(backend, FakeRetriever(), acfg)
    questions = ["Who directed Jaws?", "Where is Cincinnati?"]
    trajs = loop.run(questions, 2)
    assert len(trajs) == 4
    for i, t in enumerate(trajs):
        prompt = loop.prompt_ids(questions[i // 2])
        check_invariants(t, acfg.max_total_tokens, prompt)
        assert t.group == i // 2 and 1 <= t.stats["turns"] <= acfg.max_turns
        assert t.response_text == tok.decode(t.token_ids[t.prompt_len :], skip_special_tokens=False)


# -- the agent loop with the real (BPE) tokenizer and a scripted policy ------------------------------
def test_scripted_rollout_with_the_smollm2_tokenizer(tiny_policy):
    _, tok = tiny_policy
    turn1 = "<think>Who directed it?</think>\n" + search_call("Jaws director")
    turn2 = "<think>Spielberg, born in Cincinnati.</think>\n<answer>Cincinnati</answer>"
    backend = FakeBackend(tok, [[turn1 + " junk", visit_call(title="Nowhere"), turn2]])
    cfg = AgentConfig()
    loop = AgentLoop(backend, FakeRetriever(), cfg)
    [t] = loop.run(["Where was the director of Jaws born?"], 1)
    prompt = loop.prompt_ids("Where was the director of Jaws born?")
    check_invariants(t, cfg.max_total_tokens, prompt)
    assert (t.status, t.answer) == ("ok", "Cincinnati")
    assert (
        backend.seen[0][0] == prompt
        and backend.seen[0][-1] == t.token_ids[: len(backend.seen[0][-1])]
    )
    kinds = [s.kind for s in t.segments if s.kind != "other"]
    assert kinds == [
        "think",
        "tool_call",
        "tool_response",
        "tool_call",
        "tool_response",
        "think",
        "answer",
    ]
    for s in t.segments:
        text = tok.decode(t.token_ids[s.start : s.end], skip_special_tokens=False)
        if s.kind in ("think", "tool_call", "answer"):
            assert text.lstrip().startswith(f"<{s.kind}>") and text.endswith(f"</{s.kind}>")
        elif s.kind == "tool_response":
            assert text.startswith("\n<tool_response>\n") and text.endswith("\n</tool_response>\n")
    assert t.think_text == "Who directed it?\nSpielberg, born in Cincinnati."
    assert "Error: no page titled 'Nowhere'" in t.response_text


def test_fake_backend_eos_with_the_smollm2_tokenizer(tiny_policy):
    _, tok = tiny_policy
    backend = FakeBackend(tok, [[Turn("nothing to say")]])
    [t] = AgentLoop(backend, FakeRetriever(), AgentConfig()).run(["q"], 1)
    assert t.status == "format_error"


def test_lone_surrogate_query_with_the_smollm2_tokenizer(tiny_policy):
    _, tok = tiny_policy
    call = '<tool_call>{"name": "search", "arguments": {"queries": ["\\ud800 Jaws"]}}</tool_call>'
    backend = FakeBackend(tok, [[call, "<answer>x</answer>"]])
    [t] = AgentLoop(backend, FakeRetriever(), AgentConfig()).run(["q"], 1)
    assert t.status == "ok"


# -- the real policy -------------------------------------------------------------------------------
@pytest.mark.slow
def test_agent_loop_with_the_real_smollm2_policy():
    from framework.rollout.policy import PolicyConfig

    cfg = TransformersBackendConfig(
        policy=PolicyConfig(), sampling=SamplingConfig(temperature=0.7, top_p=0.95, seed=0)
    )
    backend = TransformersBackend(cfg=cfg)
    acfg = AgentConfig(max_turns=2, max_new_tokens_per_turn=64, max_total_tokens=700)
    retriever = FakeRetriever()
    loop = AgentLoop(backend, retriever, acfg)
    questions = ["Who directed the film Jaws?", "Where was Steven Spielberg born?"]
    trajs = loop.run(questions, 2, question_ids=[7, 9])
    assert len(trajs) == 4
    for i, t in enumerate(trajs):
        check_invariants(t, acfg.max_total_tokens, loop.prompt_ids(questions[i // 2]))
        assert (t.question, t.group) == ([7, 9][i // 2], i // 2)
        assert 1 <= t.stats["turns"] <= 2
        assert t.stats["generated_tokens"] <= 2 * acfg.max_new_tokens_per_turn
        assert t.status != "ok" or t.answer is not None
        for s in t.segments:
            if s.kind == "tool_response":
                assert t.loss_mask[s.start : s.end] == [0] * (s.end - s.start)


def test_rollouts_run_in_the_configured_dtype_on_a_copy_unless_the_model_is_handed_over(
    tiny_policy,
):
    """compute_dtype=bfloat16 on an fp32 policy: the backend rolls out with its own bf16 copy,
    which update_weights refreshes; the trained policy stays fp32. float32 shares the module. An
    evaluation hands its model over (owns_model) and it is converted in place."""
    import torch

    model, tok = tiny_policy
    trained = copy.deepcopy(model)
    cfg = TransformersBackendConfig(
        sampling=SamplingConfig(temperature=0.0), compute_dtype="bfloat16"
    )
    backend = TransformersBackend(cfg=cfg, model=trained, tokenizer=tok)
    assert backend.own_copy and backend.model is not trained
    assert next(backend.model.parameters()).dtype == torch.bfloat16
    assert next(trained.parameters()).dtype == torch.float32
    with torch.no_grad():
        trained.lm_head.weight.add_(0.5)
    backend.update_weights(trained)
    assert torch.equal(backend.model.lm_head.weight, trained.lm_head.weight.to(torch.bfloat16))
    assert backend.generate(some_sequences(tok), [4] * 3, STOP_STRINGS)

    same = TransformersBackend(
        cfg=TransformersBackendConfig(compute_dtype="float32"), model=trained, tokenizer=tok
    )
    assert same.model is trained and not same.own_copy

    handed = copy.deepcopy(model)
    owned = TransformersBackend(cfg=cfg, model=handed, tokenizer=tok, owns_model=True)
    assert owned.model is handed and next(handed.parameters()).dtype == torch.bfloat16


def test_the_rollout_copy_goes_to_the_rollout_device(tiny_policy):
    """The train app builds the backend while its policy is still on the CPU (Lightning moves it
    to the GPU later): the rollout copy must go to rollout.policy.device, not stay with the trained
    module (it did, and a GPU run rolled out on the host). ``meta`` stands in for a GPU here."""
    import torch

    from framework.rollout.policy import PolicyConfig

    model, tok = tiny_policy
    trained = copy.deepcopy(model)
    cfg = TransformersBackendConfig(
        compute_dtype="bfloat16", policy=PolicyConfig(source="tiny", device="meta")
    )
    backend = TransformersBackend(cfg=cfg, model=trained, tokenizer=tok)
    copy_at = next(backend.model.parameters())
    assert backend.own_copy and (copy_at.device.type, copy_at.dtype) == ("meta", torch.bfloat16)
    assert next(trained.parameters()).device.type == "cpu"


def test_auto_rollout_dtype_follows_native_bf16(monkeypatch):
    import torch

    import framework.training.precision as precision
    from framework.rollout.hf_backend import rollout_dtype

    monkeypatch.setattr(precision, "native_bf16", lambda: "avx512_bf16")
    assert rollout_dtype("auto")[0] == torch.bfloat16
    monkeypatch.setattr(precision, "native_bf16", lambda: None)
    dtype, reason = rollout_dtype("auto")
    assert dtype == torch.float32 and "no native bf16" in reason
    assert rollout_dtype("bfloat16")[0] == torch.bfloat16


def test_compute_dtype_is_checked():
    problems = TransformersBackendConfig(compute_dtype="fp8").problems()
    assert [p.path for p in problems] == ["compute_dtype"]
