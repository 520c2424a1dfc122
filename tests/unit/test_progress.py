"""Plain progress lines and the Progress helper (injected clock, captured output)."""

from __future__ import annotations

import io

import pytest

from framework.progress import Progress, progress_line


def test_progress_line_gives_position_rate_and_eta():
    # 13 steps left at 42 s each: 546 s = 9.1 min
    assert progress_line("rl", 3, 16, 42.0) == "[rl] step 3/16  42.0 s/step  ETA 9.1 min"
    line = progress_line("eval synth_test", 25, 100, 36.0, "question")
    assert line == "[eval synth_test] question 25/100  36.0 s/question  ETA 45.0 min"
    assert progress_line("sft", 10, 10, 5.0).endswith("ETA 0.0 min")  # done: nothing left


def test_progress_line_reads_fast_rates_per_second_and_goes_without_a_total():
    # 0.01 s per passage = 100 passages/s; 9000 left = 90 s = 1.5 min
    line = progress_line("embed", 1000, 10000, 0.01, "passage")
    assert line == "[embed] passage 1000/10000  100.0 passage/s  ETA 1.5 min"
    assert progress_line("corpus", 5000, None, 0.0005, "doc") == "[corpus] doc 5000  2000.0 doc/s"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def plain(total: int | None, clock: Clock, **kw) -> tuple[Progress, io.StringIO]:
    out = io.StringIO()
    bar = Progress("embed", total, "passage", plain=True, stream=out, clock=clock, **kw)
    return bar, out


def lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def test_plain_lines_at_most_every_interval_plus_the_last():
    clock = Clock()
    bar, out = plain(100, clock, every_s=20.0)
    for _ in range(10):  # 10 passages per 5 s: a line every 4th update (20 s)
        clock.now += 5.0
        bar.update(10)
    assert lines(out) == [
        # 40 passages in 20 s: 0.5 s each, 60 left = 30 s = 0.5 min
        "[embed] passage 40/100  2.0 passage/s  ETA 0.5 min",
        "[embed] passage 80/100  2.0 passage/s  ETA 0.2 min",
        "[embed] passage 100/100  2.0 passage/s  ETA 0.0 min",  # the last, though only 10 s on
    ]
    bar.close()
    assert len(lines(out)) == 3  # close does not repeat the last line


def test_close_prints_the_last_position_of_a_loop_without_a_total():
    clock = Clock()
    bar, out = plain(None, clock)
    with bar:
        clock.now += 3.0
        bar.update(6000)
    assert lines(out) == ["[embed] passage 6000  2000.0 passage/s"]  # 6000 in 3 s, no ETA


def test_short_loops_and_interrupted_loops_print_nothing_at_the_end():
    clock = Clock()
    bar, out = plain(10, clock, min_s=1.0)
    clock.now += 0.5
    bar.update(10)  # finished in 0.5 s: not worth a line
    bar.close()
    assert lines(out) == []

    bar, out = plain(10, clock)
    with pytest.raises(KeyboardInterrupt), bar:
        clock.now += 5.0
        bar.update(3)
        raise KeyboardInterrupt
    assert lines(out) == []  # no final line for a loop cut short


def test_resumed_loop_rates_only_its_own_work():
    clock = Clock()
    bar, out = plain(100, clock, initial=60, every_s=10.0)
    clock.now += 10.0
    bar.update(20)  # 20 passages in 10 s (the 60 done earlier are not counted): 0.5 s each
    assert lines(out) == ["[embed] passage 80/100  2.0 passage/s  ETA 0.2 min"]


def test_skipped_work_moves_the_position_but_not_the_rate():
    clock = Clock()
    bar, out = plain(100, clock, every_s=0.0)
    bar.skip_to(25)  # taken from a journal in no time: no line, no rate
    assert lines(out) == []
    clock.now += 30.0
    bar(30, 100)  # 5 passages in 30 s: 6 s each, 70 left = 7 min
    assert lines(out) == ["[embed] passage 30/100  6.0 s/passage  ETA 7.0 min"]


def test_callback_form_sets_position_and_total():
    clock = Clock()
    bar, out = plain(None, clock, every_s=0.0)
    clock.now += 40.0
    bar(2, 8)  # (done, total) as expert_trajectories and the eval harness report it
    clock.now += 40.0
    bar(4, 8)
    clock.now += 40.0
    bar(4, 8)  # no progress since the last line: nothing new to say
    assert lines(out) == [
        "[embed] passage 2/8  20.0 s/passage  ETA 2.0 min",
        "[embed] passage 4/8  20.0 s/passage  ETA 1.3 min",
    ]
    bar(8, 8)
    bar(8, 8)  # the agent loop reports its last turn, then the end: one line for both
    assert lines(out)[2:] == ["[embed] passage 8/8  15.0 s/passage  ETA 0.0 min"]


def test_disabled_shows_nothing_and_a_terminal_gets_a_bar(capsys, monkeypatch):
    bar = Progress("embed", 5, enabled=False, plain=True)
    bar.update(5)
    bar.close()
    assert capsys.readouterr() == ("", "")
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    with Progress("embed", 5, "passage", every_s=0.0, min_s=0.0) as bar:
        bar.update(5)
    out, err = capsys.readouterr()
    assert out == "" and "5/5" in err  # the tqdm bar, on stderr; no plain line


def test_job_stages_print_start_and_end_with_peak_memory_and_a_scaled_time_left():
    import io

    from framework.progress import JobStages

    clock = [0.0]
    peaks = iter([2_500_000_000, 7_100_000_000])
    resets: list[bool] = []
    out = io.StringIO()
    job = JobStages(
        "app",
        [("index", 100.0), ("sft", 300.0), ("rl", 0.0)],
        stream=out,
        clock=lambda: clock[0],
        memory=(lambda: resets.append(True), lambda: next(peaks)),
    )
    assert job.left() == 400.0
    with job.stage("index"):
        clock[0] += 200.0  # twice the plan: the rest is expected to take twice as long too
    assert job.left() == 600.0
    job.begin("sft")
    clock[0] += 300.0
    job.end()
    job.end()  # nothing runs: no second line
    lines = out.getvalue().splitlines()
    assert lines == [
        "app: [1/3] index started (job elapsed 0 s, planned 1.7 min; about 6.7 min left)",
        "app: [1/3] index ended in 3.3 min, peak memory 2.5 GB (job elapsed 3.3 min; about 10.0 min "
        "left)",
        "app: [2/3] sft started (job elapsed 3.3 min, planned 5.0 min; about 10.0 min left)",
        "app: [2/3] sft ended in 5.0 min, peak memory 7.1 GB (job elapsed 8.3 min; about 0 s left)",
    ]
    assert len(resets) == 2  # each stage's peak starts at its own beginning
    assert [(d["stage"], d["seconds"], d["peak_gb"]) for d in job.summary()] == [
        ("index", 200.0, 2.5),
        ("sft", 300.0, 7.1),
    ]


def test_job_stages_without_a_plan_for_a_stage_say_the_time_left_is_not_estimated():
    import io

    from framework.progress import JobStages

    clock = [0.0]
    out = io.StringIO()
    job = JobStages(
        "app",
        [("index", 100.0), ("RL", None)],  # a GPU run's RL without GPU figures
        stream=out,
        clock=lambda: clock[0],
        memory=(lambda: None, lambda: 1_000_000_000),
    )
    assert job.left() is None
    with job.stage("index"):
        clock[0] += 100.0
    job.begin("RL")
    clock[0] += 50.0
    job.end()
    assert job.left() == 0.0  # every stage done
    assert out.getvalue().splitlines() == [
        "app: [1/2] index started (job elapsed 0 s, planned 1.7 min; time left not estimated)",
        "app: [1/2] index ended in 1.7 min, peak memory 1.0 GB (job elapsed 1.7 min; time left "
        "not estimated)",
        "app: [2/2] RL started (job elapsed 1.7 min; time left not estimated)",
        "app: [2/2] RL ended in 50 s, peak memory 1.0 GB (job elapsed 2.5 min; about 0 s left)",
    ]


def test_a_stage_that_raises_says_so():
    import io

    import pytest

    from framework.progress import JobStages

    out = io.StringIO()
    job = JobStages("app", [], stream=out, clock=lambda: 0.0, memory=(lambda: None, lambda: 0))
    with pytest.raises(KeyError), job.stage("load"):
        raise KeyError("x")
    assert out.getvalue().splitlines()[-1].startswith("app: load stopped (KeyError) in 0 s")


def test_peak_memory_resets_on_linux():
    import sys

    from framework.memory import peak_rss_bytes, reset_peak, rss_bytes

    before = peak_rss_bytes()
    assert before >= rss_bytes() > 0 or sys.platform != "linux"
    if reset_peak():
        assert peak_rss_bytes() <= before


def test_peak_sampler_sees_a_short_lived_allocation_without_resetting_the_high_water_mark():
    import sys
    import time

    import pytest

    from framework.memory import PeakSampler, peak_rss_bytes, rss_bytes

    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc/self/status")
    base = rss_bytes()
    sampler = PeakSampler(every_s=0.01)
    block = bytearray(400_000_000)  # touched: resident
    time.sleep(0.1)
    del block
    peak = sampler.stop()
    assert peak >= base + 350_000_000
    # the process high-water mark still holds it (the kernel updates it lazily: a few MB behind)
    assert peak_rss_bytes() >= peak - 16_000_000
