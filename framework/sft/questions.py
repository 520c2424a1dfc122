"""The train questions the cold-start SFT's expert is handed, and the refusal when it could follow
too few of them to train.

The expert follows each question's walk (:data:`~framework.sft.expert.EXPERT_FIELDS`), which only
``seekrl-synth`` writes today; on other data it drops every question. Both the SFT run
(:func:`framework.sft.stage.run_sft`) and the train job's data check
(:func:`framework.rl.stages.checked_training_data`, dry run included) draw the same questions with
:func:`expert_questions` and refuse with :func:`require_expert_questions` before any model, index
or expert rollout is loaded.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from framework.data.schema import DatasetError, QAItem
from framework.sft.expert import EXPERT_FIELDS, ExpertConfig, usable_questions


def expert_questions(train: Sequence[QAItem], cfg: ExpertConfig, seed: int) -> list[QAItem]:
    """The train questions handed to the expert: ``cfg.questions`` of them (0 = all), drawn with
    ``seed`` (the SFT run's seed)."""
    limit = cfg.questions or len(train)
    return random.Random(seed).sample(list(train), min(limit, len(train)))


@dataclass(frozen=True)
class ExpertQuestions:
    """How many of the questions handed to the expert it can follow, and why the others drop.

    Attributes:
        handed: questions handed to the expert.
        usable: those it can follow (before the evidence check, which needs the retriever).
        dropped: drop reason -> questions.
    """

    handed: int
    usable: int
    dropped: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        """One line for the dry run's data check."""
        tail = f" (dropped: {self.reasons()})" if self.dropped else ""
        return f"cold-start SFT: {self.usable} of {self.handed} expert questions usable{tail}"

    def reasons(self) -> str:
        """The drop reasons with their counts, e.g. ``3 duplicate question``."""
        return ", ".join(f"{n} {why}" for why, n in sorted(self.dropped.items()))


def require_expert_questions(
    train: Sequence[QAItem],
    expert: ExpertConfig,
    batch_size: int,
    *,
    seed: int,
    source: str,
    where: str,
    keys: str,
    off: str,
) -> ExpertQuestions:
    """Check that the expert can follow at least one SFT batch of the questions it is handed.

    The threshold is ``batch_size`` usable questions: fewer cannot fill one optimiser step even if
    every trajectory then passed the evidence check (about half do on the shipped data:
    :data:`framework.rl.plan.EXPERT_KEEP_RATE`), so the stage would train on nothing or on a
    handful of sequences and report a warm start that is the policy as it was.

    Args:
        train: the train split.
        expert: the expert's settings (how many questions it is handed).
        batch_size: trajectories per SFT optimiser step.
        seed: the SFT run's seed (which questions are drawn).
        source: the train split's file, for the message.
        where: the setting that runs the SFT, for the message (``warm_start.sft``).
        keys: the prefix of the SFT settings' keys in this app (``warm_start.`` or empty).
        off: how to do without the SFT, the first half of the message's fix.

    Returns:
        The counts, for the dry run's line.

    Raises:
        DatasetError: fewer than ``batch_size`` usable questions, naming the drop reasons.
    """
    handed = expert_questions(train, expert, seed)
    usable, dropped = usable_questions(handed)
    counts = ExpertQuestions(len(handed), len(usable), dict(dropped))
    if counts.usable >= batch_size:
        return counts
    reasons = counts.reasons() or "none dropped"
    raise DatasetError(
        f"[{where}] {source}: got {counts.usable} of {counts.handed} questions the cold-start "
        f"SFT's expert is handed that it can follow ({reasons}); expected at least {batch_size} "
        f"({keys}optim.batch_size: one SFT batch, before the evidence check drops more). "
        f"Fix: {off}, or give questions with {EXPERT_FIELDS} (docs/own_data.md).",
        source=source,
    )


__all__ = ["ExpertQuestions", "expert_questions", "require_expert_questions"]
