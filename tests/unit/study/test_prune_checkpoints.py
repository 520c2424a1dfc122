"""A study deletes a run's training checkpoints once the run is trained and evaluated (its
exported policy stays), and tools/prune_checkpoints.py does the same for an older study."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from framework.study.runs import prune_checkpoints

ROOT = Path(__file__).resolve().parents[3]


def make_run(root: Path, arm: str, seed: int, *, finished: bool, evaluated: bool) -> Path:
    run = root / "runs" / arm / f"seed{seed}"
    (run / "checkpoints").mkdir(parents=True)
    for step in (28, 32):
        (run / "checkpoints" / f"step-{step:06d}.ckpt").write_bytes(b"x" * 1000)
    (run / "policy").mkdir()
    (run / "policy" / "config.json").write_text("{}")
    if finished:
        (run / "summary.json").write_text(json.dumps({"seconds": 1.0}))
    if evaluated:
        out = root / "eval" / arm / f"seed{seed}"
        out.mkdir(parents=True)
        (out / "results.json").write_text("{}")
    return run


def test_only_a_finished_and_evaluated_run_loses_its_checkpoints(tmp_path):
    done = make_run(tmp_path, "grpo", 0, finished=True, evaluated=True)
    trained = make_run(tmp_path, "grpo", 1, finished=True, evaluated=False)
    running = make_run(tmp_path, "e_grpo", 0, finished=False, evaluated=False)
    assert prune_checkpoints(tmp_path, "grpo", 0) == 2000
    assert not list((done / "checkpoints").glob("*.ckpt"))
    assert (done / "policy" / "config.json").is_file()  # the final weights stay
    assert prune_checkpoints(tmp_path, "grpo", 1) == 0  # not evaluated yet
    assert prune_checkpoints(tmp_path, "e_grpo", 0) == 0  # still training
    assert len(list((trained / "checkpoints").glob("*.ckpt"))) == 2
    assert len(list((running / "checkpoints").glob("*.ckpt"))) == 2
    assert prune_checkpoints(tmp_path, "grpo", 0) == 0  # again: nothing left


def test_a_run_that_ended_early_keeps_its_checkpoints_though_it_exported_a_policy(tmp_path):
    # interrupted and health-stopped runs export policy/ too: their summaries say they did not
    # finish, and the study resumes them from these checkpoints
    from framework.study.runs import train_finished

    ended = {
        "interrupted": {"seconds": 1.0, "interrupted": True, "stopped_by": None},
        "stopped": {"seconds": 1.0, "interrupted": False, "stopped_by": {"monitor": "gradient"}},
        "finished": {"seconds": 1.0, "interrupted": False, "stopped_by": None},
    }
    for seed, (how, summary) in enumerate(ended.items()):
        run = make_run(tmp_path, how, seed, finished=True, evaluated=True)
        (run / "summary.json").write_text(json.dumps(summary))
        assert train_finished(run) == (how == "finished"), how
        assert prune_checkpoints(tmp_path, how, seed) == (2000 if how == "finished" else 0), how


def test_the_tool_prunes_a_whole_study_and_refuses_another_folder(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("prune", ROOT / "tools" / "prune_checkpoints.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    make_run(tmp_path, "grpo", 0, finished=True, evaluated=True)
    make_run(tmp_path, "placebo", 3, finished=True, evaluated=True)
    kept = make_run(tmp_path, "raft", 0, finished=True, evaluated=False)
    assert tool.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "grpo seed0" in out and "placebo seed3" in out and "raft" not in out
    assert len(list((kept / "checkpoints").glob("*.ckpt"))) == 2
    assert tool.main([str(tmp_path / "nothing")]) == 2
    assert "[study] got" in capsys.readouterr().err
