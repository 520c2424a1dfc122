"""The ``trainer.ddp`` / ``trainer.fsdp`` settings: checked before anything runs, and what the
Lightning strategy and FSDP2's ``fully_shard`` are built with. The training runs themselves are in
tests/integration/test_distributed.py (slow: two processes)."""

from __future__ import annotations

import pytest
import torch

from framework.cli.app import load_config
from framework.config import ConfigError
from framework.lightning.strategy import DDPConfig, build_strategy
from framework.lightning.trainer import TrainerConfig
from framework.training.sharding import (
    FSDPConfig,
    ShardingError,
    decoder_layer_class,
    fully_shard_kwargs,
)

FSDP_CPU = ["trainer=fsdp", "trainer.accelerator=cpu", "trainer.devices=2"]


def test_every_bad_fsdp_setting_is_reported_at_once():
    bad = [
        "trainer.fsdp.param_dtype=float8",
        "trainer.fsdp.sharding=hybrid",
        "trainer.fsdp.reduce_dtype=half",
        "trainer.fsdp.process_group_backend=ucc",
    ]
    with pytest.raises(ConfigError) as err:
        load_config("train", ["trainer=fsdp", *bad])
    lines = str(err.value).splitlines()
    assert (
        "[trainer.fsdp.param_dtype] got 'float8'; expected one of ['float32', 'bfloat16', "
        "'float16']. Fix: set trainer.fsdp.param_dtype to one of" in "\n".join(lines)
    )
    for path in ("sharding", "reduce_dtype", "process_group_backend"):
        assert any(f"[trainer.fsdp.{path}] got" in line for line in lines), path
    assert len(lines) == 1 + len(bad)


def test_the_fsdp_preset_composes_with_its_settings():
    t = load_config("train", ["trainer=fsdp"]).trainer
    assert (t.strategy, t.precision) == ("fsdp", "32-true")
    assert t.fsdp == FSDPConfig()  # the preset spells out the defaults
    assert (t.fsdp.param_dtype, t.fsdp.reduce_dtype, t.fsdp.sharding) == (
        "bfloat16",
        "float32",
        "full_shard",
    )
    assert load_config("train", ["trainer=ddp"]).trainer.ddp == DDPConfig()


@pytest.mark.parametrize(
    ("override", "path", "expected"),
    [
        ("trainer.fsdp.cpu_offload=true", "trainer.fsdp.cpu_offload", "false with accelerator=cpu"),
        ("trainer.fsdp.param_dtype=float16", "trainer.fsdp.param_dtype", "fp16 needs a GPU"),
        (
            "trainer.fsdp.process_group_backend=nccl",
            "trainer.fsdp.process_group_backend",
            "nccl needs GPUs",
        ),
        ("trainer.precision=64-true", "trainer.precision", "ModelParallelStrategy accepts"),
    ],
)
def test_fsdp_settings_a_cpu_run_cannot_use(override, path, expected):
    with pytest.raises(ConfigError, match=rf"\[{path}\] got .*{expected}"):
        load_config("train", [*FSDP_CPU, override])


def test_fsdp_on_cpu_processes_is_accepted_and_ddp_settings_checked():
    t = load_config("train", [*FSDP_CPU, "trainer.fsdp.param_dtype=float32"]).trainer
    assert (t.accelerator, t.strategy) == ("cpu", "fsdp")
    with pytest.raises(ConfigError, match=r"\[trainer.ddp.process_group_backend\] got 'nccl'"):
        load_config(
            "train",
            ["trainer=ddp", "trainer.accelerator=cpu", "trainer.ddp.process_group_backend=nccl"],
        )


@pytest.mark.parametrize("strategy", ["fsdp_cpu_offload", "deepspeed_stage_2"])
def test_lightnings_other_sharded_strategies_still_need_a_gpu(strategy):
    (problem,) = TrainerConfig(accelerator="cpu", strategy=strategy).problems()
    assert problem.path == "strategy" and "trainer.strategy=fsdp" in problem.fix
    assert TrainerConfig(accelerator="gpu", strategy=strategy).problems() == []


def test_lora_and_the_sft_app_refuse_fsdp():
    with pytest.raises(ConfigError, match=r"\[lora.enabled\] got True; expected false with"):
        load_config("train", ["trainer=fsdp", "lora.enabled=true"])
    with pytest.raises(ConfigError, match=r"\[trainer.strategy\] got 'fsdp'; expected auto or ddp"):
        load_config("sft", ["trainer=fsdp"])


def test_ddp_strategy_carries_its_settings():
    from lightning.pytorch.strategies import DDPStrategy

    ddp = DDPConfig(find_unused_parameters=True, gradient_as_bucket_view=True)
    built = build_strategy("ddp", ddp, FSDPConfig())
    assert isinstance(built, DDPStrategy)
    assert built._ddp_kwargs == {"find_unused_parameters": True, "gradient_as_bucket_view": True}
    assert built.process_group_backend is None  # auto: Lightning picks gloo or nccl per device
    gloo = build_strategy("ddp", DDPConfig(process_group_backend="gloo"), FSDPConfig())
    assert isinstance(gloo, DDPStrategy) and gloo.process_group_backend == "gloo"


def test_fsdp_strategy_is_one_mesh_dimension_with_one_file_checkpoints():
    from framework.lightning.fully_sharded import FullyShardedStrategy

    built = build_strategy("fsdp", DDPConfig(), FSDPConfig(process_group_backend="gloo"))
    assert isinstance(built, FullyShardedStrategy)
    assert built.process_group_backend == "gloo"
    assert built._save_distributed_checkpoint is False


@pytest.mark.parametrize("name", ["auto", "ddp_spawn", "deepspeed_stage_2"])
def test_other_strategy_names_go_to_lightning_unchanged(name):
    assert build_strategy(name, DDPConfig(), FSDPConfig()) == name


def test_the_cpu_default_trainer_is_lightnings_auto_strategy(tmp_path):
    from lightning.pytorch.strategies import SingleDeviceStrategy

    from framework.lightning.trainer import build_trainer

    t = load_config("train", []).trainer
    assert t.strategy == "auto"
    trainer = build_trainer(
        t, None, tmp_path, max_steps=1, callbacks=[], val_check_interval=1, limit_val_batches=0
    )
    assert type(trainer.strategy) is SingleDeviceStrategy


def test_fully_shard_arguments_follow_the_settings():
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy

    kw = fully_shard_kwargs(FSDPConfig())
    assert (kw["mp_policy"].param_dtype, kw["mp_policy"].reduce_dtype) == (
        torch.bfloat16,
        torch.float32,
    )
    assert kw["reshard_after_forward"] is True
    assert type(kw["offload_policy"]) is OffloadPolicy  # the no-offload policy
    other = fully_shard_kwargs(
        FSDPConfig(sharding="shard_grad_op", param_dtype="float32", cpu_offload=True)
    )
    assert other["mp_policy"].param_dtype == torch.float32
    assert other["reshard_after_forward"] is False
    assert isinstance(other["offload_policy"], CPUOffloadPolicy)


def test_the_sharded_unit_is_the_decoder_layer(tiny_model):
    layer = decoder_layer_class(tiny_model)
    assert layer.__name__ == "LlamaDecoderLayer" and layer is type(tiny_model.model.layers[0])
    assert decoder_layer_class(tiny_model, "LlamaRMSNorm").__name__ == "LlamaRMSNorm"
    with pytest.raises(ShardingError, match=r"_no_split_modules \['LlamaDecoderLayer'\]"):
        decoder_layer_class(tiny_model, "Qwen2DecoderLayer")


def test_without_model_layers_the_no_split_class_is_the_unit(tiny_model):
    class Wrapper(torch.nn.Module):
        _no_split_modules = ("Missing", "LlamaDecoderLayer")

        def __init__(self) -> None:
            super().__init__()
            self.inner = tiny_model

    assert decoder_layer_class(Wrapper()).__name__ == "LlamaDecoderLayer"
    with pytest.raises(ShardingError, match="has neither"):
        decoder_layer_class(torch.nn.Sequential(torch.nn.Linear(2, 2)))


@pytest.fixture(scope="module")
def tiny_model():
    from framework.rollout.policy import PolicyConfig, load_policy

    return load_policy(PolicyConfig(source="tiny"))[0]


class CountingBackend:
    """A rollout backend that records what it was handed (no generation)."""

    def __init__(self) -> None:
        self.tokenizer = object()
        self.calls = 3
        self.synced: list[torch.nn.Module] = []

    def generate(self, sequences, max_new_tokens, stop, seeds=None):
        return [f"{len(s)}:{n}" for s, n in zip(sequences, max_new_tokens, strict=True)]

    def update_weights(self, model: torch.nn.Module) -> None:
        self.synced.append(model)


def test_the_rollout_copy_takes_the_trained_weights_and_counts_through():
    from framework.registry.protocols import CountsCalls, RolloutBackend
    from framework.training.sharding import GatheredRollouts, full_state_dict

    trained, copy = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2).to(torch.bfloat16)
    inner = CountingBackend()
    backend = GatheredRollouts(inner, copy)
    assert isinstance(backend, RolloutBackend) and isinstance(backend, CountsCalls)
    assert backend.tokenizer is inner.tokenizer and backend.calls == 3
    backend.calls = 7  # a resumed run restores the count, which seeds the sampling
    assert inner.calls == 7
    assert backend.generate([[1, 2]], [4], ["</s>"]) == ["2:4"]
    backend.update_weights(trained)
    assert inner.synced == [copy]  # the copy, in its own dtype, holds the trained weights
    assert copy.weight.dtype == torch.bfloat16
    assert torch.equal(copy.weight, trained.weight.detach().to(torch.bfloat16))
    assert full_state_dict(trained).keys() == trained.state_dict().keys()  # a plain model's own
