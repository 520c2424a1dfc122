"""Progress that shows in a log too: a tqdm bar on a terminal, plain lines everywhere else.

A bar written to a log file, a pipe or a child process's captured output appears only when the
process ends (it redraws one line with carriage returns), so a long stage run that way looks hung.
:class:`Progress` prints ``[embed] passage 3072/10000  98.1 passage/s  ETA 1.2 min`` there instead.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TextIO

from framework.memory import PeakSampler, release_freed


def progress_line(
    label: str, position: int, total: int | None, seconds_per: float, unit: str = "step"
) -> str:
    """``[rl] step 3/16  42.0 s/step  ETA 9.1 min``: position, rate and the time left at that rate.

    A rate faster than one unit a second reads as units per second (``98.1 passage/s``); without a
    ``total`` the line has no ETA (``[corpus] doc 5000  2100.0 doc/s``).
    """
    if 0 < seconds_per < 1:
        rate = f"{1 / seconds_per:.1f} {unit}/s"
    else:
        rate = f"{seconds_per:.1f} s/{unit}"
    if total is None:
        return f"[{label}] {unit} {position}  {rate}"
    eta = seconds_per * max(total - position, 0)
    return f"[{label}] {unit} {position}/{total}  {rate}  ETA {eta / 60:.1f} min"


class Progress:
    """Position, rate and ETA of a long loop, on a terminal and in a log.

    On a terminal (stdout a TTY) it is a tqdm bar. Elsewhere it prints a :func:`progress_line` at
    most every ``every_s`` seconds, and one for the last position (when ``total`` is reached or at
    :meth:`close`), unless the whole loop took less than ``min_s``. The rate counts the units done
    by this process only, so a resumed run's ETA is not flattered by the work it skipped.

    Use it as a context manager and call :meth:`update` after each piece of work, or call the
    object with ``(done, total)`` wherever a progress callback is expected.

    Args:
        label: the line's prefix, e.g. ``embed``.
        total: units in the whole loop; None when unknown (the line then has no ETA).
        unit: what one unit is, e.g. ``passage``.
        initial: units done before this process started (a resumed run).
        every_s: least seconds between two plain lines.
        min_s: a loop that ends sooner than this prints no plain line at all.
        enabled: False shows nothing.
        plain: plain lines (True) or a bar (False); None: plain unless stdout is a terminal.
        stream: where plain lines go (stdout when None).
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(
        self,
        label: str,
        total: int | None = None,
        unit: str = "item",
        *,
        initial: int = 0,
        every_s: float = 20.0,
        min_s: float = 1.0,
        enabled: bool = True,
        plain: bool | None = None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.position = self._initial = initial
        self.every_s, self.min_s = every_s, min_s
        self._stream, self._clock = stream, clock
        self._start = self._last = clock()
        self._printed: int | None = None  # the position the last plain line showed
        self._bar = None
        self._plain = False
        if enabled:
            self._plain = not sys.stdout.isatty() if plain is None else plain
            if not self._plain:
                from tqdm import tqdm

                self._bar = tqdm(total=total, initial=initial, desc=label, unit=unit)

    def update(self, n: int = 1) -> None:
        """``n`` more units done."""
        self.position += n
        if self._bar is not None:
            self._bar.update(n)
        elif self._plain and self.position != self._printed:
            now = self._clock()
            finished = self.total is not None and self.position >= self.total
            if (finished and self._final_due(now)) or now - self._last >= self.every_s:
                self._print(now)

    def __call__(self, done: int, total: int | None = None) -> None:
        """Set the position to ``done`` (and the total, when given): a ``(done, total)`` callback."""
        if total is not None and total != self.total:
            self.total = total
            if self._bar is not None:
                self._bar.total = total
                self._bar.refresh()
        self.update(done - self.position)

    def skip_to(self, done: int) -> None:
        """Set the position to ``done`` for work this process did not do (e.g. batches taken from a
        resume journal): it shows in the position but not in the rate, so the ETA is not
        flattered by it. Prints nothing."""
        n = done - self.position
        self.position += n
        self._initial += n
        if self._bar is not None:
            self._bar.update(n)

    def close(self, final: bool = True) -> None:
        """End the bar, or print the last position if no line showed it (not when ``final`` is
        False: a loop cut short by an exception). Idempotent."""
        if self._bar is not None:
            self._bar.close()
        elif self._plain and final and self._printed != self.position:
            now = self._clock()
            if self._final_due(now):
                self._print(now)
        self._bar, self._plain = None, False

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(final=exc_type is None)

    def _final_due(self, now: float) -> bool:
        return self._printed is not None or now - self._start >= self.min_s

    def _print(self, now: float) -> None:
        done = self.position - self._initial
        if done <= 0:
            return  # no rate yet
        per = (now - self._start) / done
        line = progress_line(self.label, self.position, self.total, per, self.unit)
        print(line, file=self._stream or sys.stdout, flush=True)
        self._last, self._printed = now, self.position


def _duration(seconds: float) -> str:
    """``42 s``, ``3.5 min`` or ``1.2 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class JobStages:
    """One line when each stage of a job starts and one when it ends, with the job's elapsed time,
    the stage's own time and peak resident memory, and an estimate of the time left for the job.

    The estimate is the planned seconds of the stages not yet finished, scaled by how the finished
    stages compared with their plan (the ratio is clamped to [0.2, 5], so one odd stage does not
    swing it); a stage planned at 0 s (cached) adds nothing; while a stage planned at None (no
    figures for it) is still to finish, the time left is not estimated.

    Args:
        app: the lines' prefix, e.g. ``seekrl-train``.
        planned: ``(stage name, planned seconds or None)`` in the order they run; a stage not named
            here is still timed, with no plan of its own.
        stream: where the lines go (stdout when None).
        clock: monotonic seconds (injectable for tests).
        memory: ``(start a stage's measurement, end it and return its peak bytes)`` (injectable
            for tests); by default a :class:`~framework.memory.PeakSampler` per stage.
    """

    def __init__(
        self,
        app: str,
        planned: list[tuple[str, float | None]],
        *,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.perf_counter,
        memory: tuple[Callable[[], object], Callable[[], int]] | None = None,
    ) -> None:
        self.app = app
        self.planned = dict(planned)
        self.order = [name for name, _ in planned]
        self.stream = stream
        self.clock = clock
        self._measure_start, self._measure_end = memory or (self._start_sampler, self._stop_sampler)
        self._sampler: Any = None
        self.start = clock()
        #: finished stages: name, seconds, peak resident bytes, planned seconds
        self.done: list[dict[str, float | str | None]] = []
        self._current: tuple[str, float] | None = None

    def _say(self, text: str) -> None:
        print(f"{self.app}: {text}", file=self.stream or sys.stdout, flush=True)

    def _start_sampler(self) -> None:
        self._sampler = PeakSampler()

    def _stop_sampler(self) -> int:
        sampler, self._sampler = self._sampler, None
        return sampler.stop() if sampler is not None else 0

    def left(self) -> float | None:
        """Estimated seconds left for the stages not yet finished; None while one of them has no
        plan (a stage planned at None)."""
        finished = {str(d["stage"]) for d in self.done}
        todo = [s for name, s in self.planned.items() if name not in finished]
        if None in todo:
            return None
        pairs = [
            (float(d["seconds"]), float(d["planned"]))  # type: ignore[arg-type]
            for d in self.done
            if d["planned"]
        ]
        ratio = sum(a for a, _ in pairs) / sum(p for _, p in pairs) if pairs else 1.0
        ratio = min(max(ratio, 0.2), 5.0)
        return ratio * sum(s for s in todo if s is not None)

    def _left_text(self) -> str:
        left = self.left()
        return "time left not estimated" if left is None else f"about {_duration(left)} left"

    def _position(self, name: str) -> str:
        if name in self.order:
            return f"[{self.order.index(name) + 1}/{len(self.order)}] "
        return ""

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """One stage as a context manager (:meth:`begin`, then :meth:`end`, which names the
        exception that stopped it, if one did)."""
        self.begin(name)
        try:
            yield
        except BaseException as exc:
            self.end(type(exc).__name__)
            raise
        self.end()

    def begin(self, name: str) -> None:
        """Start stage ``name`` (ending the running one, if any): reset the peak, say so."""
        self.end()
        self._measure_start()
        self._current = (name, self.clock())
        planned = self.planned.get(name)
        plan = f", planned {_duration(planned)}" if planned else ""
        self._say(
            f"{self._position(name)}{name} started (job elapsed "
            f"{_duration(self._current[1] - self.start)}{plan}; {self._left_text()})"
        )

    def end(self, error: str | None = None) -> None:
        """End the running stage (nothing when none runs): its time and peak memory, what is left."""
        current = self._current
        if current is None:
            return
        self._current = None
        name, begin = current
        now = self.clock()
        peak = int(self._measure_end())
        release_freed()  # the stage's freed heap goes back before the next stage starts
        self.done.append(
            {
                "stage": name,
                "seconds": round(now - begin, 1),
                "peak_bytes": peak,
                "planned": self.planned.get(name),
            }
        )
        state = "ended" if error is None else f"stopped ({error})"
        self._say(
            f"{self._position(name)}{name} {state} in {_duration(now - begin)}, peak memory "
            f"{peak / 1e9:.1f} GB (job elapsed {_duration(now - self.start)}; {self._left_text()})"
        )

    def summary(self) -> list[dict[str, float | str | None]]:
        """Each finished stage: name, seconds, peak resident GB, planned seconds."""
        return [
            {**d, "peak_gb": round(float(d["peak_bytes"]) / 1e9, 2)}  # type: ignore[arg-type]
            for d in self.done
        ]
