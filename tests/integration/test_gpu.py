"""The GPU path (marked ``gpu``: deselected by default, skipped without CUDA; run on a GPU machine
with ``python3 -m pytest -m gpu``).

- one training step on CUDA with each shipped retriever, and no retriever taking GPU memory;
- bf16 rollouts on CUDA;
- the decoding loop's greedy output equal to ``model.generate`` on CUDA, KV prefix reuse included;
- a checkpoint written on CUDA, resumed, equal to the uninterrupted run.

The tests with the faiss and hybrid retrievers need the MiniLM encoder package and are skipped
without it (a bundle made with ``tools/offline_bundle.py --no-encoder``, as for
``tools/gpu_check.sh``, carries none). The tiny random policy keeps each test to seconds; ``tools/bench/train_step.py --device cuda``
measures the real shapes. The GPU machine needs the project installed (``tools/setup.sh --dev`` keeps
a CUDA torch that is already there) with the asset packages, or a ``$SEEKRL_CACHE`` carried over
holding the converted SmolLM2 tokenizer, the synthesized small dataset and its indexes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from framework.paths import package_dir
from framework.retrieval.encoder import MINILM_PACKAGE
from tests.integration.test_train import train_in_process

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

REPO = Path(__file__).resolve().parents[2]
GPU = ["trainer=gpu", "rollout.policy.device=cuda", "reward=test_length_mod"]
needs_encoder = pytest.mark.skipif(
    package_dir(MINILM_PACKAGE) is None,
    reason=f"needs the MiniLM encoder ({MINILM_PACKAGE}; a --no-encoder bundle has none)",
)


@pytest.mark.parametrize(
    "retriever",
    [
        "bm25",
        pytest.param("faiss", marks=needs_encoder),
        pytest.param("hybrid", marks=needs_encoder),
    ],
)
def test_one_training_step_on_cuda_with_each_retriever(tmp_path, retriever):
    run = tmp_path / retriever
    train_in_process(
        run, *GPU, f"retriever={retriever}", "trainer.max_steps=1", "trainer.val_at_end=false"
    )
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 1 and not summary["interrupted"]
    config = (run / "config.yaml").read_text()
    assert "accelerator: gpu" in config


@needs_encoder
def test_no_retriever_takes_gpu_memory(tmp_path):
    # in a fresh process: build and query each retriever, then read what CUDA holds
    code = """
import json, sys, torch
from framework.cli.app import load_config
from framework.registry import RETRIEVERS
torch.cuda.init()
before = torch.cuda.mem_get_info()[0]
out = {}
for name in ("bm25", "faiss", "hybrid"):
    cfg = load_config("train", ["dataset=synth_small", f"retriever={name}"])
    r = RETRIEVERS.bind(cfg.retriever)()
    r.search(["Jaws director"], 3)
    out[name] = torch.cuda.memory_allocated()
out["free_drop"] = before - torch.cuda.mem_get_info()[0]
print(json.dumps(out))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["bm25"] == got["faiss"] == got["hybrid"] == 0
    # JAX's preallocation alone would take 75% of the card; allow the CUDA context's own margin
    assert got["free_drop"] < 1024**3, got


def test_bf16_rollouts_on_cuda():
    from framework.rollout.hf_backend import TransformersBackend, TransformersBackendConfig
    from framework.rollout.parser import STOP_STRINGS
    from framework.rollout.policy import PolicyConfig

    policy = PolicyConfig(source="tiny", device="cuda", dtype="bfloat16")
    backend = TransformersBackend(cfg=TransformersBackendConfig(policy=policy))
    assert next(backend.model.parameters()).dtype == torch.bfloat16
    tok = backend.tokenizer
    seqs = [tok.encode(t, add_special_tokens=False) for t in ("Hi", "Who directed Jaws?")]
    gens = backend.generate(seqs, [8, 8], STOP_STRINGS)
    assert [len(g.token_ids) for g in gens] == [8, 8]


def test_loop_equals_generate_greedy_on_cuda():
    from framework.rollout.parser import STOP_STRINGS
    from framework.rollout.policy import PolicyConfig, load_policy
    from tests.unit.rollout.test_decoding import backend, sequences, two_turns

    model, tok = load_policy(PolicyConfig(source="tiny", device="cuda"))
    model = model.double()  # as on CPU: reordered sums cannot flip a greedy token
    seqs, limits = sequences(tok), [4, 9, 13]
    ours = backend(model, tok).generate(seqs, limits, STOP_STRINGS)
    theirs = backend(model, tok, decoder="generate").generate(seqs, limits, STOP_STRINGS)
    assert ours == theirs
    reused = two_turns(model, tok, prefix_cache_tokens=4096)
    plain = two_turns(model, tok, prefix_cache_tokens=0)
    assert reused[:2] == plain[:2] and reused[2].prefix_cache.hits == 3


def test_checkpoint_and_resume_on_cuda(tmp_path):
    from safetensors.torch import load_file

    common = [*GPU, "trainer.max_steps=2", "trainer.val_at_end=false", "trainer.keep_checkpoints=5"]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    train_in_process(full, *common, "trainer.checkpoint_every_n_steps=1")
    train_in_process(resumed, *common, f"resume={full / 'checkpoints' / 'step-000001.ckpt'}")
    a = load_file(full / "policy" / "model.safetensors")
    b = load_file(resumed / "policy" / "model.safetensors")
    for name in a:  # CUDA kernels may reorder sums: equal to float tolerance, not bit for bit
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5)
    assert json.loads((resumed / "summary.json").read_text())["steps"] == 2
