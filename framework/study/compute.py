"""What a screen's runs spent per training step (rollouts generated, their generated tokens,
optimiser steps), and whether a method spends more than the baseline: then it is compared with a
reference arm that spends as much (:func:`reference_arms`), or its comparison is unmatched
(:mod:`framework.study.screen`, "Compute").
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal, TypedDict

from framework.study.types import JSON, ArchivedSeries, RunRecord

if TYPE_CHECKING:
    from framework.study.archive import StudyArchive

#: more rollouts per step than the baseline's by this share spends more (a sampler that draws a
#: reserve group now and then is not flagged; dynamic sampling's extra rounds are)
ROLLOUT_TOLERANCE = 0.05


#: more generated tokens per step than the baseline's by this share spends more: a policy's
#: response length is an outcome of its training too (the v1 screen's methods answered in 30%
#: fewer to 28% more tokens per rollout than GRPO), so only a larger excess, an augmenter's or a
#: budget's, counts
TOKEN_TOLERANCE = 0.5


class Compute(TypedDict):
    """What a run (or an arm, the mean over its seeds) spent per training step
    (:func:`run_compute`); None where nothing says."""

    rollouts: float | None
    generated_tokens: float | None
    optimizer_steps: float | None
    from_config: bool


def _series_mean(series: Mapping[str, ArchivedSeries], tag: str) -> float | None:
    values = [float(v) for _, v in series.get(tag) or []]
    return statistics.fmean(values) if values else None


def run_compute(run: RunRecord) -> Compute:
    """What one run spent per training step, the mean over its steps, from its record's
    ``compute`` series (:data:`framework.study.archive.COMPUTE_TAGS`): ``rollouts`` (every
    rollout generated: ``train/generated_rollouts``, else the trained ``train/rollouts``),
    ``generated_tokens`` (``train/generated_tokens``, else ``rollout/generated_tokens`` x
    ``train/rollouts``) and ``optimizer_steps`` (``train/optimizer_steps``, else
    ``loss/optimizer_steps``, else the saved config's ``optim.policy_epochs`` when its batches
    were one mini-batch and its loss is not turn-staged: ``from_config`` then). None where
    nothing says."""
    series = run.get("compute") or {}
    rollouts = _series_mean(series, "train/generated_rollouts")
    if rollouts is None:
        rollouts = _series_mean(series, "train/rollouts")
    tokens = _series_mean(series, "train/generated_tokens")
    if tokens is None and series.get("rollout/generated_tokens") and series.get("train/rollouts"):
        trained = {int(s): float(v) for s, v in series["train/rollouts"]}
        per = [float(v) * trained[int(s)] for s, v in series["rollout/generated_tokens"]]
        tokens = statistics.fmean(per) if per else None
    steps = _series_mean(series, "train/optimizer_steps")
    if steps is None:
        steps = _series_mean(series, "loss/optimizer_steps")
    from_config = False
    if steps is None:
        steps = _configured_steps(run.get("config") or {})
        from_config = steps is not None
    return {
        "rollouts": rollouts,
        "generated_tokens": tokens,
        "optimizer_steps": steps,
        "from_config": from_config,
    }


def _configured_steps(config: Mapping[str, JSON]) -> float | None:
    """Optimiser steps per batch from a saved train config: its policy epochs, when it trained
    on whole batches (no ``mini_batch_size``, or 0) with a loss that is not turn-staged."""
    optim, section = config.get("optim") or {}, config.get("loss") or {}
    loss = section.get("name") if isinstance(section, dict) else None
    if not isinstance(optim, dict) or not isinstance(loss, str):
        return None
    epochs = optim.get("policy_epochs")
    if "policy_epochs" not in optim or optim.get("mini_batch_size"):
        return None
    from framework.registry import ALL, load_components

    load_components()
    entry = ALL["loss"].get(loss) if loss in ALL["loss"] else None
    if entry is None or getattr(entry.config_cls, "stages_per_turn", False):
        return None
    return float(epochs)  # type: ignore[arg-type]  # a number in a config train accepted


def arm_compute(archive: StudyArchive, arm: str, seeds: Sequence[int]) -> Compute | None:
    """:func:`run_compute` of the arm's runs, each figure the mean over the seeds that have it;
    None without a run record."""
    found = [run_compute(run) for s in seeds if (run := archive.run(arm, s))]
    if not found:
        return None

    def mean(values: Sequence[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.fmean(known) if known else None

    return {
        "rollouts": mean([c["rollouts"] for c in found]),
        "generated_tokens": mean([c["generated_tokens"] for c in found]),
        "optimizer_steps": mean([c["optimizer_steps"] for c in found]),
        "from_config": any(c["from_config"] for c in found),
    }


#: the figures of a :class:`Compute`
Figure = Literal["optimizer_steps", "rollouts", "generated_tokens"]


def spends_more(mine: Compute | None, theirs: Compute | None) -> list[str]:
    """How ``mine`` (a row's compute, :func:`arm_compute`) spends more per step than ``theirs``,
    one phrase per figure: more optimiser steps (any excess), more rollouts (above
    :data:`ROLLOUT_TOLERANCE`) or more generated tokens (above :data:`TOKEN_TOLERANCE`); a figure
    either lacks is not compared. Empty when it spends no more."""
    if not mine or not theirs:
        return []
    out = []

    def both(key: Figure) -> tuple[float, float] | None:
        a, b = mine.get(key), theirs.get(key)
        return None if a is None or b is None else (float(a), float(b))

    if (s := both("optimizer_steps")) and s[0] > s[1] + 1e-9:
        out.append(f"{s[0]:.1f} optimiser steps per batch against {s[1]:.1f}")
    if (r := both("rollouts")) and r[0] > r[1] * (1 + ROLLOUT_TOLERANCE):
        out.append(f"{r[0]:.1f} rollouts per step against {r[1]:.1f}")
    if (t := both("generated_tokens")) and t[0] > t[1] * (1 + TOKEN_TOLERANCE):
        out.append(f"{t[0]:.0f} generated tokens per step against {t[1]:.0f}")
    return out


def reference_arms(arms: Mapping[str, Sequence[str]], baseline: str) -> dict[str, str]:
    """The screen's reference arms: arm -> what it is. A reference is the baseline bundle with
    ``optim`` settings only (``grpo-epochs2``: ``[algorithm=grpo, optim.policy_epochs=2]``), the
    baseline at another compute for the methods that spend more to be compared with; no method."""
    out = {}
    head = f"algorithm={baseline}"
    for arm, args in arms.items():
        rest = list(args)[1:]
        optim_only = all(str(a).startswith("optim.") for a in rest)
        if arm != baseline and list(args)[:1] == [head] and rest and optim_only:
            out[arm] = f"the baseline with {' '.join(rest)}"
    return out
