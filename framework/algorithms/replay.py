"""R³: replay, reflection and ranking rewards against advantage collapse (arXiv 2601.19620),
reconstructed from the abstract.

An all-wrong group gives GRPO nothing to learn from. R³ answers with three parts; the method section
could not be read from here, so each is our reading (``../shared/METHODS-2.md`` item 5):

1. Cross-context replay (the ``replay_reflect`` augmenter, :mod:`framework.rl.augmenters`): a group
   whose rollouts all share one outcome gets, in place of its last rollout, the newest rollout of
   the same question with the other outcome from earlier steps (one; a buffer keyed by question,
   saved in checkpoints). The replayed rollout is off-policy: the update takes its old log-probs
   from the policy before this step's update, like every rollout, so PPO's clip applies as usual.
2. In-context self-reflection (same augmenter): an all-wrong group with nothing to replay gets, in
   place of its last ``reflections`` rollouts, rollouts of a prompt that shows the question and a
   failed answer and asks for another; they train with the context they were generated in.
3. Structural entropy ranking (this module's ``r3`` estimator): among a group's failed rollouts
   (reward below ``correct_at``), the one with the better entropy pattern earns more: score =
   mean entropy over the first 20% of its trained tokens (exploration) minus the mean over the last
   20% (settling), the ``entropy_profile`` input; failed rollouts get rewards linear in their rank
   from ``r_max`` (best) to 0 (worst; tied scores share the mean of their places; a lone failure
   gets 0), then GRPO's normalisation. ``r_max = 0.2 < correct_at``, so a ranked failure never
   reaches a correct rollout. Do not stack it with E-GRPO's partial credit.

Sources checked 2026-11-26 (this stays reconstructed): arXiv 2601.19620 (single-turn math,
DeepSeek-R1-Distill-1.5B on DeepScaleR); only its abstract and a summary were readable, and its
code is announced but was not found (R3L, arXiv 2601.03715, is another paper). The summary confirms
replay from a store of past samples for all-equal groups and reflection on earlier wrong attempts;
the ranking rule (our entropy-pattern score and its 0.2 ceiling) could not be checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.advantages import GRPOAdvantageConfig, grpo_advantage
from framework.config import Problem, check_range
from framework.registry import ADVANTAGES
from framework.types import AdvantageInputs


def rank_rewards(scores: Tensor, failed: Tensor, group_index: Tensor, r_max: float) -> Tensor:
    """``[N]``: per group, the failed rollouts' rewards linear in the rank of ``scores`` (highest
    ``r_max``, lowest 0; ties share the mean of their places; a group's only failure 0); 0 for the
    rest."""
    out = torch.zeros(scores.shape[0], dtype=torch.get_default_dtype())
    for g in group_index.unique().tolist():
        rows = ((group_index == g) & failed).nonzero().flatten()
        m = rows.numel()
        if m < 2:
            continue
        s = scores[rows].tolist()
        order = sorted(range(m), key=lambda j: -s[j])
        place = [0.0] * m
        j = 0
        while j < m:
            k = j
            while k + 1 < m and s[order[k + 1]] == s[order[j]]:
                k += 1
            for t in range(j, k + 1):
                place[order[t]] = (j + k) / 2  # tied: the mean of their places
            j = k + 1
        for t, r in enumerate(rows.tolist()):
            out[r] = r_max * (m - 1 - place[t]) / (m - 1)
    return out


def entropy_pattern(entropy: Tensor, share: float = 0.2) -> float:
    """``mean(H over the first share of tokens) - mean(H over the last share)`` of one rollout's
    trained tokens (``[T]``, in order); 0 without tokens."""
    n = entropy.numel()
    if n == 0:
        return 0.0
    k = max(round(n * share), 1)
    return float(entropy[:k].mean() - entropy[-k:].mean())


@dataclass
class R3AdvantageConfig(GRPOAdvantageConfig):
    requires: ClassVar[tuple[str, ...]] = ("entropy_profile",)
    paper: ClassVar[str] = "R3: replay, reflection and ranking rewards, arXiv 2601.19620"
    fidelity: ClassVar[str] = "reconstructed"
    r_max: float = field(
        default=0.2, metadata={"help": "choice: reward of the best-ranked failed rollout"}
    )
    correct_at: float = field(
        default=1.0, metadata={"help": "choice: a reward below this is a failed rollout"}
    )

    def problems(self) -> list[Problem]:
        out = super().problems()
        out += check_range(self.correct_at, "correct_at", low=0.0, low_inclusive=False)
        out += check_range(
            self.r_max,
            "r_max",
            low=0.0,
            high=self.correct_at,
            high_inclusive=False,
            fix="keep r_max below correct_at, so a ranked failure never equals a success",
        )
        return out


@ADVANTAGES.register("r3", config=R3AdvantageConfig)
def r3_advantage(inputs: AdvantageInputs, *, cfg: R3AdvantageConfig) -> Tensor:
    """GRPO's advantage of the rewards with each group's failed rollouts ranked by their entropy
    pattern (module docstring, part 3); ``[N]``."""
    scores = inputs.extras.get("entropy_profile")
    if scores is None or scores.shape[0] != inputs.rewards.shape[0]:
        raise ValueError(
            "[advantage.r3] got no extras['entropy_profile'] [N]; expected the provider's. "
            "Fix: load the built-in components (framework.rl.entropy registers it)."
        )
    rewards = inputs.rewards.to(torch.get_default_dtype())
    failed = rewards < cfg.correct_at
    graded = torch.where(
        failed, rank_rewards(scores, failed, inputs.group_index, cfg.r_max), rewards
    )
    return grpo_advantage(replace(inputs, rewards=graded), cfg=cfg)
