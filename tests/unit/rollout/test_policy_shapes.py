"""Random policies of a named shape (``policy.source=shape``) and a tokenizer from any folder: what
benchmarks use where no weights can be had."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from framework.rollout.policy import SHAPES, PolicyConfig, load_policy, load_tokenizer

VOCAB = 49152  # SmolLM2's tokenizer


def parameters_on_meta(shape: str) -> int:
    config = LlamaConfig(vocab_size=VOCAB, tie_word_embeddings=True, **SHAPES[shape])
    with torch.device("meta"):
        return sum(p.numel() for p in LlamaForCausalLM(config).parameters())


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        # embeddings 49152 x 576 + 30 layers x (q, o 576^2; k, v 576 x 192; 3 MLP 576 x 1536;
        # 2 norms) + final norm: 28,311,552 + 30 x 3,540,096 + 576 (the converted SmolLM2-135M
        # checkpoint has exactly this many)
        ("smollm2-135m", 134_515_008),
        # 49152 x 2048 + 24 x (4 x 2048^2 + 3 x 2048 x 8192 + 2 x 2048) + 2048
        ("smollm2-1.7b", 1_711_376_384),
        # 49152 x 1536 + 28 x (q, o 1536^2; k, v 1536 x 256 (2 KV heads of 128); 3 MLP
        # 1536 x 8960; 2 norms) + final norm: 75,497,472 + 28 x 46,795,776 + 1536; outside the
        # embeddings 1.31B, Qwen2.5-1.5B's published non-embedding count (it adds q/k/v biases)
        ("qwen2.5-1.5b", 1_385_780_736),
    ],
)
def test_named_shapes_have_the_published_parameter_counts(shape: str, expected: int) -> None:
    assert parameters_on_meta(shape) == expected


@pytest.mark.slow
def test_a_shape_policy_loads_random_weights_from_its_seed() -> None:
    a, tok = load_policy(PolicyConfig(source="shape", shape="smollm2-135m", seed=1))
    b, _ = load_policy(PolicyConfig(source="shape", shape="smollm2-135m", seed=1))
    assert a.config.hidden_size == 576 and a.config.num_key_value_heads == 3
    assert a.config.vocab_size == len(tok) == VOCAB
    assert sum(p.numel() for p in a.parameters()) == 134_515_008
    assert torch.equal(a.model.layers[0].mlp.up_proj.weight, b.model.layers[0].mlp.up_proj.weight)


def test_a_tokenizer_folder_stands_in_for_smollm2s(tmp_path) -> None:
    smollm2 = load_tokenizer(PolicyConfig(source="tiny"))
    smollm2.save_pretrained(tmp_path / "tok")
    cfg = PolicyConfig(source="tiny", tokenizer=str(tmp_path / "tok"))
    assert cfg.problems() == []
    assert load_tokenizer(cfg).encode("search agent") == smollm2.encode("search agent")
    bad = PolicyConfig(source="shape", shape="gpt-5", tokenizer=str(tmp_path))
    fields = {p.path for p in bad.problems()}
    assert fields == {"shape", "tokenizer"}
