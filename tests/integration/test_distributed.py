"""Two gloo processes on CPU train as one process on the whole batch: DDP and FSDP2.

Each run launches ``distributed_step.py`` (Lightning starts its second process) with the strategy
built from the ``trainer`` settings, as the train app builds it; each process updates the tiny
random policy on its half of a fixed batch through the framework's policy update, and the
gradient each parameter holds afterwards must equal the one a single process gets from the whole
batch. The batch is made so that this holds exactly in arithmetic: the loss aggregation is
``seq_mean_token_mean`` and each process holds half the rows, so the mean of the two processes'
losses is the whole batch's loss (with ``token_mean`` it holds only when both hold as many
trained tokens: data parallelism averages the processes' means). One group has no signal and is
skipped, so the processes run different numbers of micro-batches and the padded passes are
exercised.

The train app runs under both strategies too (the same rollouts and trained policy; an FSDP run
resumed from its checkpoint equals the uninterrupted one).

What is not run here: GPUs (NCCL), several nodes, bf16 (``trainer.fsdp.param_dtype``; this
machine's CPU emulates bf16 slowly), CPU offload (refused on a CPU accelerator).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.integration import distributed_step as step

REPO = Path(__file__).resolve().parents[2]


def launch(out: Path, strategy: str, *settings: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    script = Path(step.__file__).resolve()
    proc = subprocess.run(
        [sys.executable, str(script), str(out), strategy, *settings],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return torch.load(out, weights_only=False)


def single_process(rows: slice, epochs: int) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """The same update in this process on ``rows`` of the batch: figures and gradients."""
    from framework.lightning.trainer import TrainerConfig, apply_gradient_checkpointing
    from framework.rollout.policy import PolicyConfig, load_policy
    from framework.training.schedule import optimizer_and_schedule

    model, tok = load_policy(PolicyConfig(source="tiny"))
    apply_gradient_checkpointing(model, TrainerConfig())
    opt, sched = optimizer_and_schedule(model, step.optim(epochs), 1)
    trajs = step.batch(len(tok))[rows]
    figures = step.update(
        model,
        trajs,
        step.ADVANTAGES[rows],
        tok.pad_token_id,
        epochs,
        optimizer=opt,
        scheduler=sched,
    )
    return figures, step.gradients(model)


def assert_same_gradients(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys()
    for name, g in expected.items():
        assert torch.allclose(got[name], g, rtol=1e-4, atol=1e-7), (
            name,
            float((got[name] - g).abs().max()),
        )


@pytest.mark.slow  # two processes (Lightning relaunches the script): 18-37 s on 2 shared cores
@pytest.mark.parametrize(
    ("strategy", "settings", "kind"),
    [
        pytest.param("ddp", [], "DDPStrategy", id="ddp"),
        pytest.param(
            "fsdp",
            ["param_dtype=float32", "policy_epochs=2"],
            "FullyShardedStrategy",
            id="fsdp-full_shard-2-epochs",
        ),
        pytest.param(
            "fsdp",
            ["param_dtype=float32", "sharding=shard_grad_op"],
            "FullyShardedStrategy",
            id="fsdp-shard_grad_op",
        ),
    ],
)
def test_two_processes_train_as_one_on_the_whole_batch(tmp_path, strategy, settings, kind):
    epochs = int(dict(s.split("=") for s in settings).get("policy_epochs", 1))
    got = launch(tmp_path / "result.pt", strategy, *settings)
    assert got["strategy"] == kind
    expected_figures, expected = single_process(slice(0, 8), epochs)
    assert_same_gradients(got["grads"], expected)
    rank0, rank1 = got["figures"]
    # each process's loss is its half's; their mean is the whole batch's
    loss = (rank0["policy_loss"] + rank1["policy_loss"]) / 2
    assert loss == pytest.approx(expected_figures["policy_loss"], rel=1e-5, abs=1e-7)
    for figures in (rank0, rank1):  # the norm of the synchronised (whole-batch) gradient
        assert figures["grad_norm"] == pytest.approx(expected_figures["grad_norm"], rel=1e-4)
    # what makes the test able to fail: one half alone trains another gradient
    _, half = single_process(step.RANK_ROWS[0], epochs)
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.allclose(half[name], expected[name], rtol=1e-2, atol=1e-6)


#: the train app on the tiny model, two CPU processes, one step each of 2 x 3 rollouts
TINY_RUN = [
    "warm_start.sft=false",
    "dataset=synth_small",
    "retriever=bm25",
    "rollout.policy.source=tiny",
    "reward=test_length_mod",
    "sampler.questions_per_step=2",
    "sampler.group_size=3",
    "agent.max_turns=1",
    "agent.max_new_tokens_per_turn=12",
    "optim.micro_batch_size=2",
    "optim.lr=1e-3",
    "final_eval.enabled=false",
    "trainer.val_at_end=false",
    "trainer.keep_checkpoints=5",
    "trainer.accelerator=cpu",
    "trainer.devices=2",
    "trainer.precision=32-true",
    "trainer.fsdp.param_dtype=float32",
    # the export in fp32: two runs a rounding apart in fp32 can land one bf16 step apart (6e-5 at
    # weights of 0.01), so the default bf16 export cannot be compared to 1e-5
    "export.dtype=float32",
]


def train(run: Path, *overrides: str) -> Path:
    """The train app (with the test reward, :mod:`train_with_length_reward`) in ``run``."""
    script = Path(__file__).with_name("train_with_length_reward.py")
    proc = subprocess.run(
        [sys.executable, str(script), *TINY_RUN, *overrides, f"hydra.run.dir={run}"],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return run


def exported(run: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(run / "policy" / "model.safetensors")


def rollouts(run: Path, step_no: int) -> list[str]:
    folder = run / "trajectories"
    return [(folder / f"step-{step_no:06d}{r}.jsonl").read_text() for r in ("", ".rank1")]


@pytest.mark.slow  # two runs of the train app on two processes: 38-67 s on 2 shared cores
def test_the_train_app_trains_under_fsdp_as_under_ddp(tmp_path):
    """``trainer=fsdp`` end to end: rollouts on the plain copy (the same as under DDP), the
    sharded update (the same weights, to rounding), the checkpoint (whole tensors, one file) and
    the export (gathered whole on rank 0)."""
    from framework.rollout.policy import PolicyConfig, load_policy

    ddp = train(tmp_path / "ddp", "trainer=ddp", "trainer.max_steps=1")
    fsdp = train(tmp_path / "fsdp", "trainer=fsdp", "trainer.max_steps=1")
    assert rollouts(fsdp, 1) == rollouts(ddp, 1)
    start = load_policy(PolicyConfig(source="tiny"))[0].state_dict()
    a, b = exported(ddp), exported(fsdp)
    assert a.keys() == b.keys() == start.keys() - {"lm_head.weight"}  # tied: saved once
    moved = max(float((a[k] - start[k]).abs().max()) for k in a)
    apart = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert moved > 5e-4 and apart < 1e-5, (moved, apart)  # lr 1e-3: Adam moves weights by ~lr
    ckpt = torch.load(fsdp / "checkpoints" / "step-000001.ckpt", weights_only=False)
    assert ckpt["global_step"] == 1 and len(ckpt["optimizer_states"][0]["state"]) > 0
    for name, tensor in b.items():  # whole tensors, not rank 0's shards
        assert torch.equal(ckpt["state_dict"][f"policy.{name}"], tensor), name


@pytest.mark.slow  # two runs of the train app on two processes: 39-78 s on 2 shared cores
def test_a_resumed_fsdp_run_equals_the_uninterrupted_one(tmp_path):
    common = ["trainer=fsdp", "trainer.max_steps=2"]
    full = train(tmp_path / "full", *common, "trainer.checkpoint_every_n_steps=1")
    first = full / "checkpoints" / "step-000001.ckpt"
    resumed = train(tmp_path / "resumed", *common, f"resume={first}")
    assert rollouts(resumed, 2) == rollouts(full, 2)
    a, b = exported(full), exported(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    assert json.loads((resumed / "summary.json").read_text())["steps"] == 2
