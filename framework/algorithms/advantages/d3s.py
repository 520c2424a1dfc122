"""D³S: Dynamic Dual-Level Down-Sampling (arXiv 2509.22115): train on the rollouts and tokens
that carry the most signal, and relax to everything as training goes on.

Sample level (``advantage=d3s``, the intra-group variant D3S-I): from each group keep the ``k``
rollouts whose advantages have the largest variance, chosen greedily (sorted by advantage, taken
alternately from the two ends); the others get advantage 0, so the planner skips them. Token level
(``loss=d3s``): of each micro-batch's trained tokens keep the top ``ρ`` share by ``|A_t| H_t``
(advantage times the current policy's entropy); the others add nothing to the loss. Both ``k`` (as
a share of the group) and ``ρ`` start at their configured values and rise linearly to 1 at
``relax_until`` of the run (the ``training_progress`` input).

The criteria are the paper's; the sizes and the schedule are not recovered, so they are choices
(``../shared/METHODS-2.md`` item 11): keep half, relax linearly to keep-all by half of training;
hence "partial". Also choices: the token ranking runs per micro-batch (the trainer's unit of a
forward pass), and dropped tokens still count in the loss's normaliser, so micro-batching stays
exact; the cross-group variant is not implemented.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.advantages.grpo import GRPOAdvantageConfig, grpo_advantage
from framework.algorithms.stats.group import dense_index
from framework.config import ComponentConfig, Problem, check_range, option
from framework.registry import ADVANTAGES
from framework.types import AdvantageInputs

PAPER = "D3S: Dynamic Dual-Level Down-Sampling, arXiv 2509.22115"


def relaxed(share: float, progress: float, until: float) -> float:
    """``share`` rising linearly to 1 at ``progress = until`` (1 from there on)."""
    if until <= 0 or progress >= until:
        return 1.0
    return share + (1.0 - share) * progress / until


@dataclass
class D3SScheduleConfig(ComponentConfig):
    """What D3S's two levels (this estimator and ``loss=d3s``) share: a kept share that rises to 1
    by ``relax_until`` of training (:func:`relaxed`), read from the ``training_progress`` input.
    Listed first among a level's bases, so its class attributes win over the other base's."""

    requires: ClassVar[tuple[str, ...]] = ("training_progress",)
    paper: ClassVar[str] = PAPER
    fidelity: ClassVar[str] = "partial"

    relax_until: float = option(0.5, "share of training by which everything is kept (choice)")

    def problems(self) -> list[Problem]:
        out = check_range(self.relax_until, "relax_until", low=0.0, high=1.0)
        return out + super().problems()


@dataclass
class D3SAdvantageConfig(D3SScheduleConfig, GRPOAdvantageConfig):
    keep: float = option(0.5, "share of each group kept at the start (choice)")

    def problems(self) -> list[Problem]:
        out = check_range(self.keep, "keep", low=0.0, high=1.0, low_inclusive=False)
        return out + super().problems()


def max_variance_subset(values: Tensor, k: int) -> list[int]:
    """Indices of ``k`` entries of ``values`` chosen greedily for a large variance: sorted, then
    taken alternately from the top and the bottom."""
    order = values.argsort(descending=True).tolist()
    out: list[int] = []
    lo, hi = 0, len(order) - 1
    while len(out) < min(k, len(order)):
        if len(out) % 2 == 0:
            out.append(order[lo])
            lo += 1
        else:
            out.append(order[hi])
            hi -= 1
    return out


def group_downsample(advantages: Tensor, group_index: Tensor, share: float) -> Tensor:
    """``[N]`` bool: per group the ``ceil(share G)`` rollouts of :func:`max_variance_subset`."""
    inv, k = dense_index(group_index)
    keep = torch.zeros(len(advantages), dtype=torch.bool)
    for g in range(k):
        rows = (inv == g).nonzero().flatten()
        n = max(1, math.ceil(share * len(rows)))
        for j in max_variance_subset(advantages[rows], n):
            keep[rows[j]] = True
    return keep


@ADVANTAGES.register("d3s", config=D3SAdvantageConfig)
def d3s_advantage(inputs: AdvantageInputs, *, cfg: D3SAdvantageConfig) -> Tensor:
    """D3S-I's sample level (module docstring): GRPO's advantages on the max-variance subset of
    each group, 0 on the rest::

        s = keep + (1 - keep) min(progress / relax_until, 1)
        kept = ceil(s G) rollouts of the group, sorted by A, alternately from both ends
        A'_i = A_i if i is kept, else 0

    Returns:
        ``[N]`` advantages.
    """
    adv = grpo_advantage(inputs, cfg=cfg)
    share = relaxed(cfg.keep, float(inputs.extras["training_progress"]), cfg.relax_until)
    keep = group_downsample(adv, inputs.group_index, share).to(adv.device)
    return torch.where(keep, adv, torch.zeros_like(adv))
