"""Signals' triage (reconstructed; framework/rollout/signals.py, framework/health/signals.py,
tools/triage.py) against ../shared/METHODS-2.md item 14."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from framework.health.signals import SignalsConfig, SignalsMonitor
from framework.rollout.signals import (
    misaligned,
    signal_figures,
    stagnates,
    trajectory_signals,
    triage_score,
)
from framework.types import ToolCall, Trajectory, TurnSpan

REPO = Path(__file__).resolve().parents[3]


def rollout(queries, evidence, *, status="ok", end_reason="answer", answer="x", invalid=0):
    turns = [
        TurnSpan(0, 1, (ToolCall("search", queries=(q,)),), 0, (1, 2), evidence=e)
        for q, e in zip(queries, evidence, strict=True)
    ]
    turns.append(TurnSpan(0, 1, (), invalid))
    t = Trajectory(0, 0, [1, 2], [0, 1], 1, answer=answer, turns=turns)
    t.status, t.end_reason = status, end_reason
    return t


def test_worked_example():
    # queries [q1, q2, q1], the third search returns only passages seen before, no budget hit:
    # loop 1, stagnation (k = 1) 1, the others 0 -> score 2, weight 3 against a clean rollout's 1
    t = rollout(["q1", "q2", "Q1!"], ["p1\np2", "p3", "p1"])
    sig = trajectory_signals(t, "which film?", k=1)
    assert sig == {
        "loop": True,
        "stagnation": True,
        "failure": False,
        "exhaustion": False,
        "misalignment": False,
    }
    assert triage_score(sig) == 2
    clean = rollout(["q1", "q2"], ["p1", "p2"])
    assert triage_score(trajectory_signals(clean, "which film?")) == 0


def test_each_signal():
    assert stagnates(rollout(["a", "b", "c"], ["p1", "p1", "p1"]), k=2)
    assert not stagnates(rollout(["a", "b", "c"], ["p1", "p1", "p2"]), k=2)
    assert trajectory_signals(rollout([], [], invalid=1), "q")["failure"]
    assert trajectory_signals(rollout([], [], status="format_error"), "q")["failure"]
    assert trajectory_signals(rollout([], [], end_reason="max_turns"), "q")["exhaustion"]
    assert trajectory_signals(rollout([], [], status="over_budget"), "q")["exhaustion"]
    assert misaligned("When was Jaws released?", "Steven Spielberg")
    assert not misaligned("When was Jaws released?", "June 1975")
    assert misaligned("Who directed Jaws?", "1975") and not misaligned("Who directed Jaws?", "Ann")
    assert not misaligned("Who directed Jaws?", None)


def test_figures_and_the_monitor():
    ts = [rollout(["q", "q"], ["a", "b"]), rollout(["q"], ["a"])]
    figures = signal_figures(ts, ["who?", "who?"])
    assert figures["signals/loop"] == 0.5 and figures["signals/any"] == 0.5
    assert figures["signals/score"] == 0.5
    monitor = SignalsMonitor(cfg=SignalsConfig(name="signals", window=2, max_share=0.6))
    assert monitor.check(1, {"rollout/signals/any": 0.9}, {}).alarm is None  # window not full
    reading = monitor.check(2, {"rollout/signals/any": 0.5, "rollout/signals/loop": 0.5}, {})
    assert reading.alarm is not None and "70% of the rollouts" in str(reading.alarm)
    assert "loop" in str(reading.alarm)
    assert monitor.check(3, {"rollout/reward": 1.0}, {}).values == {}


def test_the_triage_tool_prefers_rollouts_with_signals(tmp_path):
    rows = [
        {"question_id": f"c{i}", "question": "q", "signals": {"loop": False}} for i in range(50)
    ]
    rows += [
        {
            "question_id": f"s{i}",
            "question": "q",
            "signals": {"loop": True, "failure": True, "stagnation": True},
        }
        for i in range(50)
    ]
    (tmp_path / "step-000001.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "picked.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "triage.py"),
            str(tmp_path),
            "--n",
            "20",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "100 records, 50 with a signal; picked 20" in done.stdout
    picked = [json.loads(x) for x in out.read_text().splitlines()]
    # weights 4 against 1: about 80% of the first draws come from the signalled half
    assert sum(p["question_id"].startswith("s") for p in picked) >= 12
    bad = subprocess.run(
        [sys.executable, str(REPO / "tools" / "triage.py"), "/no/such"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "do not exist" in bad.stderr


@pytest.mark.parametrize("share", [1.5])
def test_bad_monitor_settings_are_refused(share):
    assert SignalsConfig(name="signals", max_share=share).problems()
