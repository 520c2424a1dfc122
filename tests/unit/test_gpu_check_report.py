"""tools/gpu_check_report.py: hand-made check JSON in, the exact table rows and verdicts out; a
phase's status from its exit code and files; a bad JSON refused with every problem named."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import gpu_check_figures as figures  # noqa: E402
import gpu_check_report as report  # noqa: E402

MACHINE = {
    "gpu": "NVIDIA H200",
    "gpu_memory": "143771 MiB",
    "driver": "580.159.04",
    "cpu": "Intel(R) Xeon(R)",
    "cpus": 16,
    "python": "3.12.3",
    "torch": "2.11.0+cu130",
    "cuda": "13.0",
    "transformers": "5.17.0",
    "lightning": "2.6.6",
    "trl": "1.16.0",
    "commit": "abc1234",
}


def phase(name, figs, seconds=10.0, budget=60, status="passed", reason=None):
    return {
        "name": name,
        "status": status,
        "reason": reason,
        "seconds": seconds,
        "budget_s": budget,
        "figures": figs,
    }


def trl(ours, theirs, ours_gb, theirs_gb):
    return {
        "seekrl_samples_per_s": ours,
        "trl_samples_per_s": theirs,
        "ratio_samples": ours / theirs,
        "seekrl_peak_gpu_gb": ours_gb,
        "trl_peak_gpu_gb": theirs_gb,
    }


def check(**replace):
    """A whole gpu-mode check: every phase passed."""
    variants = {
        "generate": {"status": "measured", "tokens_per_s": 1000.0, "ratio_to_generate": 1.0},
        "loop": {"status": "measured", "tokens_per_s": 650.0, "ratio_to_generate": 0.65},
        "graphs": {"status": "measured", "tokens_per_s": 2100.0, "ratio_to_generate": 2.1},
    }
    train = {
        "steps": 3,
        "steps_per_s": 0.125,
        "samples_per_s": 4.0,
        "optimizer_steps_per_step": 2.0,
        "rollout_tokens_per_s": 512.0,
        "peak_gpu_gb": 10.5,
    }
    phases = {
        "gpu_tests": phase("gpu_tests", {"passed": 4, "failed": 0, "skipped": 3}, 61.0, 70),
        "train_135m": phase("train_135m", train, 40.0, 60),
        "train_1p5b": phase("train_1p5b", {**train, "peak_gpu_gb": 31.25}, 70.0, 80),
        "decode_graphs": phase(
            "decode_graphs",
            {"rollouts": 64, "new_tokens": 128, "variants": variants, "faster": "graphs"},
        ),
        # 3.02 / 2.69 = 1.12x and 13.65 > 12.56 GB: both missed; 5.0 / 2.0 = 2.5x and 30 <= 31.5: met
        "trl_135m": phase("trl_135m", trl(3.02, 2.69, 13.65, 12.56), 100.0, 100),
        "trl_1p5b": phase("trl_1p5b", trl(5.0, 2.0, 30.0, 31.5), 110.0, 110),
    }
    phases.update(replace)
    return {
        "schema": 1,
        "mode": "gpu",
        "started": "2026-12-03T10:00:00+0000",
        "budget_s": 540,
        "machine": MACHINE,
        "phases": list(phases.values()),
    }


def test_a_whole_check_renders_its_rows_and_targets():
    lines = report.render(check()).splitlines()
    assert lines[0] == (
        "Machine: NVIDIA H200 (143771 MiB, driver 580.159.04); 16 x Intel(R) Xeon(R); torch "
        "2.11.0+cu130 (CUDA 13.0), transformers 5.17.0, lightning 2.6.6, trl 1.16.0; commit "
        "abc1234. Started 2026-12-03T10:00:00+0000, gpu mode; the phases took 391 s of a 540 s "
        "budget."
    )
    assert lines[4:10] == [
        "| gpu_tests | passed | 61.0 (70) | 4 passed, 0 failed, 3 skipped |",
        "| train_135m | passed | 40.0 (60) | 3 steps, 0.125 steps/s, 4.00 samples/s, 2 optimiser "
        "steps a step, 512 rollout tokens/s, peak GPU 10.50 GB |",
        "| train_1p5b | passed | 70.0 (80) | 3 steps, 0.125 steps/s, 4.00 samples/s, 2 optimiser "
        "steps a step, 512 rollout tokens/s, peak GPU 31.25 GB |",
        "| decode_graphs | passed | 10.0 (60) | 64 rollouts x 128 tokens: generate 1000 tokens/s; "
        "loop 650 tokens/s (0.65x); graphs 2100 tokens/s (2.10x); faster: graphs |",
        "| trl_135m | passed | 100.0 (100) | seekrl 3.02 samples/s, TRL 2.69 (1.12x); peak GPU "
        "13.65 / 12.56 GB |",
        "| trl_1p5b | passed | 110.0 (110) | seekrl 5.00 samples/s, TRL 2.00 (2.50x); peak GPU "
        "30.00 / 31.50 GB |",
    ]
    assert lines[11:13] == ["| target (issue 77) | figure | verdict |", "|---|---|---|"]
    assert lines[13:19] == [
        "| 135M (smollm2-135m): samples/s at least 2x TRL's | 1.12x (3.02 / 2.69) | missed |",
        "| 135M (smollm2-135m): peak GPU memory at most TRL's | 13.65 / 12.56 GB (1.09x) | missed |",
        "| 1.5B (qwen2.5-1.5b): samples/s at least 2x TRL's | 2.50x (5.00 / 2.00) | met |",
        "| 1.5B (qwen2.5-1.5b): peak GPU memory at most TRL's | 30.00 / 31.50 GB (0.95x) | met |",
        "| decode at 64 rollouts, the decoding loop (default): at least 0.7 of a warmed-up "
        "generate | 0.65x | missed |",
        "| decode at 64 rollouts, CUDA graphs: at least 0.7 of a warmed-up generate | 2.10x | met |",
    ]
    assert lines[-1] == (
        "Faster at 64 rollouts: **graphs** (CUDA graphs): the rollout default should switch to them."
    )


def test_targets_exactly_at_their_bounds_are_met():
    # 2x TRL's samples/s, memory equal to TRL's, decode at 0.7 of generate: each target holds
    variants = {"loop": {"status": "measured", "tokens_per_s": 7.0, "ratio_to_generate": 0.7}}
    data = check(
        trl_135m=phase("trl_135m", trl(4.0, 2.0, 12.0, 12.0)),
        decode_graphs=phase(
            "decode_graphs", {"rollouts": 64, "new_tokens": 8, "variants": variants}
        ),
    )
    verdicts = [v for _, _, v in report.target_rows(data)]
    assert verdicts[:2] == ["met", "met"] and verdicts[4] == "met"
    assert report.target_rows(data)[5] == (
        "decode at 64 rollouts, CUDA graphs: at least 0.7 of a warmed-up generate",
        "graphs: not run",
        "not measured",
    )


def test_failed_and_timed_out_phases_render_as_such():
    data = check(
        trl_1p5b=phase(
            "trl_1p5b", {}, 115.0, 110, "timed_out", "stopped by its budget of 110 s (exit 124)"
        ),
        decode_graphs=phase(
            "decode_graphs", {}, 3.0, 90, "failed", "exit 1; log: decode_graphs.log"
        ),
    )
    text = report.render(data)
    assert (
        "| trl_1p5b | timed out | 115.0 (110) | stopped by its budget of 110 s (exit 124) |" in text
    )
    assert "| decode_graphs | failed | 3.0 (90) | exit 1; log: decode_graphs.log |" in text
    rows = report.target_rows(data)
    assert rows[2] == (
        "1.5B (qwen2.5-1.5b): samples/s at least 2x TRL's",
        "trl_1p5b timed_out: stopped by its budget of 110 s (exit 124)",
        "not measured",
    )
    assert rows[4][1:] == ("decode_graphs failed: exit 1; log: decode_graphs.log", "not measured")
    assert "Faster at" not in text  # no decoding figures, no advice


def test_a_timed_out_phase_keeps_what_it_measured():
    train = check()["phases"][1]["figures"]
    variants = {
        "generate": {"status": "measured", "tokens_per_s": 1000.0, "ratio_to_generate": 1.0},
        "loop": {"status": "measured", "tokens_per_s": 800.0, "ratio_to_generate": 0.8},
    }  # stopped while compiling the graphs
    stopped = "stopped by its budget of 80 s (exit 124)"
    data = check(
        train_1p5b=phase("train_1p5b", {**train, "steps": 2}, 85.0, 80, "timed_out", stopped),
        decode_graphs=phase(
            "decode_graphs",
            {"rollouts": 64, "new_tokens": 128, "variants": variants},
            95.0,
            90,
            "timed_out",
            "stopped by its budget of 90 s (exit 124)",
        ),
    )
    text = report.render(data)
    assert (
        "| train_1p5b | timed out | 85.0 (80) | stopped by its budget of 80 s (exit 124); so far: "
        "2 steps, 0.125 steps/s," in text
    )
    assert report.target_rows(data)[4:] == [
        (
            "decode at 64 rollouts, the decoding loop (default): at least 0.7 of a warmed-up "
            "generate",
            "0.80x",
            "met",
        ),
        (
            "decode at 64 rollouts, CUDA graphs: at least 0.7 of a warmed-up generate",
            "graphs: not run",
            "not measured",
        ),
    ]


def test_a_cpu_check_judges_no_gpu_target():
    data = check()
    data["mode"] = "cpu"
    assert {v for _, _, v in report.target_rows(data)} == {"not judged (cpu mode)"}


def test_a_bad_json_names_every_field_at_once(tmp_path):
    data = check()
    data["mode"] = "tpu"
    data["phases"][1]["status"] = "ok"
    data["phases"][2]["status"] = "failed"  # without a reason
    del data["phases"][4]["figures"]["ratio_samples"]
    path = tmp_path / "gpu_check.json"
    path.write_text(json.dumps(data))
    fix = "Fix: rerun tools/gpu_check.sh, or correct the field by hand."
    with pytest.raises(report.GpuCheckError) as err:
        report.read(path)
    assert str(err.value).splitlines() == [
        f"[gpu_check.mode] got 'tpu'; expected gpu or cpu. {fix}",
        "[gpu_check.phases[1].status] got 'ok'; expected one of passed, failed, timed_out, "
        f"skipped. {fix}",
        f"[gpu_check.phases[2].reason] got None; expected why it failed. {fix}",
        "[gpu_check.phases[4].figures.ratio_samples] got None; expected the trl_135m phase's "
        f"ratio_samples. {fix}",
    ]
    path.write_text("{not json")
    with pytest.raises(
        report.GpuCheckError,
        match=r"^\[gpu_check.file\] got '.*gpu_check.json'; "
        r"expected a readable JSON file \(JSONDecodeError: .*\)\. Fix: point --render",
    ):
        report.read(path)


def test_the_cli_refuses_a_bad_json_with_status_2(tmp_path, capsys):
    path = tmp_path / "gpu_check.json"
    path.write_text(json.dumps({**check(), "phases": "none"}))
    assert report.main(["--render", str(path)]) == 2
    assert capsys.readouterr().err.startswith("[gpu_check.phases] got 'none'; expected a list.")


@pytest.mark.parametrize(
    ("rc", "status", "reason"),
    [
        (0, "passed", None),
        (124, "timed_out", "stopped by its budget of 30 s (exit 124)"),
        (137, "timed_out", "stopped by its budget of 30 s (exit 137)"),
        (1, "failed", "exit 1; log: x.log"),
    ],
)
def test_a_phase_status_follows_its_exit_code(rc, status, reason):
    record = report.phase_record("x", rc=rc, seconds=1.23, budget=30, log="x.log")
    assert (record["status"], record["reason"], record["seconds"]) == (status, reason, 1.2)


def junit(tmp_path, tests, failures, skipped, message="needs a CUDA device"):
    cases = "".join(
        f'<testcase name="t{i}"><skipped message="{message}"/></testcase>' for i in range(skipped)
    )
    xml = (
        f'<testsuites><testsuite name="pytest" tests="{tests}" failures="{failures}" errors="0" '
        f'skipped="{skipped}">{cases}</testsuite></testsuites>'
    )
    path = tmp_path / "gpu_tests.xml"
    path.write_text(xml)
    return f"pytest:{path}"


def test_pytest_phases_count_from_junit_and_all_skipped_is_skipped(tmp_path):
    got = report.phase_record(
        "gpu_tests", rc=1, seconds=5, budget=70, figures=junit(tmp_path, 7, 1, 2)
    )
    assert got["status"] == "failed"
    assert got["figures"] == {
        "passed": 4,
        "failed": 1,
        "skipped": 2,
        "skip_reasons": ["needs a CUDA device"],
    }
    got = report.phase_record(
        "gpu_tests", rc=0, seconds=5, budget=70, figures=junit(tmp_path, 7, 0, 7)
    )
    assert (got["status"], got["reason"]) == ("skipped", "all 7 tests skipped: needs a CUDA device")


def test_a_passed_phase_whose_figures_are_unreadable_has_failed(tmp_path):
    got = report.phase_record(
        "decode_graphs", rc=0, seconds=1, budget=9, figures=f"decode:{tmp_path}/none.json"
    )
    assert got["status"] == "failed" and got["reason"].startswith(
        "ran, but its figures are unreadable"
    )
    late = report.phase_record(
        "decode_graphs", rc=124, seconds=9, budget=9, figures=f"decode:{tmp_path}/none.json"
    )
    assert late["status"] == "timed_out" and late["figures"] == {}


def test_train_figures_take_the_median_step_after_the_first(tmp_path):
    (tmp_path / "csv").mkdir()
    head = "timing/step,train/rollouts,train/optimizer_steps,timing/rollout_tokens_per_s,memory/peak_gpu_gb"
    rows = ["9.0,32,2,100.0,10.0", "", "4.0,32,2,300.0,12.5", "6.0,32,2,310.0,12.0"]
    (tmp_path / "csv" / "metrics.csv").write_text(
        "\n".join([head, *[r or ",,,," for r in rows]]) + "\n"
    )
    (tmp_path / "summary.json").write_text(
        json.dumps({"stages": [{"stage": "RL", "seconds": 30.0, "peak_gb": 7.5}]})
    )
    got = figures.train_figures(tmp_path)
    # steps 2 and 3: median of 4.0 and 6.0 = 5.0 s; 32 rollouts / 5 s = 6.4 samples/s; the
    # peak is the largest of the steps' peaks; the row without a step is not a step
    assert got == {
        "steps": 3,
        "step_s": 5.0,
        "steps_per_s": 0.2,
        "rollouts_per_step": 32.0,
        "samples_per_s": 6.4,
        "optimizer_steps_per_step": 2.0,
        "rollout_tokens_per_s": 310.0,
        "peak_gpu_gb": 12.5,
        "rl_stage_s": 30.0,
        "peak_rss_gb": 7.5,
    }


def test_trl_figures_read_train_step_json(tmp_path):
    side = {"samples_per_s": 3.0, "peak_gpu_gb": 12.0}
    raw = {
        "policies": {
            "shape:smollm2-135m": {
                "ours": side,
                "trl": {**side, "samples_per_s": 2.0},
                "ratio_samples": 1.5,
            }
        }
    }
    (tmp_path / "trl_135m.json").write_text(json.dumps(raw))
    got = figures.trl_figures(tmp_path / "trl_135m.json")
    assert (got["ratio_samples"], got["trl_samples_per_s"], got["trl_peak_gpu_gb"]) == (
        1.5,
        2.0,
        12.0,
    )
    assert got["report"] == str(tmp_path / "trl_135m.md")


def test_phases_append_to_valid_json_and_render_between_markers(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "machine_record", lambda: MACHINE)
    path = tmp_path / "out" / "gpu_check.json"
    report.init(path, "gpu", 540, "2 part(s) of .offline")
    report.append_phase(
        path, report.phase_record("trl_135m", rc=None, seconds=0, budget=None, skip="no TRL")
    )
    data = report.read(path)
    assert [(p["name"], p["status"], p["reason"]) for p in data["phases"]] == [
        ("trl_135m", "skipped", "no TRL")
    ]
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# B\n\n{report.BEGIN}\nnot yet run on a GPU\n{report.END}\n\n## Next\n")
    report.main(["--render", str(path), "--write", str(doc)])
    text = doc.read_text()
    assert "not yet run" not in text and text.endswith(f"{report.END}\n\n## Next\n")
    assert "| trl_135m | skipped | 0.0 | no TRL |" in text
    again = copy.copy(text)
    report.main(["--render", str(path), "--write", str(doc)])
    assert doc.read_text() == again  # rendering twice changes nothing
    doc.write_text("# no markers\n")
    with pytest.raises(report.GpuCheckError, match=r"^\[--write\] got .*benchmarks.md without"):
        report.write_between_markers(doc, "x")
