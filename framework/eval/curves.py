"""Training curves of several runs grouped by arm (e.g. seeds of GRPO against seeds of E-GRPO).

Reads the scalars a training run logged to ``<run dir>/tensorboard``, puts them on the RL step,
and draws one line per arm (the mean over its runs) with the min..max spread over runs shaded.

Tag names come from :func:`framework.rl.step.rl_step` (logged by the Lightning module):
``rollout/<name>`` for each entry of :func:`framework.rollout.metrics.rollout_metrics`
(``rollout/reward``, ``rollout/accuracy``, ``rollout/entity_match_rate``,
``rollout/response_length``, ``rollout/tool_calls``, ...) plus ``rollout/zero_variance_groups``;
``loss/<name>`` for the loss figures (``loss/entropy``); ``train/step`` for the RL step.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:  # matplotlib is imported where a plot is drawn (it is slow to import)
    import numpy as np
    from matplotlib.figure import Figure

Series = list[tuple[int, float]]
"""``(step, value)`` pairs sorted by step."""

STEP_TAG = "train/step"
#: the most arms drawn in one panel with a legend; more get a panel each (:func:`plot_arms`)
ONE_PANEL_ARMS = 10
#: panels per row of the small multiples
PANEL_COLUMNS = 6


class CurveRow(TypedDict):
    """Start and end of one arm's curve of one tag (:func:`curve_table`)."""

    arm: str
    tag: str
    runs: int
    first: float
    last: float
    change: float


@dataclass(frozen=True)
class ArmCurve:
    """One arm's curve for one tag: at each step the mean and spread over the runs that logged it.

    Attributes:
        steps: the union of the runs' steps, ascending.
        mean: mean over runs at each step.
        low: minimum over runs at each step.
        high: maximum over runs at each step.
        runs: how many runs logged each step (fewer where a run stopped early).
    """

    steps: list[int]
    mean: list[float]
    low: list[float]
    high: list[float]
    runs: list[int]


def read_scalars(run_dir: Path) -> dict[str, Series]:
    """Every scalar a run logged under ``<run_dir>/tensorboard``, on the RL step when known.

    Lightning logs against its global step; ``train/step`` holds the RL step at each global step.
    When that tag is present each scalar's global step is mapped to the RL step logged at the same
    global step, or failing that at the latest global step before it (validation logged between
    two training steps), or 0 before the first training step. Without it the raw step is kept.
    Event files in subdirectories are read too; a step logged twice keeps its last value.

    Args:
        run_dir: a training run directory (the one that holds ``tensorboard/``).

    Returns:
        ``tag -> [(step, value), ...]`` sorted by step.

    Raises:
        FileNotFoundError: no ``tensorboard`` directory, or no event file in it.
    """
    root = Path(run_dir) / "tensorboard"
    dirs = sorted({p.parent for p in root.rglob("events.out.tfevents.*")}) if root.is_dir() else []
    if not dirs:
        raise FileNotFoundError(
            f"[read_scalars] got {str(run_dir)!r} with no event files under tensorboard/; "
            "expected a training run directory. Fix: pass the directory seekrl-train printed "
            "(runs/train/<date>/...), not its tensorboard/ subdirectory."
        )
    raw: dict[str, dict[int, float]] = {}
    for d in dirs:
        for tag, events in _load_dir(d).items():
            raw.setdefault(tag, {}).update(events)
    to_rl = _step_mapper(raw.get(STEP_TAG))
    out: dict[str, Series] = {}
    for tag, events in raw.items():
        mapped: dict[int, float] = {}
        for step in sorted(events):
            mapped[to_rl(step)] = events[step]  # later global steps win on a shared RL step
        out[tag] = sorted(mapped.items())
    return out


def _load_dir(directory: Path) -> dict[str, dict[int, float]]:
    """``tag -> {step: value}`` of the event files in one directory (not its subdirectories)."""
    import logging

    from tensorboard.backend.event_processing import event_accumulator

    # its directory watcher logs every event file it reads at INFO, which apps configure to show
    logging.getLogger("tensorboard").setLevel(logging.WARNING)
    acc = event_accumulator.EventAccumulator(
        str(directory), size_guidance={event_accumulator.SCALARS: 0}
    )
    acc.Reload()
    return {
        tag: {int(e.step): float(e.value) for e in acc.Scalars(tag)}
        for tag in acc.Tags()["scalars"]
    }


def _step_mapper(rl_steps: Mapping[int, float] | None) -> Callable[[int], int]:
    """A function global step -> RL step, from ``train/step``'s ``{global step: RL step}``."""
    if not rl_steps:
        return lambda step: step
    known = sorted(rl_steps)
    values = [round(rl_steps[g]) for g in known]

    def to_rl(step: int) -> int:
        i = bisect.bisect_right(known, step) - 1
        return values[i] if i >= 0 else 0

    return to_rl


def arm_curve(series: Sequence[Series]) -> ArmCurve:
    """Mean and min..max over several runs' series of one tag, at every step any run logged.

    Args:
        series: one ``[(step, value), ...]`` per run (empty ones are ignored).

    Returns:
        The :class:`ArmCurve`; empty lists when no run logged anything.
    """
    at: dict[int, list[float]] = {}
    for s in series:
        for step, value in s:
            at.setdefault(step, []).append(value)
    steps = sorted(at)
    return ArmCurve(
        steps=steps,
        mean=[sum(at[s]) / len(at[s]) for s in steps],
        low=[min(at[s]) for s in steps],
        high=[max(at[s]) for s in steps],
        runs=[len(at[s]) for s in steps],
    )


def plot_arms(
    runs: Mapping[str, Sequence[Path | Mapping[str, Series]]],
    tags: Sequence[str],
    out: Path,
    *,
    title_prefix: str = "",
) -> list[Path]:
    """One PNG per tag with one line per arm (mean over its runs) and the min..max band shaded.

    More than :data:`ONE_PANEL_ARMS` arms (a screen's dozens) would share one legend no reader can
    match to its lines, so they are drawn as small multiples instead: one panel per arm, in the
    order of ``runs``, each over the first arm (a study's baseline leads) in grey, on shared axes.

    Args:
        runs: ``arm -> training run directories`` (seeds of that arm), or their scalars already
            read (``tag -> series`` per run, as a study archive keeps them).
        tags: scalar tags to plot, e.g. ``["rollout/reward", "loss/entropy"]``.
        out: directory for the plots (created); ``rollout/reward`` becomes ``rollout_reward.png``.
        title_prefix: put before each tag in the plot title.

    Returns:
        The files written, in the order of ``tags``; tags no run logged get no file.

    Raises:
        FileNotFoundError: a run directory has no TensorBoard event files.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    loaded = _load_runs(runs)
    out = Path(out)
    written: list[Path] = []
    grids: dict[int, tuple[Figure, np.ndarray]] = {}  # small multiples' panels, made once per size
    for tag in tags:
        curves = {
            arm: arm_curve([s.get(tag, []) for s in per_run]) for arm, per_run in loaded.items()
        }
        curves = {arm: c for arm, c in curves.items() if c.steps}
        if not curves:
            continue
        counts = {arm: sum(1 for s in loaded[arm] if s.get(tag)) for arm in curves}
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{_file_stem(tag)}.png"
        if len(curves) > ONE_PANEL_ARMS:
            if len(curves) not in grids:
                grids[len(curves)] = _grid(len(curves))
            _small_multiples(*grids[len(curves)], curves, counts, tag, title_prefix, path)
            written.append(path)
            continue
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for arm, c in curves.items():
            n = counts[arm]
            (line,) = ax.plot(c.steps, c.mean, marker="." if len(c.steps) < 30 else None)
            line.set_label(f"{arm} (n={n})")
            if n > 1:
                ax.fill_between(c.steps, c.low, c.high, color=line.get_color(), alpha=0.2)
        ax.set_xlabel("RL step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(tag)
        ax.set_title(f"{title_prefix}{tag}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    for fig, _ in grids.values():
        plt.close(fig)
    return written


def _grid(panels: int) -> tuple[Figure, np.ndarray]:
    """A figure of ``panels`` small axes (an array [rows, columns] of them),
    :data:`PANEL_COLUMNS` to a row (the rest hidden)."""
    import matplotlib.pyplot as plt

    cols = min(PANEL_COLUMNS, panels)
    rows = -(-panels // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.1 * cols, 1.45 * rows + 0.9), squeeze=False)
    for ax in axes.flat[panels:]:
        ax.set_visible(False)
    fig.supxlabel("RL step", fontsize=8)
    fig.subplots_adjust(
        left=0.07,
        right=0.99,
        bottom=0.06,
        top=1 - 0.5 / fig.get_figheight(),
        hspace=0.45,
        wspace=0.08,
    )
    return fig, axes


def _small_multiples(
    fig: Figure,
    axes: np.ndarray,
    curves: dict[str, ArmCurve],
    counts: dict[str, int],
    tag: str,
    title_prefix: str,
    path: Path,
) -> None:
    """One small panel per arm, each over the first arm's curve in grey, saved to ``path``.

    ``fig``/``axes`` come from :func:`_grid` and are drawn again for each tag (making dozens of
    axes costs more than drawing them). The panels share their limits; only the left column
    shows values and only the lowest panel of each column shows steps (matplotlib's ticks cost
    most of the drawing).
    """
    from matplotlib.ticker import MaxNLocator, NullLocator
    from PIL import Image  # matplotlib's own dependency

    names = list(curves)
    reference = curves[names[0]]
    cols = axes.shape[1]
    steps = [s for c in curves.values() for s in c.steps]
    values = [v for c in curves.values() for v in (*c.low, *c.high)]
    pad = 0.05 * ((max(values) - min(values)) or 1.0)
    for i, (ax, arm) in enumerate(zip(axes.flat, names, strict=False)):
        for artist in [*ax.lines, *ax.collections]:
            artist.remove()
        c, n = curves[arm], counts[arm]
        if i:
            ax.plot(reference.steps, reference.mean, color="0.65", linewidth=0.9)
        color = "tab:blue" if i else "black"
        ax.plot(c.steps, c.mean, color=color, linewidth=1.1)
        if n > 1:
            ax.fill_between(c.steps, c.low, c.high, color=color, alpha=0.2)
        ax.set_title(f"{arm} (n={n})", fontsize=7, pad=2, y=1.0)  # a fixed place: fast
        ax.set_xlim(min(steps), max(steps))
        ax.set_ylim(min(values) - pad, max(values) + pad)
        ax.tick_params(labelsize=6, length=2)
        if i % cols:
            ax.yaxis.set_major_locator(NullLocator())
        else:
            ax.yaxis.set_major_locator(MaxNLocator(nbins=3))
        if i + cols < len(names):  # a panel below it shows the steps
            ax.xaxis.set_major_locator(NullLocator())
        else:
            ax.xaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
    fig.suptitle(f"{title_prefix}{tag}: each arm (blue) over {names[0]} (grey)", fontsize=9)
    fig.supylabel(tag, fontsize=8)
    fig.savefig(path, dpi=100)
    with Image.open(path) as image:  # 256 colours: less than half the bytes, the same to the eye
        small = image.convert("RGB").quantize(256)
    small.save(path, optimize=True)


def curve_table(
    runs: Mapping[str, Sequence[Path | Mapping[str, Series]]], tags: Sequence[str]
) -> list[CurveRow]:
    """Start and end of each arm's curves: mean over runs of the first- and last-quarter averages.

    A run's quarter is its first (last) ``max(1, len // 4)`` logged points, so a short run still
    compares its first point with its last.

    Args:
        runs: ``arm -> training run directories``.
        tags: scalar tags to summarise.

    Returns:
        Rows ``{"arm", "tag", "runs", "first", "last", "change"}`` (``change = last - first``), arm
        by arm in the order of ``runs`` and tags in the order of ``tags``; ``runs`` counts the runs
        that logged the tag, and an arm with none gets no row for it.

    Raises:
        FileNotFoundError: a run directory has no TensorBoard event files.
    """
    rows: list[CurveRow] = []
    for arm, per_run in _load_runs(runs).items():
        for tag in tags:
            quarters = [_quarter_means(s[tag]) for s in per_run if s.get(tag)]
            if not quarters:
                continue
            first = sum(q[0] for q in quarters) / len(quarters)
            last = sum(q[1] for q in quarters) / len(quarters)
            rows.append(
                {
                    "arm": arm,
                    "tag": tag,
                    "runs": len(quarters),
                    "first": first,
                    "last": last,
                    "change": last - first,
                }
            )
    return rows


def _quarter_means(series: Series) -> tuple[float, float]:
    """Averages of the first and last ``max(1, len // 4)`` values of one series."""
    q = max(1, len(series) // 4)
    head = [v for _, v in series[:q]]
    tail = [v for _, v in series[-q:]]
    return sum(head) / q, sum(tail) / q


def _load_runs(
    runs: Mapping[str, Sequence[Path | Mapping[str, Series]]],
) -> dict[str, list[dict[str, Series]]]:
    """Each run's scalars: read from its directory, or given already (``tag -> series``)."""
    return {
        arm: [dict(r) if isinstance(r, Mapping) else read_scalars(Path(r)) for r in dirs]
        for arm, dirs in runs.items()
    }


def _file_stem(tag: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", tag).strip("_") or "scalar"
