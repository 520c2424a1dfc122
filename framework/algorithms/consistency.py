"""COPO: Consistency-Aware Policy Optimization (arXiv 2508.04138), reconstructed.

GRPO's advantage is 0 for every rollout of a group whose rollouts all agree (all right or all
wrong). COPO adds a *global* signal per question, from how consistently its group succeeds,
standardised over the questions of the batch, and blends it with the group-relative (local)
advantage by the entropy of the group's answers: a group that disagrees learns from its own
rollouts, a unanimous one from where it stands among the batch's questions.

The paper's method section and code (github.com/hijih/copo-code) could not be read from here; the
abstract and a reviewer's summary ("compute prompt returns, standardise across the mini-batch, mix
with an entropy gate") fix the structure. Every choice below is ours (``../shared/METHODS-2.md``
item 8), so the component is labelled reconstructed:

- the question's global reward is its group's mean reward (for a binary outcome reward, the share
  of correct rollouts ``p̂_q``), standardised over the batch's questions with the population std:
  ``A^g_q = (p̂_q - mean_q p̂) / (std_q p̂ + eps)``, 0 when every question has the same ``p̂``;
- the local advantage is GRPO's with the population (biased) group std;
- the weight is the entropy of the group's final answers (normalised answer strings; a rollout
  without an answer counts as the answer ``""``) over ``log G``: ``w_q = H_q / log G``, 0 for a
  group of one; ``A_i = w_q A^local_i + (1 - w_q) A^g_q``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.group import dense_index, group_center, group_std
from framework.config import ComponentConfig, Problem, check_range
from framework.registry import ADVANTAGES
from framework.types import AdvantageInputs


@dataclass
class COPOAdvantageConfig(ComponentConfig):
    requires: ClassVar[tuple[str, ...]] = ("answers",)
    paper: ClassVar[str] = "COPO: Consistency-Aware Policy Optimization, arXiv 2508.04138"
    fidelity: ClassVar[str] = "reconstructed"

    epsilon: float = field(default=1e-6, metadata={"help": "added to each std before dividing"})

    def problems(self) -> list[Problem]:
        return check_range(self.epsilon, "epsilon", low=0.0, fix="use a small positive epsilon")


def answer_entropy(answers: Sequence[str], group_index: Tensor) -> Tensor:
    """``[N]``: the entropy of each rollout's group's answers over ``log G`` (in ``[0, 1]``; 0 for a
    group of one)."""
    inv, k = dense_index(group_index)
    by_group: list[list[str]] = [[] for _ in range(k)]
    for g, a in zip(inv.tolist(), answers, strict=True):
        by_group[g].append(a)
    per_group = []
    for members in by_group:
        n = len(members)
        if n < 2:
            per_group.append(0.0)
            continue
        h = -sum(c / n * math.log(c / n) for c in Counter(members).values())
        per_group.append(h / math.log(n))
    return torch.tensor(per_group, dtype=torch.get_default_dtype())[inv]


def consistency_advantage(
    rewards: Tensor, group_index: Tensor, answers: Sequence[str], epsilon: float = 1e-6
) -> Tensor:
    """COPO's blended advantage ``w_q A^local_i + (1 - w_q) A^g_q`` (module docstring).

    Args:
        rewards: ``[N]`` float.
        group_index: ``[N]`` the rollouts' questions.
        answers: per rollout its normalised final answer (``""`` for none).

    Returns:
        ``[N]``.
    """
    r = rewards if rewards.is_floating_point() else rewards.to(torch.get_default_dtype())
    centered = group_center(r, group_index)
    std = group_std(r, group_index, unbiased=False)
    local = torch.where(std > 0, centered / (std + epsilon), torch.zeros_like(r))
    inv, k = dense_index(group_index)
    sums = torch.zeros(k, dtype=r.dtype).index_add_(0, inv, r)
    p = sums / torch.bincount(inv, minlength=k).to(r)  # [K] each question's mean reward
    spread = p.std(unbiased=False) if k > 1 else torch.zeros((), dtype=r.dtype)
    glob = (p - p.mean()) / (spread + epsilon) if spread > 0 else torch.zeros_like(p)
    w = answer_entropy(answers, group_index).to(r)
    return w * local + (1 - w) * glob[inv]


@ADVANTAGES.register("copo", config=COPOAdvantageConfig)
def copo_advantage(inputs: AdvantageInputs, *, cfg: COPOAdvantageConfig) -> Tensor:
    """COPO (reconstructed; module docstring): a unanimous group still gets its question's
    batch-standardised success rate as advantage, a split one mostly GRPO's::

        A^local_i = (r_i - mean_g r) / (std_g r + eps)   population std
        p_q = mean_g r; A^g_q = (p_q - mean_batch p) / (std_batch p + eps)
        w_q = H(answers of q) / log G
        A_i = w_q A^local_i + (1 - w_q) A^g_q

    Args:
        inputs: ``rewards [N]``, ``group_index [N]``, ``extras["answers"]`` (the ``answers`` input:
            per rollout its normalised final answer).
        cfg: the estimator's config.

    Returns:
        ``[N]`` advantages.
    """
    return consistency_advantage(
        inputs.rewards, inputs.group_index, inputs.extras["answers"], cfg.epsilon
    )
