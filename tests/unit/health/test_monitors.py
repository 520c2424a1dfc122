"""Every health monitor driven by a scripted series of step figures: when it trips, what it logs,
what its alarm says, and that a monitor restored from its state judges as the uninterrupted one."""

from __future__ import annotations

import math

import pytest

from framework.health.config import DEFAULT_MONITORS, HealthConfig, build_monitors, monitor_config
from framework.registry import HEALTH_MONITORS, load_components

load_components(plugins=False)

RUN = {"retriever": "'empty_test'"}


def monitor(name: str, **fields):
    return HEALTH_MONITORS.bind(monitor_config(name, fields))()


def drive(mon, series: list[dict[str, float]], start: int = 1):
    """The readings of ``series`` (one figures dict per step, steps numbered from ``start``)."""
    return [mon.check(start + i, figures, RUN) for i, figures in enumerate(series)]


def first_alarm(readings) -> int | None:
    """1-based position of the first step that tripped, or None."""
    return next((i + 1 for i, r in enumerate(readings) if r.alarm is not None), None)


def test_reward_collapse_trips_when_the_moving_mean_falls_half_below_its_best():
    mon = monitor("reward_collapse", window=2, drop=0.5, min_best=0.1)
    rewards = [0.4, 0.4, 0.3, 0.2, 0.1]
    readings = drive(mon, [{"rollout/reward": r} for r in rewards])
    # means over 2 steps: -, 0.4, 0.35, 0.25, 0.15; best 0.4; drops 0, .125, .375, .625
    assert [r.values.get("drop") for r in readings][1:] == pytest.approx([0.0, 0.125, 0.375, 0.625])
    assert first_alarm(readings) == 5
    alarm = readings[4].alarm
    assert alarm.monitor == "reward_collapse"
    assert "0.400" in alarm.message and "0.150" in alarm.message and "step 5" in alarm.message
    assert str(alarm).startswith("[health.reward_collapse] ")


def test_reward_collapse_needs_a_best_worth_losing_and_respects_warmup():
    low = monitor("reward_collapse", window=1, drop=0.5, min_best=0.1)
    assert first_alarm(drive(low, [{"rollout/reward": r} for r in [0.05, 0.0, 0.0]])) is None
    warm = monitor("reward_collapse", window=1, drop=0.5, warmup_steps=3)
    readings = drive(warm, [{"rollout/reward": r} for r in [0.5, 0.1, 0.1, 0.1]])
    assert first_alarm(readings) == 4  # steps 2 and 3 are within the warm-up


def test_accuracy_collapse_is_the_same_monitor_on_another_metric():
    mon = monitor("reward_collapse", metric="rollout/accuracy", window=1, drop=0.9)
    readings = drive(mon, [{"rollout/accuracy": a, "rollout/reward": 1.0} for a in [0.5, 0.1, 0.0]])
    assert first_alarm(readings) == 3  # a drop of 80% is within the limit, 100% is not


def test_entropy_collapse_needs_patience_consecutive_steps_below_the_floor():
    mon = monitor("entropy_collapse", min_entropy=0.1, patience=2)
    series = [0.5, 0.05, 0.2, 0.05, 0.04]
    readings = drive(mon, [{"loss/entropy": e} for e in series])
    assert [r.values["steps_below"] for r in readings] == [0, 1, 0, 1, 2]
    assert first_alarm(readings) == 5


def test_length_blowup_compares_the_moving_mean_with_the_first_steps():
    mon = monitor("length_blowup", window=2, factor=3.0)
    lengths = [100, 100, 200, 300, 400]
    readings = drive(mon, [{"rollout/response_length": n} for n in lengths])
    # baseline 100; means 100, 100, 150, 250, 350
    assert [r.values["ratio"] for r in readings] == pytest.approx([1, 1, 1.5, 2.5, 3.5])
    assert first_alarm(readings) == 5
    assert "3.5x" in readings[4].alarm.message


def test_tool_calls_vanish_only_for_an_agent_that_used_its_tools():
    used = monitor("tool_calls_vanish", window=2, min_baseline=0.5)
    readings = drive(used, [{"rollout/tool_calls": c} for c in [1.0, 2.0, 0.5, 0.0, 0.0]])
    assert first_alarm(readings) == 5  # the moving mean reaches 0 only at step 5
    never = monitor("tool_calls_vanish", window=2, min_baseline=0.5)
    assert first_alarm(drive(never, [{"rollout/tool_calls": 0.0}] * 5)) is None


def test_answers_vanish_trips_when_the_answer_share_halves_and_only_after_answering():
    """Baseline over steps 1-2: (0.9 + 0.7) / 2 = 0.8; the limit is half of it, 0.4. Moving means
    of 2 steps: step 3 (0.7 + 0.5) / 2 = 0.6, step 4 (0.5 + 0.3) / 2 = 0.4 <= 0.4: trips at 4,
    with ratio 0.4 / 0.8 = 0.5."""
    mon = monitor("answers_vanish", window=2, share=0.5)
    readings = drive(mon, [{"rollout/format_valid": v} for v in [0.9, 0.7, 0.5, 0.3]])
    assert [r.values["mean"] for r in readings] == pytest.approx([0.9, 0.8, 0.6, 0.4])
    assert readings[3].values["baseline"] == pytest.approx(0.8)
    assert readings[3].values["ratio"] == pytest.approx(0.5)
    assert first_alarm(readings) == 4
    assert "stopped answering" in readings[3].alarm.message and "50%" in readings[3].alarm.message
    # an agent that hardly answered from the start (baseline 0.1 < min_baseline 0.25): no verdict
    never = monitor("answers_vanish", window=2)
    series = [{"rollout/format_valid": v} for v in [0.1, 0.1, 0.0, 0.0]]
    assert first_alarm(drive(never, series)) is None
    # a step without the figure is skipped, and the run's first window never trips
    skipped = monitor("answers_vanish", window=2)
    readings = drive(skipped, [{"rollout/format_valid": 1.0}, {}, {"rollout/format_valid": 0.0}])
    assert readings[1].values == {} and first_alarm(readings) is None


def test_retrieval_empty_trips_above_the_rate_and_names_the_retriever():
    mon = monitor("retrieval_empty", max_rate=0.5, window=2, min_queries=4)
    series = [
        {"retrieval/queries": 2, "retrieval/empty": 2, "retrieval/failed": 0},  # 2 queries: too few
        {"retrieval/queries": 4, "retrieval/empty": 1, "retrieval/failed": 0},  # 3 of 6 = 0.5
        {},  # no search this step: skipped
        {"retrieval/queries": 4, "retrieval/empty": 2, "retrieval/failed": 1},  # 4 of 8
        {"retrieval/queries": 2, "retrieval/empty": 1, "retrieval/failed": 1},  # 5 of 6
    ]
    readings = drive(mon, series)
    assert readings[2].values == {}
    assert [r.values.get("bad_rate") for r in readings] == pytest.approx(
        [1.0, 0.5, None, 0.5, 5 / 6]
    )
    assert first_alarm(readings) == 5
    alarm = readings[4].alarm
    assert "retriever 'empty_test'" in alarm.message and "'empty_test'" in alarm.fix
    assert "3 got no result and 2 failed" in alarm.message  # steps 4 and 5 pooled
    assert monitor_config("retrieval_empty", {}).stop  # stops by default


def test_gradient_trips_at_once_on_nan_even_in_warmup_and_on_a_sustained_explosion():
    nan = monitor("gradient", warmup_steps=10)
    readings = drive(nan, [{"loss/grad_norm": 1.0}, {"loss/grad_norm": math.nan}])
    assert first_alarm(readings) == 2 and readings[1].values["nonfinite"] == 1.0
    skipped = monitor("gradient")
    readings = drive(skipped, [{"loss/grad_norm": 1.0, "loss/nonfinite_grad": 1.0}])
    assert first_alarm(readings) == 1
    big = monitor("gradient", max_norm=10.0, patience=2)
    norms = [5.0, 20.0, 5.0, 20.0, 30.0]
    assert first_alarm(drive(big, [{"loss/grad_norm": n} for n in norms])) == 5


def test_zero_variance_trips_after_patience_steps_above_the_share():
    mon = monitor("zero_variance", max_fraction=0.9, patience=3)
    series = [1.0, 1.0, 0.5, 1.0, 0.95, 1.0]
    readings = drive(mon, [{"rollout/zero_variance_groups": f} for f in series])
    assert [r.values["steps_above"] for r in readings] == [1, 2, 0, 1, 2, 3]
    assert first_alarm(readings) == 6


@pytest.mark.parametrize(
    ("name", "fields", "series"),
    [
        ("reward_collapse", {"window": 2}, [{"rollout/reward": r} for r in [0.5, 0.6, 0.3, 0.1]]),
        ("length_blowup", {"window": 2}, [{"rollout/response_length": n} for n in [9, 9, 50, 60]]),
        ("tool_calls_vanish", {"window": 2}, [{"rollout/tool_calls": c} for c in [1, 1, 0, 0]]),
        (
            "answers_vanish",
            {"window": 2},
            [{"rollout/format_valid": v} for v in [1.0, 0.8, 0.2, 0.0]],
        ),
        (
            "retrieval_empty",
            {"window": 2, "max_rate": 0.6},
            [{"retrieval/queries": 2, "retrieval/empty": e} for e in [0, 1, 2, 2]],
        ),
        (
            "gradient",
            {"patience": 2, "max_norm": 1.0},
            [{"loss/grad_norm": n} for n in [2, 0, 2, 2]],
        ),
        ("entropy_collapse", {"patience": 2}, [{"loss/entropy": e} for e in [1, 1, 0, 0]]),
        ("zero_variance", {"patience": 2}, [{"rollout/zero_variance_groups": 1.0}] * 4),
    ],
)
def test_a_monitor_restored_from_its_state_judges_as_the_uninterrupted_one(name, fields, series):
    whole = [(r.values, r.alarm) for r in drive(monitor(name, **fields), series)]
    before = monitor(name, **fields)
    head = [(r.values, r.alarm) for r in drive(before, series[:2])]
    after = monitor(name, **fields)
    after.load_state_dict(before.state_dict())
    tail = [(r.values, r.alarm) for r in drive(after, series[2:], start=3)]
    assert head + tail == whole
    assert any(alarm is not None for _, alarm in whole)  # each series trips its monitor


def test_the_health_section_builds_every_default_monitor_and_reports_bad_entries():
    built = build_monitors(HealthConfig())
    # every built-in monitor but the opt-in triage one (framework/health/signals.py)
    assert sorted(built) == sorted(DEFAULT_MONITORS)
    assert sorted([*DEFAULT_MONITORS, "signals"]) == HEALTH_MONITORS.names()
    opt_in = HealthConfig()
    opt_in.monitors["signals"] = {"max_share": 0.5}
    assert build_monitors(opt_in)["signals"].cfg.max_share == 0.5
    assert build_monitors(HealthConfig(enabled=False)) == {}
    cfg = HealthConfig()
    cfg.monitors["zero_variance"] = None  # dropped
    cfg.monitors["gradient"] = {"patience": 0}
    cfg.monitors["nope"] = {}
    cfg.monitors["reward_collapse"] = {"bogus": 1}
    problems = {p.path: str(p) for p in cfg.problems()}
    assert set(problems) == {
        "monitors.gradient.patience",
        "monitors.nope",
        "monitors.reward_collapse",
    }
    assert (
        "a registered health monitor: answers_vanish, entropy_collapse" in problems["monitors.nope"]
    )
    assert "bogus" in problems["monitors.reward_collapse"]
    assert "zero_variance" not in build_monitors(
        HealthConfig(monitors={"zero_variance": None, "gradient": {}})
    )
