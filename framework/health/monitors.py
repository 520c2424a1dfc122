"""Training-health monitors: each watches the figures a training step logged and says when the run
has gone wrong (reward collapse, entropy collapse, length blow-up, the agent giving up on its tools
or on answering, a retriever that returns nothing, non-finite or exploding gradients, groups with no
signal).

A monitor is registered in ``HEALTH_MONITORS`` and built as ``cls(*, cfg)``. After every training
step the trainer calls ``check(step, figures, run)`` with that step's flat figures
(``rollout/reward``, ``loss/entropy``, ``retrieval/empty``, ...) and a few facts about the run
(``run["retriever"]`` names the retriever); the :class:`Reading` it returns carries the values logged
under ``health/<monitor>/...`` and, when the monitor trips, an :class:`Alarm`. A tripped monitor
whose config says ``stop: true`` stops the run after a checkpoint; otherwise the alarm is printed.

Monitors keep only what their rule needs (a window of recent values, a baseline, a best value);
``state_dict`` / ``load_state_dict`` put it in the checkpoint, so a resumed run judges its steps
as the uninterrupted one would. A step whose figures lack the watched metric (nothing was trained,
no search was made) is skipped: it neither adds to the window nor trips the monitor.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from statistics import mean
from typing import Any, Generic, TypeVar

from framework.config import ComponentConfig, Problem, check_range, option
from framework.registry.kinds import HEALTH_MONITORS


@dataclass(frozen=True)
class Alarm:
    """What a tripped monitor reports: ``message`` says what happened, with the figures, and
    ``fix`` what to do about it."""

    monitor: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"[health.{self.monitor}] {self.message}. Fix: {self.fix.rstrip('.')}."


@dataclass
class Reading:
    """One step's verdict of a monitor: ``values`` are logged as ``health/<monitor>/<key>``;
    ``alarm`` is set when the monitor trips at this step."""

    values: dict[str, float] = field(default_factory=dict)
    alarm: Alarm | None = None


@dataclass
class MonitorConfig(ComponentConfig):
    """The config base of every health monitor (``HEALTH_MONITORS``).

    ``stop``: a tripped monitor stops the run (after a checkpoint) instead of printing a warning.
    ``warmup_steps``: steps before the monitor may trip (it still records and logs them).
    """

    stop: bool = option(False, "stop the run when tripped (else warn)")
    warmup_steps: int = option(0, "steps before the monitor may trip")

    def problems(self) -> list[Problem]:
        return check_range(self.warmup_steps, "warmup_steps", low=0)


@dataclass
class MetricConfig(MonitorConfig):
    """The config base of a monitor of one logged figure, ``metric``."""

    metric: str = option("", "the figure watched")


HEALTH_MONITORS.declare_config_base(MonitorConfig)


C = TypeVar("C", bound="MonitorConfig")


class Monitor(ABC, Generic[C]):
    """A monitor's bookkeeping: the config, the registry name and the window of recent values."""

    def __init__(self, *, cfg: C) -> None:
        self.cfg: C = cfg
        self.name = cfg.name
        self.values: list[float] = []  # the watched metric, one entry per step that had it

    @abstractmethod
    def check(self, step: int, figures: Mapping[str, float], run: Mapping[str, str]) -> Reading:
        """Record this step's figures and say whether the run is unhealthy."""

    def may_trip(self, step: int) -> bool:
        return step > self.cfg.warmup_steps

    def alarm(self, message: str, fix: str) -> Alarm:
        return Alarm(self.name, message, fix)

    def reading(
        self, step: int, values: dict[str, float], tripped: bool, message: str, fix: str
    ) -> Reading:
        """The step's ``values``, with an alarm (``message``, ``fix``) when ``tripped`` after
        warm-up (:meth:`may_trip`)."""
        out = Reading(values)
        if self.may_trip(step) and tripped:
            out.alarm = self.alarm(message, fix)
        return out

    def record(self, value: float, keep: int) -> None:
        """Add ``value`` and keep the last ``keep`` values."""
        self.values.append(float(value))
        del self.values[:-keep]

    def streak(self, value: float, keep: int, ok: Callable[[float], bool]) -> int:
        """Record ``value`` (keeping the last ``keep``); the recorded steps since the last ``ok``
        one (``keep`` at most: all of them when none is)."""
        self.record(value, keep)
        n = 0
        for v in reversed(self.values):
            if ok(v):
                break
            n += 1
        return n

    def state_dict(self) -> dict[str, Any]:
        return {"values": list(self.values)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.values = [float(v) for v in state.get("values", [])]


M = TypeVar("M", bound="MetricConfig")


class MetricMonitor(Monitor[M]):
    """A monitor of one figure, ``cfg.metric``: a step that did not log it is skipped."""

    def check(self, step: int, figures: Mapping[str, float], run: Mapping[str, str]) -> Reading:
        if self.cfg.metric not in figures:
            return Reading()
        return self.judge(step, float(figures[self.cfg.metric]))

    @abstractmethod
    def judge(self, step: int, value: float) -> Reading:
        """Record this step's ``value`` of the metric and say whether the run is unhealthy."""


def _window_problems(cfg: Any) -> list[Problem]:
    return check_range(cfg.window, "window", low=1)


@dataclass
class BaselineConfig(MetricConfig):
    """The config base of a monitor that compares the moving mean of its metric with the mean of
    the run's first steps (:class:`BaselineMonitor`); both span ``window`` steps."""

    window: int = option(3, "steps of the baseline and the moving mean")


W = TypeVar("W", bound=BaselineConfig)


class BaselineMonitor(MetricMonitor[W]):
    """A monitor comparing the moving mean of its metric over ``cfg.window`` steps with a
    baseline: the mean of the run's first ``cfg.window`` steps."""

    def __init__(self, *, cfg: W) -> None:
        super().__init__(cfg=cfg)
        self.first: list[float] = []

    def observe(self, value: float) -> tuple[float, float, float]:
        """Record ``value``; ``(moving mean, baseline mean, their ratio)`` (the ratio is 1 while
        the baseline is 0)."""
        if len(self.first) < self.cfg.window:
            self.first.append(float(value))
        self.record(value, self.cfg.window)
        now, base = mean(self.values), mean(self.first)
        return now, base, now / base if base > 0 else 1.0

    @property
    def settled(self) -> bool:
        """The baseline and the moving window are both full."""
        return len(self.first) == self.cfg.window == len(self.values)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "first": list(self.first)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.first = [float(v) for v in state.get("first", [])]


# -- reward or accuracy collapse ---------------------------------------------------------------------
@dataclass
class CollapseConfig(MetricConfig):
    metric: str = option("rollout/reward", "the figure that collapses")
    window: int = option(4, "steps per moving mean")
    drop: float = option(0.5, "trip when the mean falls this share below its best")
    min_best: float = option(0.05, "no verdict until the best mean reaches this")

    def problems(self) -> list[Problem]:
        out = _window_problems(self)
        out += check_range(self.drop, "drop", low=0.0, high=1.0, low_inclusive=False)
        return out + super().problems()


@HEALTH_MONITORS.register("reward_collapse", config=CollapseConfig)
class CollapseMonitor(MetricMonitor[CollapseConfig]):
    """Trips when the moving mean of ``metric`` over ``window`` steps falls ``drop`` (a share)
    below the best moving mean seen so far (which must reach ``min_best``).

    Logged: ``mean`` (the current moving mean), ``best`` and ``drop`` (``1 - mean / best``).
    """

    def __init__(self, *, cfg: CollapseConfig) -> None:
        super().__init__(cfg=cfg)
        self.best = -math.inf

    def judge(self, step: int, value: float) -> Reading:
        cfg = self.cfg
        self.record(value, cfg.window)
        if len(self.values) < cfg.window:
            return Reading({"mean": mean(self.values)})
        now = mean(self.values)
        self.best = max(self.best, now)
        drop = 1.0 - now / self.best if self.best > 0 else 0.0
        return self.reading(
            step,
            {"mean": now, "best": self.best, "drop": drop},
            self.best >= cfg.min_best and drop >= cfg.drop,
            f"{cfg.metric} collapsed: its {cfg.window}-step mean fell from a best of "
            f"{self.best:.3f} to {now:.3f} ({drop:.0%} down; the limit is {cfg.drop:.0%}) "
            f"at step {step}",
            "lower optim.lr, add a KL term (kl.coef), or resume from a checkpoint before the "
            "fall; raise health.monitors.<name>.drop if such swings are expected",
        )

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "best": self.best}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.best = float(state.get("best", -math.inf))


# -- entropy collapse ---------------------------------------------------------------------------------
@dataclass
class EntropyConfig(MetricConfig):
    metric: str = option("loss/entropy", "token-mean policy entropy")
    min_entropy: float = option(0.01, "nats per token")
    patience: int = option(3, "consecutive steps below the floor")

    def problems(self) -> list[Problem]:
        out = check_range(self.min_entropy, "min_entropy", low=0.0)
        out += check_range(self.patience, "patience", low=1)
        return out + super().problems()


@HEALTH_MONITORS.register("entropy_collapse", config=EntropyConfig)
class EntropyMonitor(MetricMonitor[EntropyConfig]):
    """Trips when the policy's entropy stays below ``min_entropy`` for ``patience`` steps in a
    row: the policy has become (nearly) deterministic and its groups stop exploring.

    Logged: ``entropy`` and ``steps_below``.
    """

    def judge(self, step: int, value: float) -> Reading:
        cfg = self.cfg
        below = self.streak(value, cfg.patience, ok=lambda v: v >= cfg.min_entropy)
        return self.reading(
            step,
            {"entropy": self.values[-1], "steps_below": float(below)},
            below >= cfg.patience,
            f"entropy collapsed: {cfg.metric} stayed below {cfg.min_entropy} for {below} "
            f"steps (now {self.values[-1]:.4f}) at step {step}",
            "raise the sampling temperature (rollout.sampling.temperature), lower optim.lr, "
            "or add an entropy-preserving loss (loss=etr, clip-higher via loss.clip_high)",
        )


# -- response-length blow-up ---------------------------------------------------------------------------
@dataclass
class LengthConfig(BaselineConfig):
    metric: str = option("rollout/response_length", "tokens per rollout")
    factor: float = option(3.0, "trip at this multiple of the baseline")

    def problems(self) -> list[Problem]:
        out = _window_problems(self)
        out += check_range(self.factor, "factor", low=1.0, low_inclusive=False)
        return out + super().problems()


@HEALTH_MONITORS.register("length_blowup", config=LengthConfig)
class LengthMonitor(BaselineMonitor[LengthConfig]):
    """Trips when the moving mean of the response length over ``window`` steps exceeds
    ``factor`` times its baseline, the mean of the run's first ``window`` steps.

    Logged: ``mean``, ``baseline`` and ``ratio`` (mean over baseline).
    """

    def judge(self, step: int, value: float) -> Reading:
        cfg = self.cfg
        now, base, ratio = self.observe(value)
        grown = len(self.first) == cfg.window and base > 0 and ratio > cfg.factor
        return self.reading(
            step,
            {"mean": now, "baseline": base, "ratio": ratio},
            grown,
            f"responses blew up: {cfg.metric} averages {now:.0f} over the last "
            f"{len(self.values)} steps, {ratio:.1f}x the first {cfg.window} steps' {base:.0f} "
            f"(the limit is {cfg.factor}x) at step {step}",
            "tighten agent.max_new_tokens_per_turn or agent.max_total_tokens, add the overlong "
            "penalty (reward=overlong in a weighted_sum), or lower optim.lr",
        )


# -- the agent stops using its tools ----------------------------------------------------------------
@dataclass
class ToolCallsConfig(BaselineConfig):
    metric: str = option("rollout/tool_calls", "tool calls per rollout")
    min_baseline: float = option(0.25, "no verdict unless the first steps called tools this much")
    floor: float = option(0.0, "trip at or below this moving mean")

    def problems(self) -> list[Problem]:
        out = _window_problems(self)
        out += check_range(self.floor, "floor", low=0.0)
        return out + super().problems()


@HEALTH_MONITORS.register("tool_calls_vanish", config=ToolCallsConfig)
class ToolCallsMonitor(BaselineMonitor[ToolCallsConfig]):
    """Trips when an agent that used its tools (mean tool calls per rollout over the first
    ``window`` steps at least ``min_baseline``) stops using them: the moving mean over the last
    ``window`` steps falls to ``floor`` (0: no call at all).

    Logged: ``mean`` and ``baseline``.
    """

    def judge(self, step: int, value: float) -> Reading:
        cfg = self.cfg
        now, base, _ = self.observe(value)
        return self.reading(
            step,
            {"mean": now, "baseline": base},
            self.settled and base >= cfg.min_baseline and now <= cfg.floor,
            f"the agent stopped using its tools: {cfg.metric} averages {now:.2f} over the last "
            f"{cfg.window} steps, after {base:.2f} over the first {cfg.window} at step {step}",
            "check that searches return useful passages (retrieval/empty), lower optim.lr, or "
            "reward tool use (E-GRPO's entity reward, reward.alpha)",
        )


# -- the agent stops answering ------------------------------------------------------------------------
@dataclass
class AnswersConfig(BaselineConfig):
    metric: str = option(
        "rollout/format_valid", "share of rollouts that ended in a valid answer within budget"
    )
    min_baseline: float = option(0.25, "no verdict unless the first steps answered this much")
    share: float = option(0.5, "trip when the moving mean falls to this share of the baseline")

    def problems(self) -> list[Problem]:
        out = _window_problems(self)
        out += check_range(self.share, "share", low=0.0, high=1.0, low_inclusive=False)
        out += check_range(self.min_baseline, "min_baseline", low=0.0, high=1.0)
        return out + super().problems()


@HEALTH_MONITORS.register("answers_vanish", config=AnswersConfig)
class AnswersMonitor(BaselineMonitor[AnswersConfig]):
    """Trips when an agent that answered (a share of rollouts ending in a valid answer within
    budget of at least ``min_baseline`` over the first ``window`` steps) stops answering: the
    moving mean over the last ``window`` steps falls to ``share`` of that baseline.

    Its rollouts then break the format or run out of turns, tool calls or tokens, and reward
    collapse may not show it where the questions of a batch set the reward's level (the screen's
    arms share their question order). Logged: ``mean``, ``baseline`` and ``ratio``.
    """

    def judge(self, step: int, value: float) -> Reading:
        cfg = self.cfg
        now, base, ratio = self.observe(value)
        fell = self.settled and base >= cfg.min_baseline and now <= cfg.share * base
        return self.reading(
            step,
            {"mean": now, "baseline": base, "ratio": ratio},
            fell,
            f"the agent stopped answering: {cfg.metric} averages {now:.2f} over the last "
            f"{cfg.window} steps, {ratio:.0%} of the first {cfg.window} steps' {base:.2f} (the "
            f"limit is {cfg.share:.0%}) at step {step}",
            "read the rollouts' statuses (format_error or over_budget: raise agent.max_turns "
            "or agent.max_total_tokens), lower optim.lr, or resume from a checkpoint before "
            "the fall; a loss that only pushes wrong answers down (loss=nsr) can teach the "
            "policy not to answer: give right answers a weight (loss.positive_weight, "
            "W-REINFORCE)",
        )


# -- the retriever returns nothing ------------------------------------------------------------------
@dataclass
class RetrievalConfig(MonitorConfig):
    stop: bool = option(True, "stop the run when tripped (else warn)")
    max_rate: float = option(0.5, "trip when this share of queries got no result or failed")
    window: int = option(1, "steps whose queries are pooled")
    min_queries: int = option(1, "no verdict on fewer pooled queries")

    def problems(self) -> list[Problem]:
        out = _window_problems(self)
        out += check_range(self.max_rate, "max_rate", low=0.0, high=1.0, high_inclusive=False)
        out += check_range(self.min_queries, "min_queries", low=1)
        return out + super().problems()


@HEALTH_MONITORS.register("retrieval_empty", config=RetrievalConfig)
class RetrievalMonitor(Monitor[RetrievalConfig]):
    """Trips when, over the search queries of the last ``window`` steps (at least
    ``min_queries``), more than ``max_rate`` of them returned no passage or failed: the agent is
    searching an empty or broken index and nothing it learns is about the corpus. Reads the step's
    ``retrieval/queries``, ``retrieval/empty`` and ``retrieval/failed`` counts; the alarm names
    the retriever (``run["retriever"]``).

    Logged: ``bad_rate`` (empty or failed share of the pooled queries) and ``queries``.
    """

    def __init__(self, *, cfg: RetrievalConfig) -> None:
        super().__init__(cfg=cfg)
        self.steps: list[tuple[float, float, float]] = []  # (queries, empty, failed) per step

    def check(self, step: int, figures: Mapping[str, float], run: Mapping[str, str]) -> Reading:
        cfg = self.cfg
        queries = float(figures.get("retrieval/queries", 0.0))
        if queries <= 0:
            return Reading()
        empty = float(figures.get("retrieval/empty", 0.0))
        failed = float(figures.get("retrieval/failed", 0.0))
        self.steps.append((queries, empty, failed))
        del self.steps[: -cfg.window]
        total = sum(s[0] for s in self.steps)
        n_empty = sum(s[1] for s in self.steps)
        n_failed = sum(s[2] for s in self.steps)
        rate = (n_empty + n_failed) / total
        retriever = run.get("retriever", "the retriever")
        return self.reading(
            step,
            {"bad_rate": rate, "queries": total},
            total >= cfg.min_queries and rate > cfg.max_rate,
            f"retriever {retriever} returned nothing useful: of {total:.0f} search queries in "
            f"the last {len(self.steps)} step(s), {n_empty:.0f} got no result and "
            f"{n_failed:.0f} failed ({rate:.0%}; the limit is {cfg.max_rate:.0%}) at step "
            f"{step}",
            f"check retriever {retriever}: that its index holds the corpus (seekrl-index, "
            "retriever.index_dir), that its server answers (retriever.url), and try a query "
            "with seekrl-serve or seekrl-rollout",
        )

    def state_dict(self) -> dict[str, Any]:
        return {"steps": [list(s) for s in self.steps]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.steps = [(float(q), float(e), float(f)) for q, e, f in state.get("steps", [])]


# -- non-finite or exploding gradients --------------------------------------------------------------
@dataclass
class GradientConfig(MonitorConfig):
    stop: bool = option(True, "stop the run when tripped (else warn)")
    max_norm: float = option(1.0e3, "trip when the gradient norm (before clipping) exceeds it")
    patience: int = option(2, "consecutive steps above max_norm")

    def problems(self) -> list[Problem]:
        out = check_range(self.max_norm, "max_norm", low=0.0, low_inclusive=False)
        out += check_range(self.patience, "patience", low=1)
        return out + super().problems()


@HEALTH_MONITORS.register("gradient", config=GradientConfig)
class GradientMonitor(Monitor[GradientConfig]):
    """Trips at once on a non-finite loss or gradient norm (the trainer skips that update, so the
    checkpoint holds the last finite weights), and when the gradient norm before clipping exceeds
    ``max_norm`` for ``patience`` steps in a row. Non-finite trips even during warm-up.

    Logged: ``grad_norm`` (the pre-clip norm; NaN shows as NaN) and ``nonfinite`` (0 or 1).
    """

    def check(self, step: int, figures: Mapping[str, float], run: Mapping[str, str]) -> Reading:
        cfg = self.cfg
        if "loss/grad_norm" not in figures:
            return Reading()
        norm = float(figures["loss/grad_norm"])
        loss = float(figures.get("loss/policy_loss", 0.0))
        bad = not (math.isfinite(norm) and math.isfinite(loss))
        bad = bad or figures.get("loss/nonfinite_grad", 0.0) > 0
        kept = norm if math.isfinite(norm) else math.inf
        high = self.streak(kept, cfg.patience, ok=lambda v: v <= cfg.max_norm) >= cfg.patience
        reading = Reading({"grad_norm": norm, "nonfinite": float(bad)})
        if bad:
            reading.alarm = self.alarm(
                f"the loss or gradient is not finite at step {step} (loss {loss}, gradient norm "
                f"{norm}); that update was skipped",
                "lower optim.lr, check the reward for NaN, or use precision=32-true if bf16 "
                "overflowed; resume from the checkpoint written now",
            )
        elif self.may_trip(step) and high:
            reading.alarm = self.alarm(
                f"gradients exploded: the norm before clipping exceeded {cfg.max_norm:g} for "
                f"{cfg.patience} steps (now {norm:.3g}) at step {step}",
                "lower optim.lr or optim.grad_clip, or check advantages for outliers "
                "(loss/advantage_abs_mean)",
            )
        return reading


# -- groups without signal -------------------------------------------------------------------------
@dataclass
class ZeroVarianceConfig(MetricConfig):
    metric: str = option(
        "rollout/zero_variance_groups", "share of groups whose rewards are all equal"
    )
    max_fraction: float = option(0.95, "trip above this share")
    patience: int = option(5, "consecutive steps above it")

    def problems(self) -> list[Problem]:
        out = check_range(
            self.max_fraction, "max_fraction", low=0.0, high=1.0, high_inclusive=False
        )
        out += check_range(self.patience, "patience", low=1)
        return out + super().problems()


@HEALTH_MONITORS.register("zero_variance", config=ZeroVarianceConfig)
class ZeroVarianceMonitor(MetricMonitor[ZeroVarianceConfig]):
    """Trips when more than ``max_fraction`` of each step's groups had identical rewards (no
    learning signal under group normalisation) for ``patience`` steps in a row.

    Logged: ``fraction`` and ``steps_above``.
    """

    def judge(self, step: int, value: float) -> Reading:
        cfg = self.cfg
        above = self.streak(value, cfg.patience, ok=lambda v: v <= cfg.max_fraction)
        return self.reading(
            step,
            {"fraction": self.values[-1], "steps_above": float(above)},
            above >= cfg.patience,
            f"{self.values[-1]:.0%} of the groups had equal rewards for {above} steps in a row "
            f"(the limit is {cfg.max_fraction:.0%}) at step {step}: almost nothing is learned",
            "use dynamic sampling (sampler=dapo_dynamic), easier questions "
            "(sampler.max_hops=1 or sampler=hop_curriculum), more rollouts per group "
            "(sampler.group_size), or a denser reward (reward=e_grpo)",
        )
