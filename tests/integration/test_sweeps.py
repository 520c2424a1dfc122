"""Sweeps beyond the basic launcher (docs/scaling.md), run as a user runs them (subprocesses) on the
tiny random model: Hydra's joblib and submitit-local launchers, an Optuna search, the sweep table
every job appends to, and ``seekrl-eval compare`` on a sweep directory.

Needs the sweep extra (``pip install -e '.[sweep]'``; ``tools/setup.sh --dev`` installs it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from framework.eval import sweep
from tests.integration.test_train import TINY as TRAIN_TINY

pytestmark = pytest.mark.slow  # parallel and launcher sweeps of tiny runs: 15-20 s per test

REPO = Path(__file__).resolve().parents[2]

pytest.importorskip("hydra_plugins.hydra_joblib_launcher", reason="needs the sweep extra")

# the train tests' tiny run (two questions x three rollouts of twelve tokens), one step, and the
# learning rate left to the config (the Optuna preset searches it)
TINY = [*(o for o in TRAIN_TINY if not o.startswith("optim.lr=")), "trainer.max_steps=1"]

#: what joblib's loky backend reads to cap the threads of its workers (a value here wins)
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)


@pytest.fixture(scope="module", autouse=True)
def built_cache():
    """The data and index every job reads, built once before jobs run at once: two jobs that find
    them missing would build them into the same cache directory together (docs/scaling.md tells
    users to do the same: one run first, then the parallel sweep)."""
    from framework.cli.app import load_config
    from framework.registry import DATASETS, RETRIEVERS

    cfg = load_config("train", TINY)
    DATASETS.bind(cfg.dataset)("train")
    RETRIEVERS.bind(cfg.retriever)().close()


def multirun(sweep_dir: Path, *args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    """``seekrl-train -m <TINY> <args>`` with its sweep in ``sweep_dir``, as a user runs it."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    command = [sys.executable, "-m", "framework", "train", "-m", *TINY, *args]
    proc = subprocess.run(
        [*command, f"hydra.sweep.dir={sweep_dir}"],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env | {"HYDRA_FULL_ERROR": "1"},
    )
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    return proc


def summaries(sweep_dir: Path) -> list[dict]:
    return [json.loads((j / "summary.json").read_text()) for j in sweep.job_dirs(sweep_dir)]


def test_joblib_runs_two_jobs_at_once_each_with_its_share_of_the_cores(tmp_path):
    import joblib

    out = tmp_path / "sweep"
    proc = multirun(out, "hydra/launcher=joblib_cpu", "seed=0,1")
    assert "Joblib.Parallel(n_jobs=2," in proc.stdout + proc.stderr
    assert [j.name for j in sweep.job_dirs(out)] == ["0", "1"]
    got = summaries(out)
    assert [s["seed"] for s in got] == [0, 1] and all(s["steps"] == 1 for s in got)
    # loky starts each worker with OMP_NUM_THREADS = cores // n_jobs, and torch takes it
    share = max(1, joblib.cpu_count() // 2)
    assert [s["threads"] for s in got] == [share, share]

    rows = sweep.read(out)  # both jobs appended to the sweep table
    assert [r["job"] for r in rows] == [0, 1]
    assert [r["overrides"][-1] for r in rows] == ["seed=0", "seed=1"]
    for row, summary in zip(rows, got):
        assert row["status"] == "finished" and row["threads"] == share
        assert row["value"] == summary["metrics"]["val/accuracy"]  # what the sweeper received
        assert Path(row["summary"]).is_file() and Path(row["run_dir"]) == (out / str(row["job"]))
    md = (out / "sweep.md").read_text()
    assert "| 0 | `seed=0` | finished | 1 |" in md and "| 1 | `seed=1` | finished | 1 |" in md
    assert len((out / "sweep.csv").read_text().splitlines()) == 3


def test_submitit_local_puts_each_job_in_its_numbered_directory_and_compare_reads_the_sweep(
    tmp_path,
):
    out = tmp_path / "sweep"
    multirun(out, "hydra/launcher=submitit_local", "trainer.threads=1", "seed=0,1")
    assert [j.name for j in sweep.job_dirs(out)] == ["0", "1"]
    got = summaries(out)
    assert [s["seed"] for s in got] == [0, 1]
    assert [s["threads"] for s in got] == [1, 1]  # trainer.threads, applied in each job
    for job in sweep.job_dirs(out):
        assert (job / "checkpoints" / "step-000001.ckpt").is_file()
        assert OmegaConf.load(job / ".hydra" / "overrides.yaml")[-2:] == [
            "trainer.threads=1",
            f"seed={job.name}",
        ]
    assert len(list((out / ".submitit").glob("*/*_log.out"))) == 2  # submitit ran two jobs
    assert [r["job"] for r in sweep.read(out)] == [0, 1]

    # seekrl-eval compare=<sweep dir> renders the training sweep's table
    from framework.cli.app import run_app
    from framework.eval.run import evaluate

    cmp = tmp_path / "cmp"
    result = run_app("eval", evaluate, argv=[f"compare={out}", f"hydra.run.dir={cmp}"])
    assert result["kind"] == "train_sweep" and [r["job"] for r in result["rows"]] == [0, 1]
    assert "| 1 | `seed=1` | finished | 1 |" in (cmp / "comparison.md").read_text()


def test_optuna_search_runs_three_trials_and_reports_the_best(tmp_path):
    out = tmp_path / "sweep"
    multirun(out, "experiment=optuna_search", "hydra.sweeper.n_trials=3")
    best = OmegaConf.to_container(OmegaConf.load(out / "optimization_results.yaml"))
    params = best["best_params"]
    assert set(params) == {"reward.alpha", "optim.lr", "loss.clip_low", "loss.clip_high"}
    assert 0.0 <= params["reward.alpha"] <= 0.5 and 1e-6 <= params["optim.lr"] <= 1e-4
    assert 0.1 <= params["loss.clip_low"] <= 0.3 and 0.2 <= params["loss.clip_high"] <= 0.4

    rows = sweep.read(out)  # every trial is a job of the sweep table
    assert [r["job"] for r in rows] == [0, 1, 2]
    assert best["best_value"] == max(r["value"] for r in rows)
    trial = [f"{k}={v}" for k, v in params.items()]
    assert any(set(trial) <= set(r["overrides"]) and r["value"] == best["best_value"] for r in rows)
    for row in rows:  # each trial trained with the values Optuna suggested
        cfg = OmegaConf.load(Path(row["run_dir"]) / "config.yaml")
        alpha = next(o for o in row["overrides"] if o.startswith("reward.alpha="))
        assert cfg.reward.alpha == float(alpha.split("=")[1]) and cfg.loss.name == "ppo_clip"


def test_slurm_preset_takes_cluster_settings_from_a_users_config_dir(tmp_path, monkeypatch):
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    mine = tmp_path / "conf" / "hydra" / "launcher"
    mine.mkdir(parents=True)
    (mine / "mycluster.yaml").write_text(
        "defaults:\n  - slurm\npartition: gpu-a100\naccount: my-lab\ntimeout_min: 720\n"
        "setup:\n  - export SEEKRL_CACHE=/shared/seekrl-cache\n"
    )
    show = ["hydra/launcher=mycluster", "--cfg", "hydra", "--package", "hydra.launcher"]
    proc = subprocess.run(
        [sys.executable, "-m", "framework", "train", "--config-dir", str(tmp_path / "conf"), *show],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    launcher = OmegaConf.to_container(OmegaConf.create(proc.stdout))
    assert launcher["_target_"].endswith("SlurmLauncher")
    assert (launcher["partition"], launcher["account"], launcher["timeout_min"]) == (
        "gpu-a100",
        "my-lab",
        720,
    )
    # the preset's node shape, kept under the user's settings
    assert (launcher["tasks_per_node"], launcher["gpus_per_node"], launcher["nodes"]) == (1, 1, 1)

    # the sbatch script submitit writes from them, as the launcher passes them (no SLURM here:
    # a stand-in srun on PATH)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    params = {k: v for k, v in launcher.items() if k not in ("_target_", "submitit_folder")}
    params |= {"name": "seekrl-train"}
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor = submitit.AutoExecutor(cluster="slurm", folder=tmp_path / "submitit")
    executor.update_parameters(
        **{k if k in base else f"slurm_{k}": v for k, v in params.items() if k != "max_num_timeout"}
    )
    script = executor._executor._make_submission_file_text("python -m framework train", "x")
    for line in (
        "#SBATCH --partition=gpu-a100",
        "#SBATCH --account=my-lab",
        "#SBATCH --time=720",
        "#SBATCH --gpus-per-node=1",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH --mem=64GB",
        "export SEEKRL_CACHE=/shared/seekrl-cache",
    ):
        assert line in script, script
