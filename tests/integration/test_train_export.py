"""A train run's ``policy/`` however the run ends: interrupted after a step (Ctrl-C once) it holds
that step's weights; aborted mid-step (a KeyboardInterrupt: Ctrl-C twice) its newest checkpoint's;
``seekrl-export`` writes the same folder from the step checkpoint. (Stopped by a health monitor:
tests/integration/test_health.py.)

The runs are test_health's cheap one, with the tiny policy scripted to answer at once and a reward
that interrupts the run itself, so nothing depends on the timing of a signal from outside.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass

import pytest
import torch

from framework.config import ComponentConfig
from framework.registry import REWARDS, ROLLOUT_BACKENDS
from framework.training.checkpoints import policy_weights
from framework.types import Generation
from tests.integration.test_health import (
    SEARCHING_AN_EMPTY_INDEX,
    AlwaysSearchBackend,
    AlwaysSearchConfig,
    run_in_process,
)

#: calls of the interrupting rewards in this test (one per RL step)
CALLS = {"n": 0}
ANSWER = "<think>I know this.</think>\n<answer>Paris</answer>"
#: the q_proj weight of layer 0 of every model an answering backend was built with, in order
BUILT_WITH: list[torch.Tensor] = []


@dataclass
class AnsweringConfig(AlwaysSearchConfig):
    pass


@ROLLOUT_BACKENDS.register("test_answering", config=AnsweringConfig)
class AnsweringBackend(AlwaysSearchBackend):
    """The tiny policy's backend, except that every turn answers at once (so every rollout is
    complete and trains: an over-budget one would not), noting the weights it was built with."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        BUILT_WITH.append(self.model.model.layers[0].self_attn.q_proj.weight.detach().clone())

    def generate(self, sequences, max_new_tokens, stop, seeds=None):  # evaluations pass seeds
        ids = self.tokenizer.encode(ANSWER, add_special_tokens=False)
        self.calls += 1
        return [Generation(list(ids[:n]), "stop") for n in max_new_tokens]


@dataclass
class InterruptingRewardConfig(ComponentConfig):
    pass


@REWARDS.register("test_by_position", config=InterruptingRewardConfig)
def by_position(inputs, *, cfg):
    """Rewards that differ between the rollouts of a group (the scripted ones are all alike)."""
    return torch.tensor([(i % 3) / 2 for i in range(len(inputs.completions))])


@REWARDS.register("test_ctrl_c_in_step_1", config=InterruptingRewardConfig)
def ctrl_c_in_step_1(inputs, *, cfg):
    """:func:`by_position`; during step 1 a SIGINT arrives (a Ctrl-C)."""
    CALLS["n"] += 1
    if CALLS["n"] == 1:
        os.kill(os.getpid(), signal.SIGINT)
    return by_position(inputs, cfg=cfg)


@REWARDS.register("test_abort_in_step_2", config=InterruptingRewardConfig)
def abort_in_step_2(inputs, *, cfg):
    """:func:`by_position`; step 2 is aborted (a second Ctrl-C mid-step)."""
    CALLS["n"] += 1
    if CALLS["n"] == 2:
        raise KeyboardInterrupt
    return by_position(inputs, cfg=cfg)


def run_with_reward(run, reward: str, *overrides: str):
    CALLS["n"] = 0
    BUILT_WITH.clear()
    setup = [o for o in SEARCHING_AN_EMPTY_INDEX if not o.startswith(("reward=", "rollout="))]
    return run_in_process(
        run,
        *setup,
        f"reward={reward}",
        "rollout=test_answering",
        "trainer.val_at_end=false",
        "export.dtype=bfloat16",  # the default (TINY pins float32 for exact comparisons)
        *overrides,
    )


def exported_weights(folder) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder).state_dict()


def assert_bf16_of(got: dict[str, torch.Tensor], ckpt) -> None:
    """``got`` (an exported folder's weights) is the checkpoint's policy rounded to bf16."""
    want = policy_weights(ckpt)
    assert got.keys() == want.keys()
    for name, value in want.items():
        assert got[name].dtype == torch.bfloat16, name
        assert torch.equal(got[name], value.to(torch.bfloat16)), name


def test_an_interrupted_run_exports_the_step_it_stopped_after(tmp_path, capsys):
    from framework.cli.app import run_app
    from framework.cli.export import export
    from framework.lightning.trainer import INTERRUPTED

    run = tmp_path / "run"
    with pytest.raises(SystemExit) as info:
        run_with_reward(run, "test_ctrl_c_in_step_1", "trainer.max_steps=3")
    assert info.value.code == INTERRUPTED
    summary = json.loads((run / "summary.json").read_text())
    assert summary["interrupted"] and summary["steps"] == 1
    assert summary["policy"] == {
        "path": str(run / "policy"),
        "step": 1,
        "dtype": "bfloat16",
        "source": "the run's weights after its last step (interrupted)",
    }
    out = capsys.readouterr().out
    assert f"exported the policy from step 1 (bfloat16) to {run / 'policy'}" in out
    assert "policy:      " + str(run / "policy") + "  (step 1, bfloat16;" in out
    ckpt = run / "checkpoints" / "step-000001.ckpt"  # the interruption's (every_n_steps: 2)
    policy = exported_weights(run / "policy")
    assert_bf16_of(policy, ckpt)
    name = "model.layers.0.self_attn.q_proj.weight"  # the step trained it: not the initial one
    assert not torch.equal(policy[name], BUILT_WITH[0].to(torch.bfloat16))

    # seekrl-export of the same checkpoint writes the same weights
    record = run_app("export", export, argv=[f"checkpoint={run}", f"hydra.run.dir={tmp_path}/x"])
    assert record["path"] == str(run / "export" / "step-000001") and record["step"] == 1
    again = exported_weights(record["path"])
    assert all(torch.equal(again[k], v) for k, v in policy.items())


def test_an_aborted_run_exports_its_newest_checkpoint(tmp_path, capsys):
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as info:
        run_with_reward(
            run, "test_abort_in_step_2", "trainer.max_steps=3", "trainer.checkpoint_every_n_steps=1"
        )
    assert info.value.code == 1  # Lightning's exit after a KeyboardInterrupt
    ckpt = run / "checkpoints" / "step-000001.ckpt"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [ckpt.name]
    record = json.loads((run / "policy" / "seekrl_export.json").read_text())
    assert record == {
        "path": str(run / "policy"),
        "step": 1,
        "dtype": "bfloat16",
        "source": f"checkpoint {ckpt} (the run was aborted mid-step)",
    }
    assert "exported the policy from step 1 (bfloat16)" in capsys.readouterr().err
    assert_bf16_of(exported_weights(run / "policy"), ckpt)
    assert not (run / "summary.json").exists()  # an aborted run writes no summary, as before


def test_the_final_comparison_evaluates_the_trained_weights_before_rounding(tmp_path):
    # rollouts in fp32, the export in bf16: the trained policy is evaluated as it trained, the
    # same precision as the warm start, not as policy/ holds it
    run = tmp_path / "run"
    run_with_reward(
        run,
        "test_by_position",
        "rollout.compute_dtype=float32",
        "trainer.max_steps=2",
        "final_eval.enabled=true",
        "final_eval.questions=2",  # the paired interval needs two
        "final_eval.samples_per_question=1",
    )
    assert len(BUILT_WITH) == 3  # training, then the warm start's and the trained evaluations
    name = "model.layers.0.self_attn.q_proj.weight"
    trained = policy_weights(run / "checkpoints" / "step-000002.ckpt")[name]
    assert BUILT_WITH[2].dtype == torch.float32 and torch.equal(BUILT_WITH[2], trained)
    assert not torch.equal(trained, trained.to(torch.bfloat16).float())  # rounding would show
    assert not torch.equal(BUILT_WITH[1], trained)  # the warm start's differ: it trained
    results = json.loads((run / "final_eval" / "trained" / "results.json").read_text())
    assert results["policy"] == f"{run / 'policy'} (the weights it was saved from)"
    assert json.loads((run / "summary.json").read_text())["final"]["questions"] == 2
