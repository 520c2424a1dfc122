from framework.progress import progress_line


def test_progress_line_gives_position_rate_and_eta():
    # 13 steps left at 42 s each: 546 s = 9.1 min
    assert progress_line("rl", 3, 16, 42.0) == "[rl] step 3/16  42.0 s/step  ETA 9.1 min"
    line = progress_line("eval synth_test", 25, 100, 36.0, "question")
    assert line == "[eval synth_test] question 25/100  36.0 s/question  ETA 45.0 min"
    assert progress_line("sft", 10, 10, 5.0).endswith("ETA 0.0 min")  # done: nothing left
