"""The eval app end to end on the tiny model: report, tables, plots, comparison, bad inputs."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from framework.data.schema import QAItem, write_split

TINY = [
    "dataset=synth_small",
    "retriever=bm25",
    "rollout.policy.source=tiny",
    "questions=4",
    "samples_per_question=2",
    "agent.max_turns=2",
    "agent.max_new_tokens_per_turn=16",
]


def eval_in_process(run_dir: Path, *overrides: str):
    from framework.cli.app import run_app
    from framework.eval.run import evaluate

    return run_app("eval", evaluate, argv=[*TINY, *overrides, f"hydra.run.dir={run_dir}"])


@pytest.mark.slow  # over 10 s on 2 cores (subprocess apps or several tiny runs)
def test_eval_writes_report_tables_plots_and_compares(tmp_path):
    first = eval_in_process(tmp_path / "a")
    assert set(first["datasets"]) == {"synth/validation"}
    synth = first["datasets"]["synth/validation"]["overall"]
    assert synth["questions"] == 4 and synth["rollouts"] == 8 and synth["k"] == 2
    assert 0.0 <= synth["pass@1"] <= synth["pass@2"] <= 1.0
    assert synth["entity"] is not None
    assert first["answer_rule"]["name"] == "last_answer_span_of_response"
    run = tmp_path / "a"
    report = (run / "report.md").read_text()
    assert "Pass@1 [95% CI]" in report and "Answers: the stripped body" in report
    assert (run / "pass1_by_hops_synth_validation.png").stat().st_size > 1000
    assert (run / "entity_match_hist_synth_validation.png").stat().st_size > 1000
    rows = list(csv.DictReader((run / "summary.csv").open()))
    assert [r["dataset"] for r in rows] == ["synth/validation"]
    assert len((run / "samples.jsonl").read_text().splitlines()) == 8
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    from framework.eval.records import read_records

    assert len(read_records(run / "records.jsonl.gz")) == 8  # every sample, archived

    eval_in_process(tmp_path / "b", "seed=1")
    out = eval_in_process(
        tmp_path / "cmp", f"compare=[{tmp_path}/a,{tmp_path}/b]", "labels=[base,base]"
    )
    assert out["pooled"]["base / synth/validation"]["runs"] == 2
    assert (tmp_path / "cmp" / "comparison.png").is_file()
    assert "Pooled over runs" in (tmp_path / "cmp" / "comparison.md").read_text()


@pytest.mark.slow
def test_eval_of_files_reports_only_them_and_each_data_source(tmp_path):
    """files= evaluates those files only; a Search-R1-layout parquet with several data_source
    values (each source keeping its own ids, as the merged test file does) gets one row per
    source and the macro average, in results.json, by_source.csv and report.md."""
    from framework.data.schema import write_parquet

    plain = [
        QAItem(f"nq-{i}", f"who wrote book {i}?", (f"author {i}",), None, None, None, "nq")
        for i in range(3)
    ]
    write_split(plain, tmp_path / "nq", "test")
    merged = [
        QAItem(f"test_{i}", f"{src} question {i}?", (f"answer {i}",), None, None, None, src)
        for src in ("triviaqa", "popqa", "bamboogle")
        for i in range(2)
    ]
    write_parquet(merged, tmp_path / "merged" / "test.parquet", "test")
    got = eval_in_process(
        tmp_path / "run",
        f"files=[{tmp_path}/nq/test.jsonl,{tmp_path}/merged/test.parquet]",
    )  # questions=4 per source: all of them
    assert set(got["datasets"]) == {"nq/test", "merged/test"}  # not the configured synth split
    pairs = [(r["dataset"], r["data_source"]) for r in got["by_source"]["rows"]]
    assert pairs == [
        ("nq/test", "nq"),
        ("merged/test", "triviaqa"),
        ("merged/test", "popqa"),
        ("merged/test", "bamboogle"),
    ]
    macro = got["by_source"]["macro"]
    assert macro["sources"] == 4 and macro["questions"] == 3 + 6
    means = [r["summary"]["pass@1"] for r in got["by_source"]["rows"]]
    assert macro["pass@1"] == pytest.approx(sum(means) / 4)
    run = tmp_path / "run"
    rows = list(csv.DictReader((run / "by_source.csv").open()))
    assert [r["data_source"] for r in rows] == [
        "nq",
        "triviaqa",
        "popqa",
        "bamboogle",
        "macro average",
    ]
    report = (run / "report.md").read_text()
    assert "## By data source" in report and "**macro average**" in report
    assert "no ground-truth entities" in report
    assert len((run / "samples.jsonl").read_text().splitlines()) == (3 + 6) * 2


@pytest.mark.slow
def test_eval_of_a_trained_checkpoint_and_a_mismatched_one(tmp_path):
    from framework.cli.app import run_app
    from framework.cli.train import train

    run = tmp_path / "train"
    train_args = [
        "warm_start.sft=false",
        "dataset=synth_small",
        "retriever=bm25",
        "rollout.policy.source=tiny",
        "trainer.max_steps=1",
        "trainer.val_at_end=false",
        "sampler.questions_per_step=1",
        "sampler.group_size=2",
        "agent.max_turns=1",
        "agent.max_new_tokens_per_turn=8",
        "final_eval.enabled=false",
        f"hydra.run.dir={run}",
    ]
    run_app("train", train, argv=train_args)
    got = eval_in_process(tmp_path / "e1", f"checkpoint={run}")
    assert got["policy"] == str(run / "policy")
    ckpt = run / "checkpoints" / "step-000001.ckpt"
    got = eval_in_process(tmp_path / "e2", f"checkpoint={ckpt}")
    assert got["policy"] == str(ckpt)
    with pytest.raises(SystemExit) as exc:
        eval_in_process(tmp_path / "e3", f"checkpoint={ckpt}", "rollout.policy.tiny_hidden=32")
    assert exc.value.code == 2


class Killed(Exception):
    pass


@pytest.mark.slow  # three tiny evaluations through the app: over 10 s on 2 shared cores
def test_a_resumed_evaluation_writes_the_files_of_an_uninterrupted_one(tmp_path, monkeypatch):
    """seekrl-eval killed in its third wave of one question and run again in the same directory
    takes the two finished waves from its journal and writes the files of an uninterrupted run,
    byte for byte; results.json says what came from the journal."""
    import framework.eval.harness as harness

    wide = ("rollout.policy.tiny_hidden=256", "batch_questions=1")
    whole = eval_in_process(tmp_path / "whole", *wide)
    assert whole["schedule"]["waves"]["synth/validation"]["from_journal"] == 0
    assert whole["schedule"]["batch_questions"] == whole["schedule"]["wave_questions"] == 1
    judged = harness.question_rows

    def killed_at_the_third(*args, **kwargs):
        if killed_at_the_third.calls == 2:
            raise Killed
        killed_at_the_third.calls += 1
        return judged(*args, **kwargs)

    killed_at_the_third.calls = 0
    monkeypatch.setattr(harness, "question_rows", killed_at_the_third)
    with pytest.raises(SystemExit):  # Hydra reports the exception and exits 1
        eval_in_process(tmp_path / "resumed", *wide)
    assert killed_at_the_third.calls == 2
    monkeypatch.setattr(harness, "question_rows", judged)
    assert (tmp_path / "resumed" / "journal-synth_validation.jsonl").is_file()
    resumed = eval_in_process(tmp_path / "resumed", *wide)
    assert resumed["schedule"]["waves"]["synth/validation"] == {
        "waves": 4,
        "from_journal": 2,
        "questions_from_journal": 2,
    }
    for name in ("samples.jsonl", "records.jsonl.gz"):
        assert (tmp_path / "resumed" / name).read_bytes() == (
            tmp_path / "whole" / name
        ).read_bytes()
    assert not (tmp_path / "resumed" / "journal-synth_validation.jsonl").exists()


def test_eval_refuses_an_empty_dataset(tmp_path, capsys):
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(SystemExit) as exc:
        eval_in_process(tmp_path / "run", f"files=[{tmp_path}/empty.jsonl]")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "empty" in err.lower() or "no questions" in err, err
