"""The console commands, run as a user runs them (subprocesses)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None):
    proc = subprocess.run(
        [sys.executable, "-m", "framework", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        cwd=cwd or REPO,
    )
    return proc


def test_train_prints_composed_typed_config_for_swapped_components():
    proc = run("train", "advantage=rloo", "loss=gspo", "--cfg", "job")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "advantage:\n  name: rloo" in out
    # the loss section: its base's fields (agg, norm_constant) come first, then gspo's own
    loss = out.split("loss:\n", 1)[1].split("\nkl:", 1)[0]
    assert loss.startswith("  name: gspo\n") and "  clip_low: 0.0003\n  clip_high: 0.0004" in loss
    assert "reward:\n  name: e_grpo\n  alpha: 0.3" in out


def test_train_cfg_job_shows_the_search_r1_recipe_without_its_required_paths():
    # the command: the settings print although the data, model and server are not given
    proc = run("train", "experiment=search_r1", "--cfg", "job")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for line in (
        "  protocol: search_r1\n",
        "  max_observation_tokens: 500\n",
        "  questions_per_step: 512\n  group_size: 5\n",
        "  mini_batch_size: 260\n",
        "  lr: 1.0e-06\n",
        "  over_budget: train\n",  # Search-R1 trains every rollout
    ):
        assert line in out, line
    assert "  train: ${required:}\n" in out  # still to be given


@pytest.mark.slow
def test_unknown_component_lists_options_and_closest_match():
    proc = run("train", "advantage=nonexistent")
    assert proc.returncode == 2
    assert "[advantage] got 'nonexistent'; expected one of: " in proc.stderr
    for name in ("grpo", "rloo", "reinforce_pp_baseline", "dr_grpo"):
        assert name in proc.stderr
    proc = run("train", "advantage=rlo")
    assert proc.returncode == 2 and "(closest: 'rloo')" in proc.stderr


def test_unknown_choice_in_file_group():
    proc = run("train", "trainer=gpuu")
    assert proc.returncode == 2
    assert "[trainer] got 'gpuu'" in proc.stderr and "(closest: 'gpu')" in proc.stderr


def test_invalid_values_reported_together(tmp_path):
    proc = run("train", "loss.clip_low=1.5", "sampler.group_size=1", "optim.schedule=warm")
    assert proc.returncode == 2
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip().startswith("[")]
    assert {line.split("]")[0][1:] for line in lines} == {
        "loss.clip_low",
        "sampler.group_size",
        "optim.schedule",
    }


@pytest.mark.slow
def test_dry_run_validates_and_lists_components(tmp_path):
    # an empty cache, as on a fresh machine: the dry run says what it would build and builds nothing
    cache = tmp_path / "cache"
    proc = run(
        "train", "dry_run=true", f"hydra.run.dir={tmp_path}/run", env={"SEEKRL_CACHE": str(cache)}
    )
    assert proc.returncode == 0, proc.stderr
    assert "configuration valid (algorithm=e_grpo" in proc.stdout
    # the precision this machine would train in, and why, before anything is built
    assert re.search(r"precision +(32-true|bf16-mixed) \(.+\)", proc.stdout), proc.stdout
    assert (
        "final comparison   the warm start and the trained policy on 32 validation" in proc.stdout
    )
    for stage in ("passage store", "passage embeddings", "faiss index", "questions", "policy"):
        assert re.search(rf"{stage} +to build +{cache}", proc.stdout), proc.stdout
    assert re.search(
        r"passage embeddings .*embed at least \d+ passages, about \d+ (s|min)", proc.stdout
    )
    assert re.search(r"warm start \(SFT\) +to build .*expert questions", proc.stdout), proc.stdout
    assert re.search(r"RL +\d+ steps, \d+ rollouts", proc.stdout)
    # time and peak memory per stage, from recorded figures, said so
    assert "estimate per stage (recorded figures: " in proc.stdout
    for stage in (
        "index",
        "questions",
        "warm start \\(SFT\\)",
        "RL",
        "final comparison",
        "whole job",
    ):
        assert re.search(rf"  {stage} +about \d+ (s|min|h) +peak about [\d.]+ GB", proc.stdout), (
            stage
        )
    assert "uniform" in proc.stdout and "reinforce_pp_baseline" in proc.stdout
    assert not cache.exists() or not any(cache.rglob("*")), list(cache.rglob("*"))
    assert (tmp_path / "run" / ".hydra" / "config.yaml").is_file()


@pytest.mark.slow  # over 10 s on 2 cores (subprocess apps or several tiny runs)
def test_dry_run_checks_data_that_exists(tmp_path):
    # synthesized once (no index: answerability off), the dry run then reads and checks the splits
    data = [
        "dataset.corpus.limit=1500",
        "dataset.train_size=40",
        "dataset.validation_size=10",
        "dataset.test_size=10",
        "dataset.answerability.enabled=false",
        f"dataset.output_dir={tmp_path}/data",
    ]
    proc = run("synth", *data, f"hydra.run.dir={tmp_path}/synth")
    assert proc.returncode == 0, proc.stderr
    proc = run("train", "dry_run=true", *data, f"hydra.run.dir={tmp_path}/run")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"questions +cached", proc.stdout), proc.stdout
    assert re.search(r"data +train (\d+), validation (\d+) questions, checked", proc.stdout)


@pytest.mark.slow  # over 10 s on 2 cores (subprocess apps or several tiny runs)
def test_multirun_sweep_gives_each_job_its_own_directory(tmp_path):
    # dataset=synth_small: the jobs load data, and the default set would need the full index
    proc = run(
        "train",
        "-m",
        "experiment=alpha_sweep",
        "dataset=synth_small",
        "dry_run=true",
        f"hydra.sweep.dir={tmp_path}/sweep",
    )
    assert proc.returncode == 0, proc.stderr
    jobs = sorted(p for p in (tmp_path / "sweep").iterdir() if p.is_dir())
    assert len(jobs) == 4
    from omegaconf import OmegaConf

    alphas = [OmegaConf.load(job / ".hydra" / "config.yaml").reward.alpha for job in jobs]
    assert sorted(alphas) == [0.0, 0.1, 0.3, 0.5]


def test_eval_rejects_bad_inputs_before_loading_anything(tmp_path):
    proc = run("eval", "checkpoint=/nowhere", "labels=[a]", "samples_per_question=0")
    assert proc.returncode == 2
    for key in ("[checkpoint] got '/nowhere'", "[labels]", "[samples_per_question] got 0"):
        assert key in proc.stderr, proc.stderr


def test_export_rejects_a_missing_checkpoint_before_loading_anything(tmp_path):
    proc = run("export", f"checkpoint={tmp_path / 'nowhere'}", f"hydra.run.dir={tmp_path}/h")
    assert proc.returncode == 2
    assert f"[checkpoint] got '{tmp_path / 'nowhere'}'; expected a .ckpt file" in proc.stderr
    assert "Fix: point checkpoint at a seekrl-train run directory" in proc.stderr


def test_serve_rejects_bad_values_before_loading_anything():
    proc = run("serve", "port=70000", "host=0.0.0.0", "retriever=http")
    assert proc.returncode == 2
    assert "[port] got 70000" in proc.stderr
    assert (
        "[host] got '0.0.0.0'; expected a loopback address unless allow_remote=true" in proc.stderr
    )
    assert "[retriever.name] got 'http'" in proc.stderr


@pytest.mark.slow  # over 10 s on 2 cores (subprocess apps or several tiny runs)
def test_study_plans_and_rejects_bad_values_before_running_anything(tmp_path):
    proc = run("study", "study=alpha_cpu", f"out_dir={tmp_path}", "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    assert "alpha_cpu: 4 arm(s) x 1 seed(s)" in proc.stdout
    assert "alpha05          seed 0: to run" in proc.stdout
    assert "seekrl-study: of 4 run(s), 4 to run\n" in proc.stdout
    assert not any(tmp_path.iterdir())  # a dry run writes nothing
    proc = run("study", "seeds=[1,1]", "baseline=nope", "+arms.x=['seed=3']")
    assert proc.returncode == 2
    for key in ("[seeds] got [1, 1]", "[baseline] got 'nope'", "[arms] got 'seed=3'"):
        assert key in proc.stderr, proc.stderr
    proc = run("study", "eval.split=train")
    assert proc.returncode == 2 and "[eval.split] got 'train'" in proc.stderr


def test_components_listing_json():
    proc = run("components", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    adv = {c["name"]: c for c in data["components"]["advantage"]}
    assert {"grpo", "rloo", "reinforce_pp_baseline"} <= set(adv)
    assert adv["grpo"]["source"] == "seekrl"
    assert [f["name"] for f in adv["grpo"]["fields"]] == ["scale_by_std", "epsilon", "unbiased_std"]
    assert data["plugins"]["entry_point_group"] == "seekrl.plugins"


def test_components_rejects_unknown_kind():
    proc = run("components", "advantages")
    assert proc.returncode == 2 and "[components.kinds] got ['advantages']" in proc.stderr


def test_unknown_command():
    proc = run("trian")
    assert proc.returncode == 2 and "[seekrl] got command 'trian'" in proc.stderr
