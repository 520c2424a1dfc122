"""The train app end to end on the tiny model, the small synthesized dataset and BM25.

Runs in-process where a test-only reward is needed (the random tiny model never answers, so the
shipped rewards would all be 0 and nothing would train), and as subprocesses for what a user runs:
multirun sweeps, two-process DDP on CPU, Ctrl-C.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from framework.config import ComponentConfig
from framework.registry import REWARDS

REPO = Path(__file__).resolve().parents[2]


@dataclass
class LengthModRewardConfig(ComponentConfig):
    pass


@REWARDS.register("test_length_mod", config=LengthModRewardConfig)
def length_mod_reward(inputs, *, cfg):
    """A reward that varies between rollouts of random text, so every group has a signal."""
    return torch.tensor([(len(c) % 5) / 4 for c in inputs.completions])


TINY = [
    "warm_start.sft=false",
    "dataset=synth_small",
    "retriever=bm25",
    "rollout.policy.source=tiny",
    "trainer.max_steps=2",
    "sampler.questions_per_step=2",
    "sampler.group_size=3",
    "agent.max_turns=1",
    "agent.max_new_tokens_per_turn=12",
    "trainer.val_questions=2",
    "optim.micro_batch_size=4",
    "optim.lr=1e-3",
    "final_eval.enabled=false",  # one test below turns it on
    # policy/ at the training precision: the tests below compare trained weights exactly (the
    # bf16 export: tests/unit/training/test_export.py, tests/integration/test_train_export.py)
    "export.dtype=float32",
]


def train_in_process(run_dir: Path, *overrides: str):
    from framework.cli.app import run_app
    from framework.cli.train import train

    return run_app("train", train, argv=[*TINY, *overrides, f"hydra.run.dir={run_dir}"])


def cli(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    flags = [a for a in args if a.startswith("-")]  # Hydra wants flags before the overrides
    overrides = [a for a in args if not a.startswith("-")]
    return subprocess.run(
        [sys.executable, "-m", "framework", "train", *flags, *TINY, *overrides],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def event_files(run_dir: Path) -> list[Any]:
    """The run's TensorBoard event files, each read whole (in file-name order)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = []
    for f in sorted((run_dir / "tensorboard").glob("events.out.tfevents.*")):
        ea = EventAccumulator(str(f), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
        ea.Reload()
        out.append(ea)
    return out


def tags(run_dir: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for ea in event_files(run_dir):
        for kind, names in ea.Tags().items():
            if isinstance(names, list):
                out.setdefault(kind, set()).update(names)
    return out


def validation_steps(run_dir: Path) -> list[int]:
    """The step of every validation pass the run logged (``val/accuracy`` events, in order)."""
    return [
        e.step
        for ea in event_files(run_dir)
        if "val/accuracy" in ea.Tags()["scalars"]
        for e in ea.Scalars("val/accuracy")
    ]


def initial_tiny_weights() -> dict[str, torch.Tensor]:
    from framework.rollout.policy import PolicyConfig, load_policy

    model, _ = load_policy(PolicyConfig(source="tiny"))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.slow
def test_training_changes_the_policy_and_logs_every_metric(tmp_path):
    run = tmp_path / "run"
    value = train_in_process(
        run,
        "reward=test_length_mod",
        "final_eval.enabled=true",
        "final_eval.questions=4",
        # scale=demo gives 1 sample per question where the CPU trains in fp32: pinned for every CPU
        "final_eval.samples_per_question=2",
    )
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and not summary["interrupted"]
    assert value == summary["metrics"]["val/accuracy"]  # what a sweeper receives

    # the final block: both policies on the same validation questions, the interval from the pairs
    from framework.eval.paired import paired_bootstrap, per_question
    from framework.eval.records import read_records

    final = summary["final"]
    start = read_records(run / "final_eval" / "start" / "records.jsonl.gz")
    after = read_records(run / "final_eval" / "trained" / "records.jsonl.gz")
    assert {r["question_id"] for r in start} == {r["question_id"] for r in after}
    assert all(r["dataset"].endswith("/validation") for r in start + after)
    assert final["questions"] == 4 and final["samples_per_question"] == 2
    pairs = paired_bootstrap(per_question(start), per_question(after), n_boot=2000)
    assert final["pass@1_difference"]["ci"] == [pairs.low, pairs.high]
    assert final["pass@1_difference"]["diff"] == pytest.approx(pairs.diff)
    assert final["start"]["pass@1"] == pytest.approx(pairs.a_mean)
    assert final["where"]["policy"] == str(run / "policy")

    trained = load_file(run / "policy" / "model.safetensors")
    initial = initial_tiny_weights()
    changed = [k for k in trained if k in initial and not torch.equal(trained[k], initial[k])]
    assert len(changed) >= len(trained) // 2, changed

    found = tags(run)
    scalars = found["scalars"]
    for name in (
        "rollout/reward",
        "rollout/reward/test_length_mod",
        "rollout/accuracy",
        "rollout/entity_match_rate",
        "rollout/partial_credit_share",
        "rollout/wrong_entity_rate_mean",
        "rollout/tool_calls",
        "rollout/turns",
        "rollout/response_length",
        "rollout/format_error",
        "rollout/truncated",
        "rollout/valid_action_ratio",
        "rollout/zero_variance_groups",
        "loss/policy_loss",
        "loss/clip_frac",
        "loss/entropy",
        "loss/grad_norm",
        "timing/generate",
        "timing/retrieval",
        "timing/update",
        "timing/step",
        "train/lr",
        "val/accuracy",
        "val/format_valid",
    ):
        assert name in scalars, (name, sorted(scalars))
    assert {"rollout/rewards", "rollout/advantages"} <= found["histograms"]
    assert any(t.startswith("rollout/samples") for t in found["tensors"])

    lines = (run / "trajectories" / "step-000001.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    assert len(records) == 6 and all("advantage" in r and "response_text" in r for r in records)
    # scale=demo checkpoints every 2 steps
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000002.ckpt"]
    assert "lightning" in json.loads((run / "versions.json").read_text())
    assert "reward:\n  name: test_length_mod" in (run / "config.yaml").read_text()


@pytest.mark.slow  # three tiny runs: about 40 s on 2 cores
@pytest.mark.parametrize(
    ("every", "at_end", "passes"),
    [
        (0, False, 0),  # Lightning used to validate at the last step all the same
        (2, True, 2),  # step 2, then once at the end (not twice)
        (3, False, 1),  # due at the last step: validated once although val_at_end is off
    ],
)
def test_validation_runs_exactly_when_the_config_asks(tmp_path, every, at_end, passes):
    run = tmp_path / "run"
    train_in_process(
        run,
        "trainer.max_steps=3",
        f"trainer.val_every_n_steps={every}",
        f"trainer.val_at_end={str(at_end).lower()}",
    )
    steps = validation_steps(run)
    assert len(steps) == passes, steps
    assert len(set(steps)) == len(steps)  # never two passes at one step


@pytest.mark.slow  # over 10 s on 2 cores (subprocess apps or several tiny runs)
def test_dynamic_sampling_drops_groups_without_signal_end_to_end(tmp_path):
    # the shipped reward: the random tiny model never answers, so every group's rewards are all 0
    # and dapo_dynamic drops them all; the reserve is rolled out too, and no weight changes
    run = tmp_path / "run"
    train_in_process(run, "sampler=dapo_dynamic", "trainer.val_at_end=false")
    trained = load_file(run / "policy" / "model.safetensors")
    initial = initial_tiny_weights()
    assert all(torch.equal(trained[k], initial[k]) for k in trained if k in initial)
    scalars = _scalars(run)
    assert scalars["sampler/drawn_groups"] == [4.0, 4.0]  # 2 step groups + 2 reserve, each step
    assert scalars["sampler/kept_groups"] == [0.0, 0.0]
    assert scalars["sampler/generated_rollouts"] == [12.0, 12.0]
    assert (run / "trajectories" / "step-000001.jsonl").read_text() == ""
    # a reward that differs between rollouts: every group is kept, no reserve is rolled out; with
    # sampler.max_hops=1 every trained question is one-hop (its chain: the anchor and the answer)
    run = tmp_path / "signal"
    train_in_process(
        run,
        "sampler=dapo_dynamic",
        "sampler.max_hops=1",
        "reward=test_length_mod",
        "trainer.val_at_end=false",
    )
    scalars = _scalars(run)
    assert scalars["sampler/generated_rollouts"] == [6.0, 6.0]
    assert scalars["sampler/rollouts_per_kept_group"] == [3.0, 3.0]
    rows = [
        json.loads(line)
        for f in sorted((run / "trajectories").glob("step-*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    assert len(rows) == 12 and all(len(r["entities"]) == 2 for r in rows)


@pytest.mark.slow
def test_adaptive_sampler_observes_every_step_and_its_checkpoint_keeps_the_log(tmp_path):
    run = tmp_path / "run"
    train_in_process(run, "sampler=vade", "reward=test_length_mod", "trainer.val_at_end=false")
    ckpt = torch.load(run / "checkpoints" / "step-000002.ckpt", weights_only=False)
    (state,) = [v for k, v in ckpt.items() if k.endswith("QuestionDataModule")]
    log = state["sampler"]["log"]
    assert [e["step"] for e in log] == [0, 1] and state["sampler"]["draws"] == 2
    assert all(len(e["questions"]) == 2 and all(len(r) == 3 for r in e["rewards"]) for e in log)


def _scalars(run_dir: Path) -> dict[str, list[float]]:
    """Every scalar's values in step order."""
    return {k: [v[s] for s in sorted(v)] for k, v in _scalars_by_step(run_dir).items()}


def _scalars_by_step(run_dir: Path) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for ea in event_files(run_dir):
        for name in ea.Tags()["scalars"]:
            out.setdefault(name, {}).update({e.step: e.value for e in ea.Scalars(name)})
    return out


@pytest.mark.slow  # over 10 s on 2 cores (subprocess apps or several tiny runs)
def test_resumed_run_equals_the_uninterrupted_one(tmp_path):
    common = ["reward=test_length_mod", "trainer.val_at_end=false", "trainer.keep_checkpoints=5"]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    train_in_process(full, *common, "trainer.checkpoint_every_n_steps=1")
    first = full / "checkpoints" / "step-000001.ckpt"
    train_in_process(resumed, *common, f"resume={first}")

    a = load_file(full / "policy" / "model.safetensors")
    b = load_file(resumed / "policy" / "model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    step2 = "trajectories/step-000002.jsonl"
    assert (full / step2).read_text() == (resumed / step2).read_text()
    assert not (resumed / "trajectories" / "step-000001.jsonl").exists()
    summary = json.loads((resumed / "summary.json").read_text())
    assert summary["steps"] == 2
    # the checkpoint keeps the peak of the launch that wrote it; the resumed run's summary holds it
    # (a killed launch writes no summary of its own)
    saved = torch.load(first, map_location="cpu", weights_only=False)["seekrl"]["peak_bytes"]
    assert saved > 10_000_000  # a process that trained a model: far above 10 MB
    assert summary["earlier_launches_peak_gb"] == round(saved / 1e9, 2)
    assert json.loads((full / "summary.json").read_text())["earlier_launches_peak_gb"] is None


#: a sampler with state beyond the uniform walk (reserve draws, observation logs, curriculum stage)
STATEFUL_SAMPLERS = [
    pytest.param(["sampler=vade"], id="vade"),
    pytest.param(["sampler=xrpo", "sampler.extra_rollouts=2"], id="xrpo", marks=pytest.mark.slow),
    pytest.param(["sampler=dapo_dynamic"], id="dapo_dynamic", marks=pytest.mark.slow),
    pytest.param(["sampler=reinforce_rej"], id="reinforce_rej", marks=pytest.mark.slow),
    pytest.param(
        ["sampler=hop_curriculum", "sampler.steps_per_stage=1"],
        id="hop_curriculum",
        marks=pytest.mark.slow,
    ),
    # not a sampler: R³'s augmenter keeps a buffer across steps (two questions, both drawn at
    # every step, so from the second step on each is a hard question with failures stored)
    pytest.param(["algorithm=r3", "dataset.train_size=2"], id="r3_buffer", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("sampler", STATEFUL_SAMPLERS)
@pytest.mark.slow
def test_resumed_run_with_a_stateful_sampler_equals_the_uninterrupted_one(tmp_path, sampler):
    # four steps, resumed after the second: vade's and xrpo's draw of step 3 (0-based) uses the
    # observation of step 1, which the resumed run only has from the checkpoint's log
    common = [
        *sampler,
        "reward=test_length_mod",
        "trainer.max_steps=4",
        "trainer.val_at_end=false",
        "trainer.keep_checkpoints=5",
    ]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    train_in_process(full, *common, "trainer.checkpoint_every_n_steps=1")
    train_in_process(resumed, *common, f"resume={full / 'checkpoints' / 'step-000002.ckpt'}")

    a = load_file(full / "policy" / "model.safetensors")
    b = load_file(resumed / "policy" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    for step in (3, 4):
        name = f"trajectories/step-{step:06d}.jsonl"
        assert (full / name).read_text() == (resumed / name).read_text(), name
    # the sampler's and the health monitors' figures of the resumed steps match too
    x, y = _scalars_by_step(full), _scalars_by_step(resumed)
    names = [k for k in y if k.startswith(("sampler/", "health/", "augment/"))]
    if "algorithm=r3" in sampler:  # the buffer was used after the resume point, not only before
        assert sum(y["augment/reflected"].values()) + sum(y["augment/replayed"].values()) > 0
    assert any(k.startswith("health/") for k in names)
    for name in names:  # every value the resumed run logged, at the step the full run logged it
        assert y[name] == {s: v for s, v in x[name].items() if s in y[name]}, name
        assert len(y[name]) <= 2, name  # steps 3 and 4 only


@pytest.mark.slow  # over 10 s on 2 cores (subprocess apps or several tiny runs)
def test_kl_lora_and_two_policy_epochs(tmp_path):
    run = tmp_path / "run"
    train_in_process(
        run,
        "reward=test_length_mod",
        "kl.coef=0.1",
        "optim.policy_epochs=2",
        "lora.enabled=true",
        "lora.r=4",
        "loss.rollout_correction=tis",
        "trainer.val_at_end=false",
    )
    scalars = tags(run)["scalars"]
    assert "loss/kl" in scalars and "loss/approx_kl" in scalars
    # off-policy correction: the decoding loop's log-probs against the trainer's, every step
    values = _scalars(run)
    for name in ("loss/rollout_mismatch_kl_mean", "loss/rollout_correction_frac"):
        assert len(values[name]) == 2, name
    # the same fp32 weights score the same tokens: the mismatch is rounding (KV cache, batching)
    assert max(values["loss/rollout_mismatch_kl_max"]) < 1e-3
    # the exported policy is a plain checkpoint (adapters merged) that the rollout app can load
    from framework.rollout.policy import PolicyConfig, load_policy

    model, _ = load_policy(PolicyConfig(source="path", path=str(run / "policy")))
    assert not any("lora" in k for k in model.state_dict())
    merged = {k: v for k, v in model.state_dict().items()}
    initial = initial_tiny_weights()
    assert not torch.equal(
        merged["model.layers.0.self_attn.q_proj.weight"],
        initial["model.layers.0.self_attn.q_proj.weight"],
    )
    assert torch.equal(
        merged["model.layers.0.mlp.up_proj.weight"], initial["model.layers.0.mlp.up_proj.weight"]
    )


@pytest.mark.slow  # over 10 s on 2 cores (several tiny runs)
def test_checkpoint_settings_a_user_asked_for(tmp_path, capsys):
    # checkpoint_every_n_steps=0 and no final checkpoint: nothing but the exported policy
    none = tmp_path / "none"
    train_in_process(
        none,
        "trainer.checkpoint_every_n_steps=0",
        "trainer.checkpoint_at_end=false",
        "trainer.val_at_end=false",
    )
    assert not (none / "checkpoints").exists() and (none / "policy" / "config.json").is_file()
    # weights only: the final checkpoint has no optimiser state, and resuming from it is refused
    light = tmp_path / "light"
    train_in_process(
        light,
        "trainer.checkpoint_every_n_steps=0",
        "trainer.checkpoint_weights_only=true",
        "trainer.val_at_end=false",
    )
    (ckpt,) = (light / "checkpoints").iterdir()
    assert ckpt.name == "step-000002.ckpt"
    assert "optimizer_states" not in torch.load(ckpt, weights_only=True)
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        train_in_process(tmp_path / "again", f"resume={light}", "trainer.max_steps=3")
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"[resume] {ckpt} holds the weights only" in err and "Fix: resume from a full" in err


@pytest.mark.slow  # over 10 s on 2 cores (subprocess apps or several tiny runs)
def test_resume_refuses_a_checkpoint_of_another_policy(tmp_path):
    run = tmp_path / "run"
    train_in_process(
        run, "trainer.max_steps=1", "trainer.val_at_end=false", "trainer.export_policy=false"
    )
    proc = cli(f"resume={run}", "rollout.policy.tiny_hidden=32", f"hydra.run.dir={tmp_path}/again")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "[resume] got a checkpoint of policy" in proc.stderr


@pytest.mark.slow  # subprocess runs: 10-15 s
def test_two_job_multirun_returns_one_directory_per_job(tmp_path):
    proc = cli("-m", "seed=0,1", "trainer.max_steps=1", f"hydra.sweep.dir={tmp_path}/sweep")
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = sorted(p for p in (tmp_path / "sweep").iterdir() if p.is_dir())
    assert len(jobs) == 2
    seeds = sorted(json.loads((j / "summary.json").read_text())["seed"] for j in jobs)
    assert seeds == [0, 1]
    assert all((j / "checkpoints" / "step-000001.ckpt").is_file() for j in jobs)


@pytest.mark.slow  # subprocess runs: 10-15 s
def test_ddp_with_two_cpu_processes(tmp_path):
    run = tmp_path / "run"
    proc = cli(
        "trainer.strategy=ddp",
        "trainer.devices=2",
        "trainer.max_steps=1",
        f"hydra.run.dir={run}",
        timeout=280,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (run / "trajectories" / "step-000001.jsonl").is_file()  # rank 0's group
    assert (run / "trajectories" / "step-000001.rank1.jsonl").is_file()  # rank 1's group
    assert json.loads((run / "summary.json").read_text())["steps"] == 1
    assert (run / "checkpoints" / "step-000001.ckpt").is_file()


@pytest.mark.slow  # subprocess runs: 10-15 s
def test_ctrl_c_saves_a_checkpoint_and_the_run_resumes(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "framework",
            "train",
            *TINY,
            "trainer.max_steps=50",
            "trainer.checkpoint_every_n_steps=0",
            f"hydra.run.dir={run}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    deadline = time.time() + 200
    while not (run / "trajectories" / "step-000001.jsonl").exists():
        assert proc.poll() is None and time.time() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=200)
    assert proc.returncode == 130, err[-3000:]
    assert "finishing the current step" in err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["interrupted"] and 1 <= summary["steps"] < 50
    saved = sorted((run / "checkpoints").glob("step-*.ckpt"))
    assert [p.name for p in saved] == [f"step-{summary['steps']:06d}.ckpt"]
    # the policy of the step it stopped after is exported all the same, and says so
    assert summary["policy"]["step"] == summary["steps"]
    assert (run / "policy" / "config.json").is_file()
    assert validation_steps(run) == []  # it stops at once: no validation pass after the step

    done = cli(
        f"resume={run}",
        "trainer.max_steps=" + str(summary["steps"] + 1),
        f"hydra.run.dir={tmp_path}/more",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        json.loads((tmp_path / "more" / "summary.json").read_text())["steps"]
        == summary["steps"] + 1
    )
    assert os.path.isdir(tmp_path / "more" / "policy")


@pytest.mark.slow  # subprocess runs: 10-15 s
def test_warm_start_sft_runs_the_warm_start_once_and_reuses_it(tmp_path, capsys):
    stage = [
        "warm_start.sft=true",
        "trainer.max_steps=1",
        "trainer.val_at_end=false",
        "warm_start.expert.questions=8",
        "warm_start.optim.epochs=1",
        "warm_start.eval_questions=0",
        "agent.max_turns=6",  # room for the expert's turns (TINY keeps RL turns minimal)
        "agent.max_new_tokens_per_turn=200",
        f"warm_start.expert.seed={time.time_ns() % 10**6}",  # a fresh cache entry for this test
    ]
    train_in_process(tmp_path / "first", *stage)
    out = capsys.readouterr().out
    assert "warm start: cold-start SFT first" in out
    config = (tmp_path / "first" / "config.yaml").read_text()
    assert "sft: true" in config
    train_in_process(tmp_path / "second", *stage, "algorithm=grpo")
    out = capsys.readouterr().out
    assert "warm start: reusing the SFT policy" in out
    assert json.loads((tmp_path / "second" / "summary.json").read_text())["steps"] == 1
