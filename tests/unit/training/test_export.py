"""Exporting a policy as a Hugging Face folder: the weights in ``export.dtype`` (bf16 by default),
LoRA merged, the folder written whole; ``seekrl-export`` on a run's step checkpoint; its errors.

Every "trained" policy here is the tiny random Llama after one AdamW step, so its weights are
not those a fresh tiny model starts from.
"""

from __future__ import annotations

import json
import re

import pytest
import torch
from omegaconf import OmegaConf

from framework.rollout.policy import PolicyConfig, load_policy
from framework.training.export import PROVENANCE, ExportError, export_policy
from framework.training.lora import LoraConfig, apply_lora

#: round to nearest in bf16 (8 significant bits): the error is at most half a unit in the last
#: place, 2^-8 of the value (relative), for every normal number
BF16_HALF_ULP = 2.0**-8


def trained_tiny(lora: LoraConfig | None = None):
    """``(model, tokenizer)``: the tiny policy (LoRA adapters on it when ``lora``) after one AdamW
    step on a next-token loss."""
    model, tok = load_policy(PolicyConfig(source="tiny"))
    if lora is not None:
        model = apply_lora(model, lora)
    ids = torch.randint(3, 1000, (2, 12), generator=torch.Generator().manual_seed(0))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    return model.eval(), tok


def load_folder(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder)


def test_the_folder_loads_in_bf16_with_the_trained_weights_rounded(tmp_path):
    model, tok = trained_tiny()
    initial, _ = load_policy(PolicyConfig(source="tiny"))
    trained = {k: v.detach().clone() for k, v in model.state_dict().items()}
    changed = [k for k, v in initial.state_dict().items() if not torch.equal(v, trained[k])]
    assert len(changed) == len(trained)  # AdamW's first step moves every weight by about lr

    folder = export_policy(model, tok, tmp_path / "policy", "bfloat16", {"step": 7})
    assert json.loads((folder / "config.json").read_text())["dtype"] == "bfloat16"
    assert json.loads((folder / PROVENANCE).read_text()) == {"step": 7}
    loaded = load_folder(folder)
    assert loaded.dtype == torch.bfloat16
    got = loaded.state_dict()
    assert got.keys() == trained.keys()
    for name, want in trained.items():
        assert got[name].dtype == torch.bfloat16, name
        assert torch.equal(got[name], want.to(torch.bfloat16)), name  # round to nearest
        err = (got[name].float() - want).abs()
        assert bool((err <= BF16_HALF_ULP * want.abs()).all()), name
    # the model itself is untouched: still fp32, still the trained weights
    assert all(
        v.dtype == torch.float32 and torch.equal(v, trained[k])
        for k, v in model.state_dict().items()
    )
    # tied embeddings stay tied: the output layer is the input table, saved once
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()
    from safetensors.torch import load_file

    assert "lm_head.weight" not in load_file(folder / "model.safetensors")


def test_float32_keeps_the_weights_exactly_and_a_new_export_replaces_the_folder(tmp_path):
    model, tok = trained_tiny()
    folder = tmp_path / "policy"
    export_policy(model, tok, folder, "bfloat16")
    (folder / "stale.txt").write_text("from the earlier export")
    export_policy(model, tok, folder, "float32")
    assert not (folder / "stale.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy"]  # no .tmp or .old left
    assert json.loads((folder / "config.json").read_text())["dtype"] == "float32"
    got = load_folder(folder).state_dict()
    assert all(torch.equal(got[k], v) for k, v in model.state_dict().items())


def test_lora_adapters_are_merged_then_rounded(tmp_path):
    # r=4, alpha=8: the merged weight is W + (8 / 4) * B @ A
    model, tok = trained_tiny(LoraConfig(enabled=True, r=4, alpha=8, target_modules=["q_proj"]))
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    w, a, b = (
        layer.base_layer.weight,
        layer.lora_A["default"].weight,
        layer.lora_B["default"].weight,
    )
    assert b.abs().sum() > 0  # B starts at 0; the AdamW step moved it
    merged = (w + 2.0 * b @ a).detach()
    export_policy(model, tok, tmp_path / "fp32", "float32")
    export_policy(model, tok, tmp_path / "bf16", "bfloat16")
    fp32 = load_folder(tmp_path / "fp32").state_dict()
    assert not any("lora" in k for k in fp32)
    name = "model.layers.0.self_attn.q_proj.weight"
    torch.testing.assert_close(fp32[name], merged, rtol=0, atol=1e-6)
    bf16 = load_folder(tmp_path / "bf16").state_dict()
    assert torch.equal(bf16[name], fp32[name].to(torch.bfloat16))
    assert hasattr(model, "peft_config")  # the trained model keeps its adapters


def test_float16_refuses_weights_beyond_its_range(tmp_path):
    model, tok = trained_tiny()
    with torch.no_grad():
        model.model.norm.weight[0] = 7e4  # float16's largest finite value is 65504
    with pytest.raises(ExportError) as info:
        export_policy(model, tok, tmp_path / "policy", "float16")
    assert str(info.value) == (
        "[export.dtype] got 'float16'; expected a dtype that holds every weight: "
        "model.norm.weight has values up to 7e+04, beyond float16's range. "
        "Fix: export in bfloat16 (export.dtype=bfloat16) or float32."
    )
    assert not (tmp_path / "policy").exists()


def test_export_dtype_is_a_validated_train_setting():
    from framework.cli.app import load_config
    from framework.problems import ConfigError

    assert load_config("train").export.dtype == "bfloat16"
    with pytest.raises(ConfigError) as info:
        load_config("train", ["export.dtype=int8"])
    choices = "['bfloat16', 'float16', 'float32']"
    assert (
        f"[export.dtype] got 'int8'; expected one of {choices}. "
        f"Fix: set export.dtype to one of {choices}."
    ) in str(info.value)


# -- seekrl-export --------------------------------------------------------------------------------


def fake_run(root, model, step: int, lora: LoraConfig | None = None):
    """A run directory as seekrl-train leaves it, as far as seekrl-export reads it: the
    ``rollout.policy`` and ``lora`` of its ``config.yaml``, and a step checkpoint whose
    ``state_dict`` holds the module's ``policy.*`` weights."""
    from dataclasses import asdict

    (root / "checkpoints").mkdir(parents=True)
    saved = {
        "rollout": {"name": "transformers", "policy": asdict(PolicyConfig(source="tiny"))},
        "lora": asdict(lora or LoraConfig()),
    }
    (root / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(saved)))
    state = {f"policy.{k}": v for k, v in model.state_dict().items()}
    ckpt = root / "checkpoints" / f"step-{step:06d}.ckpt"
    torch.save({"state_dict": state, "optimizer_states": []}, ckpt)
    return ckpt


def export_app(tmp_path, *args: str):
    from framework.cli.app import run_app
    from framework.cli.export import export

    return run_app("export", export, argv=[*args, f"hydra.run.dir={tmp_path / 'hydra'}"])


def test_seekrl_export_writes_the_newest_checkpoint_of_a_run_in_bf16(tmp_path, capsys):
    model, _ = trained_tiny()
    run = tmp_path / "run"
    older = fake_run(run, load_policy(PolicyConfig(source="tiny"))[0], step=2)
    newest = older.with_name("step-000003.ckpt")
    torch.save({"state_dict": {f"policy.{k}": v for k, v in model.state_dict().items()}}, newest)

    record = export_app(tmp_path, f"checkpoint={run}")
    folder = run / "export" / "step-000003"
    assert record == {
        "path": str(folder),
        "step": 3,
        "dtype": "bfloat16",
        "source": f"checkpoint {newest}",
    }
    assert json.loads((folder / PROVENANCE).read_text()) == record
    got = load_folder(folder).state_dict()
    assert all(torch.equal(got[k], v.to(torch.bfloat16)) for k, v in model.state_dict().items())
    out = capsys.readouterr().out
    assert f"seekrl-export: the policy of step 3 (bfloat16) from checkpoint {newest}" in out


def test_seekrl_export_of_a_lora_checkpoint_merges_the_runs_own_rank(tmp_path):
    # r=4, not LoraConfig's default 16: the run's config.yaml says which adapters to rebuild
    lora = LoraConfig(enabled=True, r=4, alpha=8, target_modules=["q_proj"])
    model, tok = trained_tiny(lora)
    ckpt = fake_run(tmp_path / "run", model, step=5, lora=lora)
    export_policy(model, tok, tmp_path / "direct", "float32")
    export_app(tmp_path, f"checkpoint={ckpt}", f"out={tmp_path / 'out'}", "export.dtype=float32")
    got, want = load_folder(tmp_path / "out").state_dict(), load_folder(tmp_path / "direct")
    assert all(torch.equal(got[k], v) for k, v in want.state_dict().items())


def _error(tmp_path, capsys, *args: str) -> str:
    with pytest.raises(SystemExit) as info:
        export_app(tmp_path, *args)
    assert info.value.code == 2
    return capsys.readouterr().err


def test_seekrl_export_names_what_is_wrong_with_its_inputs(tmp_path, capsys):
    err = _error(tmp_path, capsys)
    assert "[checkpoint] got '???'; expected a value." in err
    err = _error(tmp_path, capsys, "checkpoint=/nowhere")
    assert (
        "[checkpoint] got '/nowhere'; expected a .ckpt file or a run directory with "
        "checkpoints/step-*.ckpt (no such file or directory). Fix: point checkpoint at a "
        "seekrl-train run directory or one of its checkpoints/step-*.ckpt files." in err
    )
    # a run that kept no checkpoints but has its policy/: that is the folder already
    (tmp_path / "done" / "policy").mkdir(parents=True)
    (tmp_path / "done" / "policy" / "config.json").write_text("{}")
    err = _error(tmp_path, capsys, f"checkpoint={tmp_path / 'done'}")
    assert re.search(r"\(no step-\*\.ckpt in it\)\. Fix: it holds a Hugging Face folder", err)
    # a checkpoint away from its run: nothing says which model its weights belong to
    lone = tmp_path / "lone.ckpt"
    torch.save({"state_dict": {}}, lone)
    err = _error(tmp_path, capsys, f"checkpoint={lone}")
    assert (
        f"[checkpoint] got '{lone}'; expected a checkpoint in a run directory's checkpoints/" in err
    )
    # a file that is not a checkpoint, where one should be
    bad = fake_run(tmp_path / "bad", load_policy(PolicyConfig(source="tiny"))[0], step=1)
    bad.write_text("not a checkpoint")
    err = _error(tmp_path, capsys, f"checkpoint={bad}")
    assert f"[checkpoint] got '{bad}'; expected a step checkpoint that torch can read" in err
    assert "Fix: name a checkpoints/step-*.ckpt file that seekrl-train wrote." in err
    assert not (tmp_path / "bad" / "export").exists()
    err = _error(tmp_path, capsys, f"checkpoint={bad}", "export.dtype=int8")
    assert "[export.dtype] got 'int8'; expected one of ['bfloat16', 'float16', 'float32']" in err
