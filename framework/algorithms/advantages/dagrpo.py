"""DaGRPO: Distinctiveness-aware GRPO, reconstructed, its first part only: a wrong rollout whose
reasoning is nearly the same text as a correct one's of its group pushes the opposite gradient onto
the same tokens; leave it out of the loss.

The method section could not be read from here (``../shared/METHODS-2.md`` item 15); our choices,
hence "reconstructed": distinctiveness is the token Jaccard similarity of two rollouts' thinking
(whitespace tokens, lower-cased, as sets; the ``think_texts`` input); a rollout is correct when its
reward is positive; a wrong rollout whose similarity to any correct rollout of its group exceeds
``threshold`` (0.9) gets advantage 0, so the planner leaves it out; every other rollout keeps
GRPO's advantage (the group statistics are computed before masking).

Not implemented: the paper's second part, off-policy anchors (high-quality reference solutions
injected into hard groups), which needs the step to add rollouts it did not generate.

Sources found 2026-11-26 (this stays reconstructed): arXiv 2512.06337 (math reasoning); only its
abstract and summaries were readable, and no code was found. The summaries say the paper's
distinctiveness is scored by an LLM over pairs of samples (ours: token Jaccard of a wrong rollout
against a correct one) and its anchors come from expert data.

How often it acts: in the screen's DaGRPO run (32 steps of 2 groups of 8, binary reward, seed 0)
158 wrong rollouts shared a group with a correct one; the most similar was 0.87 Jaccard-similar
to it (median 0.58; 8 above 0.8, 24 above 0.7), so the 0.9 threshold masked none, and the run was
GRPO's to the bit (``docs/benchmarks/screen.md`` marks it so). A lower ``threshold`` acts; which
one the paper's LLM judge corresponds to is not known.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from framework.algorithms.advantages.grpo import (
    GRPOAdvantageConfig,
    baseline_is_grpo,
    grpo_advantage,
)
from framework.config import Problem, check_range, option
from framework.config.inert import InertRule
from framework.registry import ADVANTAGES
from framework.types import AdvantageInputs


def dagrpo_inert(section: Any, train: Any, baseline: Any) -> str | None:
    """DaGRPO's inert rule (:mod:`framework.config.inert`): a Jaccard similarity is at most 1 and
    the rule masks only above ``threshold``, so at ``threshold >= 1`` no rollout is masked and the
    advantages are GRPO's (the baseline's estimator must be GRPO with the same fields). Below 1
    whether it masks depends on the rollouts' texts (at 0.9 the v1 screen's run masked none),
    which no config says: the rule gives None and the arm is trained."""
    if section.threshold < 1.0 or not baseline_is_grpo(section, baseline):
        return None
    return (
        f"threshold {section.threshold:g}: no two texts are more than 1 Jaccard-similar, so no "
        "wrong rollout is masked and the advantages are GRPO's"
    )


@dataclass
class DaGRPOAdvantageConfig(GRPOAdvantageConfig):
    requires: ClassVar[tuple[str, ...]] = ("think_texts",)
    paper: ClassVar[str] = (
        "DaGRPO: Distinctiveness-Aware Group Relative Policy Optimization, arXiv 2512.06337"
    )
    fidelity: ClassVar[str] = "reconstructed"

    threshold: float = option(0.9, "mask a wrong rollout this similar to a correct one (choice)")

    #: at threshold >= 1 nothing is masked (dagrpo_inert); below it the texts decide
    screen_inert: ClassVar[InertRule] = dagrpo_inert

    def problems(self) -> list[Problem]:
        return check_range(self.threshold, "threshold", low=0.0, high=1.0) + super().problems()


def jaccard(a: str, b: str) -> float:
    """Token Jaccard similarity of two texts (lower-cased whitespace tokens as sets); 1 for two
    empty texts."""
    x, y = set(a.lower().split()), set(b.lower().split())
    return len(x & y) / len(x | y) if x | y else 1.0


def indistinct_wrong(
    texts: Sequence[str], correct: Tensor, group_index: Tensor, threshold: float
) -> Tensor:
    """``[N]`` bool: wrong rollouts whose text is more than ``threshold`` similar to a correct
    rollout of their group."""
    groups = group_index.tolist()
    right = correct.tolist()
    out = torch.zeros(len(texts), dtype=torch.bool)
    for i, t in enumerate(texts):
        if right[i]:
            continue
        out[i] = any(
            right[j] and groups[j] == groups[i] and jaccard(t, texts[j]) > threshold
            for j in range(len(texts))
        )
    return out


@ADVANTAGES.register("dagrpo", config=DaGRPOAdvantageConfig)
def dagrpo_advantage(inputs: AdvantageInputs, *, cfg: DaGRPOAdvantageConfig) -> Tensor:
    """DaGRPO's gradient rectification (reconstructed; module docstring)::

        A_i = GRPO advantage
        A_i = 0 for a wrong rollout (r_i <= 0) with Jaccard(think_i, think_j) > threshold for some
              correct rollout j (r_j > 0) of its group

    Returns:
        ``[N]`` advantages.
    """
    adv = grpo_advantage(inputs, cfg=cfg)
    masked = indistinct_wrong(
        inputs.extras["think_texts"], inputs.rewards > 0, inputs.group_index, cfg.threshold
    )
    return torch.where(masked.to(adv.device), torch.zeros_like(adv), adv)
