"""R³: replay, reflection and ranking rewards against advantage collapse (arXiv 2601.19620),
partial: the method section (§3 and Algorithm 1 of arxiv.org/html/2601.19620v1) was read; its
hyperparameters (``k``, ``tau``, ``p``, ``R_max``, ``alpha``), its reflection prompt and its code
were not found, so those are our choices.

An all-wrong or all-right group gives GRPO nothing to learn from. R³ answers with three parts:

1. Cross-context replay (CCR, the ``replay_reflect`` augmenter, :mod:`framework.rl.augmenters`):
   a group whose on-policy rollouts all share one outcome gets ``k`` (``replays``) rollouts of the
   same question with the other outcome from earlier steps added to it (``G_mix = G ∪ G_C``; a
   buffer keyed by question, updated after the replay as Algorithm 1 line 11, saved in
   checkpoints), in both directions as §3.2.1. A replayed rollout is off-policy: the update takes
   its old log-probs from the policy before this step's update, like every rollout, so PPO's clip
   applies as usual.
2. In-context self-reflection (ISR, same augmenter): a question seen at earlier steps whose mean
   correctness there is below ``tau`` (``hard_below``) is a hard query; the step adds a new group,
   of as many rollouts as the question's own (``reflection_group``), for the prompt
   ``q ⊕ o_h ⊕ p_r``: the question, one of its stored failed rollouts drawn at random (its
   reasoning and answer, cut to ``max_attempt_chars``) and a reflection guidance (``prompt``). The
   new group is trained with the context it was generated in and normalised on its own, as a
   query of ``D_b`` (Algorithm 1 line 3).
3. Structural entropy ranking reward (SERR, this module's ``r3`` estimator): in a group whose
   on-policy rollouts are all wrong, each of them is scored by ``E_peak`` (its mean entropy over
   its ``max(1, floor(p L))`` most uncertain tokens) and ``E_global`` (its mean entropy over all
   ``L``), the ``entropy_profile`` input; ``S_i`` counts the rollouts ``j`` it dominates
   (``E_peak_i > E_peak_j`` and ``E_global_i < E_global_j``); sorted by ``S``, the ``k``-th gets
   ``R_max (1 - k / (N - 1))``. Eq. 3 then normalises over ``G_mix``:
   ``A_i = (R_i - mean R) / (alpha std R + eps)``.

Choices where the paper is silent or does not fit this setting:

- Which rollouts SERR ranks: the paper ranks the all-wrong group's *truncated* responses (long
  math solutions cut by the length limit, where no verifiable reward exists). Here a rollout over
  its budget is left out of training by the step (``sample_mask``), so SERR ranks every on-policy
  rollout of an all-wrong group; the ranking order and rewards are the paper's.
- The buffer stores only rollouts the step trains: one over its budget counts toward its
  question's mean correctness but is never replayed or shown in a reflection.
- Ties in ``S`` share the mean of their places; a lone ranked rollout gets 0 (the formula divides
  by ``N - 1``).
- ``R_max = 0.2``, below a correct rollout's 1, so a ranked failure never reaches a success;
  ``p = 0.2`` (the share of "forking" tokens of the entropy study the paper cites);
  ``alpha = 1`` (GRPO's normalisation); ``k = 1``; ``tau = 0.2``; a buffer of the newest 4 rollouts
  per question and outcome; "epoch > 1" read as "the question was drawn at an earlier step".
- Left out: the length bonus ``max(0, 1 - l / 32768)`` for correct answers (§4.1.3, the
  experimental setting's reward for long math solutions, not part of the method).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.advantages.grpo import GRPOAdvantageConfig
from framework.algorithms.stats.group import group_center, group_std
from framework.config import Problem, check_range, option
from framework.registry import ADVANTAGES
from framework.types import AdvantageInputs


def rank_rewards(scores: Tensor, failed: Tensor, group_index: Tensor, r_max: float) -> Tensor:
    """``[N]``: per group, the ``failed`` rollouts' rewards ``r_max (1 - k / (m - 1))`` by their
    place ``k`` in descending ``scores`` among the group's ``m`` (ties share the mean of their
    places; a group's only one gets 0); 0 for the rest."""
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


def entropy_stats(entropy: Tensor, share: float = 0.2) -> tuple[float, float]:
    """``(E_peak, E_global)`` of one rollout's trained tokens' entropies (``[L]``): the mean over
    its ``max(1, floor(share L))`` largest, and the mean over all; ``(0, 0)`` without tokens."""
    n = entropy.numel()
    if n == 0:
        return 0.0, 0.0
    k = max(int(share * n), 1)
    return float(entropy.topk(k).values.mean()), float(entropy.mean())


def dominance_counts(peak: Tensor, spread: Tensor) -> Tensor:
    """``[M]``: ``S_i``, how many rollouts ``j`` rollout ``i`` dominates (``peak_i > peak_j`` and
    ``spread_i < spread_j``; R³'s partial order of ``(E_peak, E_global)``)."""
    return ((peak[:, None] > peak[None, :]) & (spread[:, None] < spread[None, :])).sum(-1)


@dataclass
class R3AdvantageConfig(GRPOAdvantageConfig):
    requires: ClassVar[tuple[str, ...]] = ("entropy_profile",)
    paper: ClassVar[str] = "R3: replay, reflection and ranking rewards, arXiv 2601.19620"
    fidelity: ClassVar[str] = "partial"
    r_max: float = option(0.2, "choice: R_max, the reward of the best-ranked rollout")
    correct_at: float = option(1.0, "choice: a reward below this is a wrong rollout")
    peak_share: float = option(0.2, "choice: p, the share of a rollout's tokens in E_peak")
    alpha: float = option(1.0, "choice: eq. 3's alpha, the std's scale (1: GRPO)")

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
        out += check_range(self.peak_share, "peak_share", low=0.0, high=1.0, low_inclusive=False)
        out += check_range(self.alpha, "alpha", low=0.0, low_inclusive=False)
        return out


def all_wrong_on_policy(inputs: AdvantageInputs, correct_at: float) -> Tensor:
    """``[N]`` bool: the on-policy rollouts (not ``extras['replayed']``) of the groups whose
    on-policy rollouts are all wrong (reward below ``correct_at``)."""
    n = inputs.rewards.shape[0]
    replayed = inputs.extras.get("replayed")
    on = ~replayed.bool() if replayed is not None else torch.ones(n, dtype=torch.bool)
    right = (on & (inputs.rewards >= correct_at)).long()
    groups = int(inputs.group_index.max()) + 1 if n else 0
    hits = torch.zeros(groups, dtype=torch.long).index_add_(0, inputs.group_index, right)
    return on & (hits[inputs.group_index] == 0)


@ADVANTAGES.register("r3", config=R3AdvantageConfig)
def r3_advantage(inputs: AdvantageInputs, *, cfg: R3AdvantageConfig) -> Tensor:
    """``S_i = #{j : E_peak_i > E_peak_j and E_global_i < E_global_j}`` over an all-wrong group's
    on-policy rollouts; ``R_(k) = R_max (1 - k / (N - 1))``;
    ``A_i = (R_i - mean_Gmix R) / (alpha std_Gmix R + eps)`` (module docstring); ``[N]``."""
    profile = inputs.extras.get("entropy_profile")
    n = inputs.rewards.shape[0]
    if profile is None or tuple(profile.shape) != (n, 2):
        raise ValueError(
            "[advantage.r3] got no extras['entropy_profile'] [N, 2]; expected the provider's "
            "(E_peak, E_global) per rollout. Fix: load the built-in components "
            "(framework.rl.providers registers it)."
        )
    rewards = inputs.rewards.to(torch.get_default_dtype())
    ranked = all_wrong_on_policy(inputs, cfg.correct_at)
    counts = torch.zeros(n, dtype=torch.get_default_dtype())
    for g in inputs.group_index[ranked].unique().tolist():
        rows = (ranked & (inputs.group_index == g)).nonzero().flatten()
        counts[rows] = dominance_counts(profile[rows, 0], profile[rows, 1]).to(counts.dtype)
    graded = torch.where(
        ranked, rank_rewards(counts, ranked, inputs.group_index, cfg.r_max), rewards
    )
    centered = group_center(graded, inputs.group_index)
    if not cfg.scale_by_std:
        return centered
    std = group_std(graded, inputs.group_index, unbiased=cfg.unbiased_std)
    return torch.where(
        std > 0, centered / (cfg.alpha * std + cfg.epsilon), torch.zeros_like(centered)
    )
