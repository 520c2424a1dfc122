"""Trainer settings that Lightning would refuse later with a traceback are refused up front."""

from __future__ import annotations

import pytest

from framework.cli.app import load_config
from framework.config import ConfigError
from framework.lightning.trainer import TrainerConfig


@pytest.mark.parametrize("strategy", ["fsdp", "fsdp_cpu_offload", "deepspeed_stage_2"])
def test_sharded_strategies_need_a_gpu(strategy):
    (problem,) = TrainerConfig(accelerator="cpu", strategy=strategy).problems()
    assert problem.path == "strategy" and "ddp" in problem.fix
    assert TrainerConfig(accelerator="gpu", strategy=strategy).problems() == []


def test_the_train_app_reports_it_before_anything_runs():
    with pytest.raises(ConfigError, match=r"\[trainer.strategy\] got 'fsdp'"):
        load_config("train", ["trainer.strategy=fsdp"])
    assert load_config("train", ["trainer.strategy=ddp", "trainer.devices=2"]).trainer.devices == 2
