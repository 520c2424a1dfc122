"""DPPO: Dynamic Pruning Policy Optimization ("Unbiased Dynamic Pruning for Efficient Group-Based
Policy Optimization"), reconstructed: skip the backward pass of rollouts that carry little signal,
and keep the gradient unbiased by reweighting the ones kept.

Each rollout is kept with a known probability ``q_i`` and, when kept, its advantage (hence its
loss term, which every built-in loss is linear in up to clipping) is divided by ``q_i``; a pruned
rollout's advantage is 0, so the update's planner leaves it out of every micro-batch
(``optim.skip_zero_advantage``) and no forward or backward pass is spent on it. In expectation
over the draws, ``A' = A``.

The paper is arXiv 2603.04135 (found 2026-11-26); its method section still could not be read from
here (the stored pages stop in the introduction; no authors' code was found). Secondary summaries
add a prompt-level pruning by historical advantage (not here: it needs per-prompt state across
steps) and pruning rates ``r_q, r_o`` (0.7 moderate, 0.9 aggressive), and a third party's notes say
the paper's algorithm prunes a deterministic fraction while its unbiasedness proof assumes random
keeps (ours are random). Our choices (``../shared/METHODS-2.md`` item 15),
hence "reconstructed": the advantage is GRPO's; a rollout is *low-signal* when ``|A_i| <
threshold * max_j |A_j|`` over the batch and is kept with ``q = keep_prob``, every other rollout
with ``q = 1``; prompts are not pruned separately (a group whose advantages are all 0 is skipped
anyway); the paper's dense prompt packing is what the planner's token-bounded micro-batches do
already. The draws are seeded by ``seed`` and the batch itself, so a run repeats exactly.

When it prunes nothing: with a binary reward and groups of ``G`` rollouts, the smallest nonzero
GRPO advantage is ``1 / (G - 1)`` of the largest (one correct rollout of ``G``: ``|A|`` is ``1/G``
against ``(G-1)/G`` before the shared scaling), so the default threshold 0.1 catches no rollout
with a signal unless ``G >= 12``. At the screen's groups of 8 (a seventh) DPPO is GRPO, and its
screen run was GRPO's to the bit (``docs/benchmarks/screen.md`` marks it so); the rule acts on
graded rewards (``reward=e_grpo``, ``f1``) or large groups, or with a threshold above
``1 / (G - 1)``. A screen now knows this before training (:func:`dppo_inert`, the config's
``screen_inert`` rule) and lists the arm as inert instead of training it.
"""

from __future__ import annotations

import hashlib
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
from framework.config.inert import InertRule, binary_reward, fixed_group_size
from framework.registry import ADVANTAGES
from framework.types import AdvantageInputs

#: how far below ``1 / (G - 1)`` the threshold must be for the inert rule to trust it (the
#: comparison runs in floating point)
MARGIN = 1e-4


def dppo_inert(section: Any, train: Any, baseline: Any) -> str | None:
    """DPPO's inert rule (:mod:`framework.config.inert`; module docstring, "When it prunes
    nothing"): with a binary reward and groups of ``G``, the batch's smallest nonzero ``|A|`` and
    its largest both come from a group whose rollouts all share one outcome but one (``|r -
    mean|`` is ``1/G`` and ``(G-1)/G`` there, and its std, the same for both, is the smallest of
    any group), so a nonzero advantage is at least ``1 / (G - 1)`` of the largest, with or without
    the std scaling. With ``threshold`` below that no rollout with a signal is low-signal,
    every kept rollout has ``q = 1`` and ``A / 1 = A``, and a zero advantage stays 0: the
    advantages are GRPO's exactly. Needs the baseline's estimator to be GRPO with the same
    fields, and groups of one fixed size."""
    if not baseline_is_grpo(section, baseline) or not binary_reward(train):
        return None
    group = fixed_group_size(train)
    if group is None or group < 2:
        return None
    floor = 1.0 / (group - 1)
    if section.threshold >= floor * (1.0 - MARGIN):
        return None
    return (
        f"binary rewards in groups of {group}: the smallest nonzero |A| is 1/(G-1) = {floor:.3f} "
        f"of the batch's largest, above threshold {section.threshold:g}, so no rollout with a "
        "signal is pruned and the advantages are GRPO's exactly"
    )


@dataclass
class DPPOAdvantageConfig(GRPOAdvantageConfig):
    paper: ClassVar[str] = (
        "DPPO: Unbiased Dynamic Pruning for Efficient Group-Based Policy Optimization, "
        "arXiv 2603.04135"
    )
    fidelity: ClassVar[str] = "reconstructed"

    threshold: float = option(0.1, "low-signal: |A| < threshold * max |A| (choice)")
    keep_prob: float = option(0.5, "q, the keep probability of a low-signal rollout (choice)")
    seed: int = option(0, "seed of the pruning draws (with the batch)")

    #: binary rewards in groups of G: nothing is pruned below threshold 1 / (G - 1) (dppo_inert)
    screen_inert: ClassVar[InertRule] = dppo_inert

    def problems(self) -> list[Problem]:
        out = check_range(self.threshold, "threshold", low=0.0, high=1.0)
        out += check_range(self.keep_prob, "keep_prob", low=0.0, high=1.0, low_inclusive=False)
        return out + super().problems()


def keep_probabilities(advantages: Tensor, threshold: float, keep_prob: float) -> Tensor:
    """``[N]`` ``q_i``: ``keep_prob`` for a rollout with ``|A_i| < threshold * max |A|``, else 1."""
    a = advantages.abs()
    low = a < threshold * a.max() if a.numel() else torch.zeros_like(a, dtype=torch.bool)
    return torch.where(low, torch.full_like(a, keep_prob), torch.ones_like(a))


def pruned(advantages: Tensor, q: Tensor, generator: torch.Generator) -> Tensor:
    """``[N]``: ``A_i / q_i`` for the rollouts a draw keeps (each with probability ``q_i``), 0 for
    the others; unbiased: its expectation is ``A``."""
    u = torch.rand(q.shape, generator=generator, dtype=torch.float64).to(q.dtype)
    return torch.where(u < q, advantages / q, torch.zeros_like(advantages))


def _batch_seed(seed: int, inputs: AdvantageInputs) -> int:
    """A seed from ``seed`` and the batch (its rewards and response lengths): the same batch draws
    the same pruning, and two steps with equal rewards but other responses draw anew."""
    lengths = inputs.token_mask.sum(-1) if inputs.token_mask is not None else torch.zeros(0)
    digest = hashlib.blake2b(digest_size=8)
    digest.update(inputs.rewards.detach().double().cpu().numpy().tobytes())
    digest.update(lengths.detach().long().cpu().numpy().tobytes())
    return (int.from_bytes(digest.digest(), "little") + seed) % (2**63)


@ADVANTAGES.register("dppo", config=DPPOAdvantageConfig)
def dppo_advantage(inputs: AdvantageInputs, *, cfg: DPPOAdvantageConfig) -> Tensor:
    """DPPO (reconstructed; module docstring): GRPO's advantages, low-signal rollouts kept with
    probability ``q`` and reweighted by ``1 / q``::

        A_i = GRPO advantage
        q_i = keep_prob if |A_i| < threshold * max_j |A_j| else 1
        A'_i = A_i / q_i with probability q_i, else 0 (pruned: no forward or backward pass)

    Returns:
        ``[N]`` advantages.
    """
    adv = grpo_advantage(inputs, cfg=cfg)
    q = keep_probabilities(adv, cfg.threshold, cfg.keep_prob)
    gen = torch.Generator().manual_seed(_batch_seed(cfg.seed, inputs))
    return pruned(adv, q, gen)
