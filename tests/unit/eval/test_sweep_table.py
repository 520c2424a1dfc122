"""The sweep table (framework/eval/sweep.py) and ``compare`` on sweep directories, from hand-written
rows and results: appends under a lock from many processes, renders, and what compare accepts."""

from __future__ import annotations

import csv
import io
import json
import multiprocessing
from pathlib import Path

import pytest

from framework.eval import sweep
from framework.eval.compare import CompareError, compare, compare_inputs


def _row(job: int, seed: int, acc: float, **extra) -> dict:
    return {
        "app": "train",
        "job": job,
        "overrides": ["dataset=synth_small", f"seed={seed}"],
        "status": "finished",
        "steps": 2,
        "seconds": 1.5,
        "threads": 1,
        "optimized_metric": "val/accuracy",
        "value": acc,
        "metrics": {"val/accuracy": acc, "rollout/reward": 0.5, **extra},
        "run_dir": f"/sweep/{job}",
        "summary": f"/sweep/{job}/summary.json",
    }


def test_append_renders_markdown_and_csv_with_one_row_per_job(tmp_path):
    sweep.append(tmp_path, _row(1, 1, 0.25))
    rows = sweep.append(tmp_path, _row(0, 0, 0.5, **{"val/extra": 3.0}))
    assert [r["job"] for r in rows] == [0, 1]  # by job number, not by arrival
    md = (tmp_path / "sweep.md").read_text()
    assert "2 job(s) finished" in md
    assert "Overrides of every job: `dataset=synth_small`" in md
    assert "| 0 | `seed=0` | finished | 2 | 0.5000 |" in md  # optimized metric first
    assert "| 1 | `seed=1` | finished | 2 | 0.2500 |" in md
    table = list(csv.DictReader(io.StringIO((tmp_path / "sweep.csv").read_text())))
    assert [r["job"] for r in table] == ["0", "1"]
    assert table[0]["val/extra"] == "3.0" and table[1]["val/extra"] == ""  # every metric, blanks
    assert table[1]["overrides"] == "dataset=synth_small seed=1" and table[1]["threads"] == "1"


def test_a_rerun_job_keeps_its_last_row_and_a_torn_line_is_skipped(tmp_path):
    sweep.append(tmp_path, _row(0, 0, 0.1))
    with (tmp_path / sweep.TABLE).open("a") as fh:
        fh.write('{"job": 7, "overr')  # a writer killed mid-line (no newline)
        fh.write("\n")
    sweep.append(tmp_path, _row(0, 0, 0.9))
    rows = sweep.read(tmp_path)
    assert len(rows) == 1 and rows[0]["value"] == 0.9
    assert sweep.read(tmp_path / "nowhere") == []


def _append_many(args: tuple[str, int]) -> None:
    directory, worker = args
    for i in range(5):
        sweep.append(Path(directory), _row(worker * 5 + i, worker, 0.1 * i))


def test_parallel_appends_from_many_processes_lose_no_row(tmp_path):
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(6) as pool:
        pool.map(_append_many, [(str(tmp_path), w) for w in range(6)])
    lines = (tmp_path / sweep.TABLE).read_text().splitlines()
    assert len(lines) == 30 and all(json.loads(x)["app"] == "train" for x in lines)
    assert [r["job"] for r in sweep.read(tmp_path)] == list(range(30))
    # the last render saw every row
    assert "30 job(s) finished" in (tmp_path / "sweep.md").read_text()
    assert len((tmp_path / "sweep.csv").read_text().splitlines()) == 31


def test_varying_overrides_and_job_directories(tmp_path):
    common, own = sweep.varying([["a=1", "seed=0"], ["a=1", "seed=1"]])
    assert common == ["a=1"] and own == [["seed=0"], ["seed=1"]]
    assert sweep.varying([["a=1", "seed=0"]]) == ([], [["a=1", "seed=0"]])
    for name in ("10", "9", "0", ".submitit", "notes"):
        (tmp_path / name).mkdir()
    assert [p.name for p in sweep.job_dirs(tmp_path)] == ["0", "9", "10"]


def test_sweep_job_is_none_outside_a_hydra_multirun():
    from framework.eval.sweep import sweep_job

    assert sweep_job() is None


# -- compare on sweep directories -----------------------------------------------------------------


def _results(pass1: float) -> dict:
    overall = {
        "k": 2,
        "questions": 4,
        "rollouts": 8,
        "pass@1": pass1,
        "pass@1_ci": [max(0.0, pass1 - 0.1), min(1.0, pass1 + 0.1)],
        "pass@2": pass1,
        "pass^2": pass1,
        "em": pass1,
        "f1": pass1,
        "tool_calls": 1.0,
        "queries": 1.0,
        "turns": 2.0,
        "format_error_rate": 0.0,
        "over_budget_rate": 0.0,
        "entity": None,
    }
    return {"policy": "x", "k": 2, "datasets": {"synth/test": {"overall": overall, "by_hops": {}}}}


def _eval_sweep(root: Path, values: list[float]) -> Path:
    """A seekrl-eval -m sweep directory: numbered jobs with results.json and their overrides."""
    for i, v in enumerate(values):
        job = root / str(i)
        (job / ".hydra").mkdir(parents=True)
        (job / "results.json").write_text(json.dumps(_results(v)))
        (job / ".hydra" / "overrides.yaml").write_text(f"- questions=4\n- seed={i}\n")
    (root / ".submitit").mkdir()
    return root


def test_compare_finds_the_evaluations_of_a_sweep_directory(tmp_path):
    runs = _eval_sweep(tmp_path / "evals", [0.2, 0.4])
    kind, found = compare_inputs([runs], None)
    assert kind == "eval" and [label for label, _ in found] == ["seed=0", "seed=1"]
    out = compare([runs], ["base"], tmp_path / "cmp")  # one label: the sweep's jobs pool
    assert out["pooled"]["base / synth/test"]["runs"] == 2
    assert out["pooled"]["base / synth/test"]["pass@1"] == pytest.approx(0.3)


def test_compare_renders_a_training_sweeps_table(tmp_path):
    train = tmp_path / "train_sweep"
    sweep.append(train, _row(0, 0, 0.5))
    sweep.append(train, _row(1, 1, 0.25))
    (train / "0").mkdir()  # job directories without results.json: the table is what is compared
    out = compare([train], None, tmp_path / "cmp")
    assert out["kind"] == "train_sweep" and [r["job"] for r in out["rows"]] == [0, 1]
    md = (tmp_path / "cmp" / "comparison.md").read_text()
    assert "## train_sweep" in md and "| 1 | `seed=1` | finished | 2 | 0.2500 |" in md
    table = list(csv.DictReader((tmp_path / "cmp" / "comparison.csv").open()))
    assert [(r["sweep"], r["job"]) for r in table] == [("train_sweep", "0"), ("train_sweep", "1")]


def test_compare_says_what_it_expected_for_other_directories(tmp_path):
    empty = tmp_path / "empty"
    (empty / "0").mkdir(parents=True)
    with pytest.raises(FileNotFoundError) as err:
        compare_inputs([empty], None)
    msg = str(err.value)
    assert msg.startswith(f"[compare] got '{empty}' (a directory with neither); expected ")
    assert "sweep.jsonl" in msg and "results.json" in msg and "Fix: " in msg
    with pytest.raises(FileNotFoundError, match=r"\(a missing path\)"):
        compare_inputs([tmp_path / "missing"], None)

    train = tmp_path / "train"
    sweep.append(train, _row(0, 0, 0.5))
    with pytest.raises(CompareError, match=r"^\[compare\] got training sweeps .* Fix: "):
        compare_inputs([_eval_sweep(tmp_path / "evals", [0.1]), train], None)


def test_eval_config_takes_one_compare_directory_or_a_list(tmp_path):
    from framework.cli.app import load_config

    one = load_config("eval", [f"compare={tmp_path}"])
    assert one.compare == [str(tmp_path)]
    two = load_config("eval", [f"compare=[{tmp_path}/a,{tmp_path}/b]", "labels=[x,y]"])
    assert two.compare == [f"{tmp_path}/a", f"{tmp_path}/b"]
