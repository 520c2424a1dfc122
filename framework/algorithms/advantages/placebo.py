"""Control arms for RL comparisons: what a gain must beat before it is credited to RL.

* ``placebo``: GRPO's advantage of rewards shuffled across the whole batch. Every rollout still
  gets the same spread of advantages and the same number of updates, but the advantage no longer
  says anything about the rollout it is applied to: a placebo arm that "gains" shows that the gain
  comes from the extra training itself (more updates of the cold-start policy, the sampler's
  questions), not from the reward.
* ``raft``: rejection-sampling fine-tuning (RAFT, Dong et al. 2023, arXiv 2304.06767): advantage 1
  on rollouts whose reward reaches ``threshold`` (the correct ones) and 0 on the others, with no
  baseline. With an on-policy clipped loss (the ratio is 1) its gradient is exactly the
  log-likelihood gradient of the accepted rollouts' tokens: supervised fine-tuning on the policy's
  own correct rollouts, with the same rollout budget as the RL arms. A gain of RL over RAFT is a
  gain of the group-relative signal (pushing wrong rollouts down), not of more training on good
  trajectories.

Choices the papers leave open, made here: the placebo permutes over the batch (not within a group,
which would leave GRPO's group statistics and so its advantages' multiset per group unchanged for
binary rewards, but would still couple them to the question); its permutation comes from torch's
global generator, which every run seeds from ``seed`` and whose state the step checkpoint keeps.
RAFT accepts every rollout at or above the threshold rather than the best of each group (the
search-agent reward is binary, so "best" is "any correct").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from framework.algorithms.advantages.grpo import GRPOAdvantageConfig, grpo_advantage
from framework.registry.kinds import ADVANTAGES
from framework.types import AdvantageInputs


@dataclass
class PlaceboAdvantageConfig(GRPOAdvantageConfig):
    """GRPO's settings; the rewards are permuted across the batch first."""


def shuffled_rewards(rewards: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """``rewards [N]`` in a random order (a permutation of the whole batch)."""
    perm = torch.randperm(len(rewards), generator=generator, device=rewards.device)
    return rewards[perm]


@ADVANTAGES.register("placebo", config=PlaceboAdvantageConfig)
def placebo_advantage(inputs: AdvantageInputs, *, cfg: PlaceboAdvantageConfig) -> Tensor:
    """GRPO's advantage of the batch's rewards after a random permutation across the batch.

    Args:
        inputs: ``rewards [N]``, ``group_index [N]``.
        cfg: GRPO's options.

    Returns:
        ``[N]`` advantages: each group's sum to 0, as GRPO's, but unrelated to its rollouts.
    """
    shuffled = shuffled_rewards(inputs.rewards)
    return grpo_advantage(
        AdvantageInputs(rewards=shuffled, group_index=inputs.group_index),
        cfg=GRPOAdvantageConfig(
            name="grpo",
            scale_by_std=cfg.scale_by_std,
            epsilon=cfg.epsilon,
            unbiased_std=cfg.unbiased_std,
        ),
    )
