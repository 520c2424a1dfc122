"""The health monitors of a training run, as a Lightning callback.

After every training step :class:`HealthCallback` hands the step's figures (what the module logged:
``rollout/...``, ``loss/...``, ``retrieval/...``) to each monitor of ``framework.health``, logs
every reading under ``health/<monitor>/<value>`` (plus ``health/<monitor>/alarm``, 0 or 1), and acts
on alarms: a monitor configured with ``stop: true`` stops the run after the step, with a checkpoint
(the train app then exits with :data:`HEALTH_STOPPED` and the alarm's message); any other prints a
warning when it starts ringing. The monitors' state is the callback's checkpoint state.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import lightning as L

from framework.health.monitors import Alarm
from framework.lightning.callbacks import StepCheckpoint, end_fit_after_this_step, training_step

#: exit status of a run that a health monitor stopped (after its checkpoint)
HEALTH_STOPPED = 3


class HealthCallback(L.Callback):
    """Runs the monitors after every training step.

    Args:
        monitors: name -> monitor (built by :func:`framework.health.config.build_monitors`).
        checkpoint: the run's checkpoint callback; a stop saves through it.
        run: facts the alarms name (``retriever``: the retriever and where it reads from).
    """

    def __init__(
        self, monitors: Mapping[str, Any], checkpoint: StepCheckpoint, run: Mapping[str, str]
    ) -> None:
        self.monitors = dict(monitors)
        self.checkpoint = checkpoint
        self.run = dict(run)
        self.stopped: Alarm | None = None  # the alarm that stopped the run
        self.ringing: set[str] = set()  # monitors whose alarm was on at the last step
        self._unwatched_reported = False

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any
    ) -> None:
        figures = getattr(pl_module, "last_figures", None)
        if not figures or not self.monitors:
            return
        step = training_step(trainer, pl_module)
        values: dict[str, float] = {}
        stop: Alarm | None = None
        for name, monitor in self.monitors.items():
            reading = monitor.check(step, figures, self.run)
            values.update({f"health/{name}/{k}": float(v) for k, v in reading.values.items()})
            values[f"health/{name}/alarm"] = float(reading.alarm is not None)
            if reading.alarm is None:
                self.ringing.discard(name)
                continue
            if monitor.cfg.stop:
                stop = stop or reading.alarm
            elif name not in self.ringing and trainer.is_global_zero:
                print(f"seekrl-train: warning: {reading.alarm}", file=sys.stderr, flush=True)
            self.ringing.add(name)
        self._report_unwatched(trainer, figures)
        pl_module.log_dict(values, on_step=True, on_epoch=False, batch_size=1)
        # every process must agree to stop (each judged its own figures)
        if trainer.strategy.reduce_boolean_decision(stop is not None, all=False):
            self.stop(trainer, step, stop)

    def stop(self, trainer: L.Trainer, step: int, alarm: Alarm | None) -> None:
        """Save a checkpoint of this step and end training after it."""
        self.stopped = alarm or Alarm("other process", "a monitor on another process tripped", "")
        path = self.checkpoint.save(trainer, step, full=True)
        end_fit_after_this_step(trainer)
        if trainer.is_global_zero:
            print(
                f"seekrl-train: stopped by a health monitor after step {step}: {self.stopped}\n"
                f"  checkpoint: {path}",
                file=sys.stderr,
                flush=True,
            )

    def _report_unwatched(self, trainer: L.Trainer, figures: Mapping[str, float]) -> None:
        """Once: monitors whose ``metric`` this run never logs watch nothing (a typo, or a metric
        of another setup); say so rather than stay silent."""
        if self._unwatched_reported or not trainer.is_global_zero:
            return
        self._unwatched_reported = True
        for name, monitor in self.monitors.items():
            metric = getattr(monitor.cfg, "metric", None)
            if isinstance(metric, str) and metric not in figures:
                print(
                    f"seekrl-train: note: health monitor {name} watches {metric!r}, which this "
                    f"run's first step did not log (it logged {len(figures)} figures, e.g. "
                    f"{', '.join(sorted(figures)[:4])}); it stays silent until it is logged",
                    file=sys.stderr,
                    flush=True,
                )

    # -- checkpoint state: every monitor's window, so a resumed run judges as the uninterrupted one
    def state_dict(self) -> dict[str, Any]:
        return {name: m.state_dict() for name, m in self.monitors.items()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for name, state in state_dict.items():
            if name in self.monitors:
                self.monitors[name].load_state_dict(state)
