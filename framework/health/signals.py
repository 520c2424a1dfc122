"""The ``signals`` health monitor: Signals' trajectory triage (framework/rollout/signals.py) as a
warning that most of a run's rollouts have gone wrong in a way a reviewer should look at.

Not among the default monitors (``health.monitors``): add it with
``'+health.monitors.signals={}'``. The rollout metrics log every signal's rate anyway.

Sources found 2026-11-26 (this stays reconstructed): arXiv 2604.00356 (Katanemo), a model-free
triage of deployed agents' logs, not an RL method; its code (github.com/katanemo/plano,
``crates/brightstaff/src/signals/``, a port of github.com/katanemo/signals) differs from ours: its
loop signal needs 3 identical calls in a row (ours: 2 identical queries anywhere), its
misalignment reads the user's corrections (ours: the answer's type against the question), its
exhaustion is API and environment errors (ours: the budget), it has disengagement and satisfaction
signals, and its score starts at 50 and adds or subtracts per signal (0-100; ours counts signals).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from statistics import mean
from typing import ClassVar

from framework.config import Problem, check_range, option
from framework.health.monitors import Monitor, MonitorConfig, Reading
from framework.registry.kinds import HEALTH_MONITORS


@dataclass
class SignalsConfig(MonitorConfig):
    paper: ClassVar[str] = (
        "Signals: Trajectory Sampling and Triage for Agentic Interactions, arXiv 2604.00356"
    )
    fidelity: ClassVar[str] = "reconstructed"

    metric: str = option("rollout/signals/any", "the share of rollouts firing at least one signal")
    window: int = option(4, "steps per moving mean")
    max_share: float = option(0.8, "trip when the moving mean exceeds this share (choice)")

    def problems(self) -> list[Problem]:
        out = check_range(self.window, "window", low=1)
        out += check_range(self.max_share, "max_share", low=0.0, high=1.0)
        return out + super().problems()


@HEALTH_MONITORS.register("signals", config=SignalsConfig)
class SignalsMonitor(Monitor[SignalsConfig]):
    """Trips when, over the last ``window`` steps, more than ``max_share`` of the rollouts on
    average fired a triage signal (a search loop, stagnant retrieval, an invalid call or format
    error, an exhausted budget, a mistyped answer): look at ``rollout/signals/<name>`` for which,
    and draw examples with ``tools/triage.py``.

    Logged: ``mean`` (the moving mean of ``metric``).
    """

    def check(self, step: int, figures: Mapping[str, float], run: Mapping[str, str]) -> Reading:
        cfg = self.cfg
        if cfg.metric not in figures:
            return Reading()
        self.record(figures[cfg.metric], cfg.window)
        now = mean(self.values)
        reading = Reading({"mean": now})
        if self.may_trip(step) and len(self.values) == cfg.window and now > cfg.max_share:
            signals = sorted(
                k.rsplit("/", 1)[1]
                for k, v in figures.items()
                if k.startswith("rollout/signals/")
                and k.rsplit("/", 1)[1] not in ("any", "score")
                and v > 0
            )
            reading.alarm = self.alarm(
                f"{now:.0%} of the rollouts fired a triage signal over the last {cfg.window} steps "
                f"(this step: {', '.join(signals) or 'none'})",
                "read a sample of them (python3 tools/triage.py <run>/trajectories) before "
                "trusting the run",
            )
        return reading
