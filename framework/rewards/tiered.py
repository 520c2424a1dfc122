"""SSL: Sweet Spot Learning (arXiv 2601.22491), reconstructed: a tiered answer reward.

A binary reward cannot tell a near miss from a wild guess. SSL cuts a continuous quality measure
of each rollout against the ground truth into ``K`` tiers and pays each tier a progressively
amplified reward, which keeps the order of solutions and drops small, noisy differences.

The method section could not be read from here; the abstract and summaries give the principle,
``K = 4`` as the best tier count, quartile zones for matching tasks and Gaussian zones for spatial
ones. Our choices (``../shared/METHODS-2.md`` item 12), hence "reconstructed":

- quality: the answer's token F1 against the gold answers (``quality=f1``), 0 without an answer;
- tiers: ``K`` equal zones of quality, tier ``k = min(floor(q K), K - 1)`` (quartiles for ``K = 4``:
  cuts at 0.25, 0.5, 0.75, a quality on a cut belongs to the tier above);
- the amplified reward of tier ``k``: ``(2^k - 1) / (2^(K-1) - 1)`` (``[0, 1/7, 3/7, 1]`` for
  ``K = 4``);
- with ``exact_top`` (default), only an exact-match answer reaches the top tier; a non-exact answer
  of top quality gets the tier below, so the reward's maximum still means a right answer;
- a rollout with a format error or over its budget gets 0. The summaries' scalar weight that
  mixes the tier signal with the verifiable reward is not used (one reward, in ``[0, 1]``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from framework.config import ComponentConfig, Problem, check_range, option
from framework.registry.kinds import REWARDS
from framework.rewards.common import answer_scores, valid_mask
from framework.types import RewardInputs


@dataclass
class SweetSpotRewardConfig(ComponentConfig):
    paper: ClassVar[str] = "SSL: Sweet Spot Learning, arXiv 2601.22491"
    fidelity: ClassVar[str] = "reconstructed"

    tiers: int = option(
        4,
        "K, the number of equal quality tiers of answer F1 (paper: 4; equal "
        "zones and F1 as quality are a choice)",
    )
    exact_top: bool = option(True, "only an exact-match answer reaches the top tier (choice)")

    def problems(self) -> list[Problem]:
        return check_range(self.tiers, "tiers", low=2, fix="use at least 2 tiers (2 is binary)")

    def verdict_metric(self) -> str | None:
        return "em"  # the top tier is an exact match (with exact_top); accuracy stays exact match


def tier_rewards(quality: Tensor, tiers: int, top_allowed: Tensor | None = None) -> Tensor:
    """``[N]``: each quality's tier ``k = min(floor(q K), K - 1)`` paid ``(2^k - 1) / (2^(K-1) -
    1)``; where ``top_allowed`` is False the top tier is lowered to the one below.

    Args:
        quality: ``[N]`` in ``[0, 1]``.
        tiers: ``K >= 2``.
        top_allowed: ``[N]`` bool, or None to allow the top tier everywhere.
    """
    k = torch.clamp(torch.floor(quality * tiers), 0, tiers - 1)
    if top_allowed is not None:
        k = torch.where(top_allowed | (k < tiers - 1), k, k - 1)
    return (torch.pow(2.0, k) - 1) / (2.0 ** (tiers - 1) - 1)


@REWARDS.register("sweet_spot", config=SweetSpotRewardConfig)
def sweet_spot_reward(inputs: RewardInputs, *, cfg: SweetSpotRewardConfig) -> Tensor:
    """SSL's tiered reward (reconstructed; module docstring): the answer's token F1 cut into ``K``
    equal tiers, each paid an amplified reward::

        q_i = F1(answer_i, golds); k_i = min(floor(q_i K), K - 1)
        k_i = K - 2 where k_i = K - 1 and the answer is not an exact match   (exact_top)
        r_i = (2^k_i - 1) / (2^(K-1) - 1), 0 on a format error or budget overrun

    Args:
        inputs: completions, ``golden_answers`` column, optional statuses.
        cfg: tiers and the top tier's rule.

    Returns:
        ``[N]`` rewards in [0, 1].
    """
    quality = answer_scores(inputs, "f1", "sweet_spot")
    exact = answer_scores(inputs, "em", "sweet_spot") > 0 if cfg.exact_top else None
    return tier_rewards(quality, cfg.tiers, exact) * valid_mask(inputs)
