"""encoder.dtype=auto: bf16 only where the CPU computes it natively; keys name the dtype run."""

from __future__ import annotations

import pytest

import framework.training.precision as precision
from framework.retrieval.encoder import EncoderConfig, resolved_dtype


@pytest.mark.parametrize(("flag", "expected"), [("avx512_bf16", "bfloat16"), (None, "float32")])
def test_auto_follows_native_bf16(monkeypatch, flag, expected):
    monkeypatch.setattr(precision, "native_bf16", lambda: flag)
    assert resolved_dtype(EncoderConfig()) == expected
    assert resolved_dtype(EncoderConfig(dtype="float32")) == "float32"  # explicit wins


def test_synth_key_changes_with_the_answerability_encoder_dtype_only_off_fp32(monkeypatch):
    from framework.data.datasets import SynthDatasetConfig

    cfg = SynthDatasetConfig(name="synth")
    monkeypatch.setattr(precision, "native_bf16", lambda: None)
    fp32 = cfg.key()
    monkeypatch.setattr(precision, "native_bf16", lambda: "amx_bf16")
    assert cfg.key() != fp32
    monkeypatch.setattr(precision, "native_bf16", lambda: None)
    assert cfg.key() == fp32


def test_bad_dtype_is_refused():
    assert [p.path for p in EncoderConfig(dtype="fp16").problems()] == ["dtype"]
