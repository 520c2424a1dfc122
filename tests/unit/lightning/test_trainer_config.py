"""Trainer settings that Lightning would refuse later with a traceback are refused up front."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from framework.cli.app import load_config
from framework.config import ConfigError


def test_the_train_app_reports_it_before_anything_runs():
    with pytest.raises(ConfigError, match=r"\[trainer.strategy\] got 'deepspeed_stage_2'"):
        load_config("train", ["trainer.strategy=deepspeed_stage_2"])
    assert load_config("train", ["trainer.strategy=ddp", "trainer.devices=2"]).trainer.devices == 2


@pytest.mark.parametrize(
    ("asked", "root", "expected"),
    [
        ("cuda", torch.device("cuda", 1), "cuda:1"),  # a DDP rank rolls out on its own card
        ("cuda:0", torch.device("cuda", 1), "cuda:0"),  # an explicit card is kept
        ("cpu", torch.device("cuda", 1), "cpu"),
        ("cuda", torch.device("cpu"), "cuda"),
    ],
)
def test_rollouts_go_to_this_ranks_gpu(asked, root, expected):
    from framework.rl.module import SearchAgentRL

    module = _module(asked, root)
    assert SearchAgentRL._rollout_device(module) == expected
    module._trainer = None
    assert SearchAgentRL._rollout_device(module) == asked


def _module(device: str, root: torch.device) -> SimpleNamespace:
    """What ``SearchAgentRL._rollout_device`` reads of a module attached to a trainer on ``root``."""
    return SimpleNamespace(
        cfg=SimpleNamespace(rollout=SimpleNamespace(policy=SimpleNamespace(device=device))),
        _trainer=SimpleNamespace(strategy=SimpleNamespace(root_device=root)),
        global_rank=0,
    )


def test_cpu_rollouts_under_a_gpu_trainer_are_announced(capsys):
    from framework.rl.module import SearchAgentRL

    module = _module("cpu", torch.device("cuda", 0))
    assert SearchAgentRL._rollout_device(module) == "cpu"
    assert "Fix: set rollout.policy.device=cuda" in capsys.readouterr().err
