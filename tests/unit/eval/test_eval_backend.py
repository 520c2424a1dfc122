"""An evaluation builds its rollout backend through the registry, from the ``rollout`` section's own
config class: ``rollout=vllm`` gets the vLLM backend (seekrl-eval once built the transformers one
from any config and failed on ``compute_dtype``), and ``rollout=transformers`` is built as before.

Neither backend really starts: their constructors are replaced by recorders (vLLM is not installed
here), so what is checked is which class the registry picks and what it is handed.
"""

from __future__ import annotations

from typing import Any

import pytest

from framework.cli.app import load_config
from framework.eval.run import eval_backend
from framework.rollout.hf_backend import TransformersBackend, TransformersBackendConfig
from framework.rollout.vllm_backend import VLLMBackend, VLLMBackendConfig

MODEL, TOKENIZER = object(), object()


def _record(monkeypatch: pytest.MonkeyPatch, cls: type, *, takes_owns_model: bool) -> dict:
    built: dict[str, Any] = {}

    if takes_owns_model:

        def init(self, *, cfg, model=None, tokenizer=None, owns_model=False):
            built.update(cls=type(self), cfg=cfg, model=model, tokenizer=tokenizer)
            built["owns_model"] = owns_model

    else:

        def init(self, *, cfg, model=None, tokenizer=None):
            built.update(cls=type(self), cfg=cfg, model=model, tokenizer=tokenizer)

    monkeypatch.setattr(cls, "__init__", init)
    return built


def test_an_evaluation_with_rollout_vllm_builds_the_vllm_backend_from_its_config(monkeypatch):
    built = _record(monkeypatch, VLLMBackend, takes_owns_model=False)
    cfg = load_config("eval", ["rollout=vllm", "seed=7"])
    assert type(cfg.rollout) is VLLMBackendConfig

    backend = eval_backend(cfg, MODEL, TOKENIZER)

    assert type(backend) is VLLMBackend and built["cls"] is VLLMBackend
    assert type(built["cfg"]) is VLLMBackendConfig
    assert built["cfg"].sampling.seed == 7  # the evaluation's sampling seed
    assert built["cfg"].gpu_memory_utilization == cfg.rollout.gpu_memory_utilization
    assert built["model"] is MODEL and built["tokenizer"] is TOKENIZER


def test_an_evaluation_with_rollout_transformers_hands_its_model_over_as_before(monkeypatch):
    built = _record(monkeypatch, TransformersBackend, takes_owns_model=True)
    cfg = load_config("eval", ["seed=7"])
    assert type(cfg.rollout) is TransformersBackendConfig

    backend = eval_backend(cfg, MODEL, TOKENIZER)

    assert type(backend) is TransformersBackend
    assert built["cfg"].sampling.seed == 7
    assert built["cfg"].compute_dtype == cfg.rollout.compute_dtype
    assert built["model"] is MODEL and built["tokenizer"] is TOKENIZER
    assert built["owns_model"] is True  # an evaluation trains nothing: converted in place
    assert cfg.rollout.sampling.seed == 0  # the config itself is left as it was
