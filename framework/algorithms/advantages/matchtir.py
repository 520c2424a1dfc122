"""MatchTIR: a trajectory advantage plus a turn advantage of discounted turn rewards (arXiv 2601.10712).

Reads ``extras["turn_rewards"]`` (``reward=matchtir``); the turn layout is
:mod:`framework.algorithms.advantages.turns`'.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from framework.algorithms.advantages.grpo import GRPOAdvantageConfig, grpo_advantage
from framework.algorithms.advantages.turns import (
    discounted_turn_returns,
    normalize_over,
    turn_table,
    turn_token_values,
)
from framework.config import ComponentConfig, Problem, check_range, option
from framework.registry.kinds import ADVANTAGES
from framework.types import AdvantageInputs


# -- matchtir ---------------------------------------------------------------------------------------
@dataclass
class MatchTIRAdvantageConfig(ComponentConfig):
    gamma: float = option(0.9, "turn discount of the turn-level return (authors' code 0.9)")
    epsilon: float = option(1e-6, "added to every std")
    unbiased_std: bool = option(True, "Bessel-corrected stds")

    def problems(self) -> list[Problem]:
        out = check_range(self.gamma, "gamma", low=0.0, high=1.0, fix="a discount in [0, 1]")
        out += check_range(self.epsilon, "epsilon", low=0.0, fix="use a small positive epsilon")
        return out


@ADVANTAGES.register("matchtir", config=MatchTIRAdvantageConfig)
def matchtir_advantage(inputs: AdvantageInputs, *, cfg: MatchTIRAdvantageConfig) -> Tensor:
    """MatchTIR's dual-level advantage: the mean of the trajectory's GRPO advantage and its turn's.

    MatchTIR (Qu et al. 2026, arXiv 2601.10712), with ``r_(i,k)`` the turn rewards
    (``extras["turn_rewards"]``, from ``reward=matchtir``) and ``R_i`` the rollout's reward (for
    ``reward=matchtir`` the sum of its turn rewards, as in the authors' code)::

        A_traj_i = (R_i - mean_g R) / (std_g R + eps)
        G_(i,k) = Σ_(j >= k) γ^(j-k) r_(i,j)
        A_turn_(i,k) = (G_(i,k) - mean G_(.,k)) / (std G_(.,k) + eps)   over the group's rollouts with a turn k
        A_(i,k) = (A_traj_i + A_turn_(i,k)) / 2                          on every token generated in turn k

    ``γ = 0.9`` and the per-turn-index normalisation follow the authors' released code
    (``compute_grpo_outcome_advantage`` of their verl fork), which this matches on a worked example
    (``tests/unit/algorithms/advantages/test_turn_advantages.py``). One difference: a turn index
    that only one rollout of the group reaches gets ``A_turn = 0`` here (no baseline), the raw return there.
    With all turn rewards 0, ``A = A_traj / 2``.

    Args:
        inputs: ``rewards [N]``, ``group_index [N]``, ``token_mask``/``turn_index [N, L]``,
            ``turns``, ``extras["turn_rewards"] [N, T]``.
        cfg: discount and normalisation.

    Returns:
        ``[N, L]`` advantages, 0 on tool responses and padding.
    """
    source = "use a turn-level reward (reward=matchtir) that returns them in a RewardOutput"
    _, rewards, valid = turn_table(inputs, "turn_rewards", "matchtir", source)
    returns = discounted_turn_returns(rewards, valid, cfg.gamma)
    group = torch.unique(inputs.group_index, return_inverse=True)[1]  # [N], 0..K-1
    keys = group.unsqueeze(-1) * rewards.shape[1] + torch.arange(rewards.shape[1])  # (group, k)
    a_turn = normalize_over(returns, valid, keys, epsilon=cfg.epsilon, unbiased=cfg.unbiased_std)
    grpo = GRPOAdvantageConfig(name="grpo", epsilon=cfg.epsilon, unbiased_std=cfg.unbiased_std)
    a_traj = grpo_advantage(inputs, cfg=grpo).to(a_turn)  # [N]
    fused = (a_traj.unsqueeze(-1) + a_turn) / 2  # [N, T]
    return turn_token_values(torch.where(valid, fused, torch.zeros_like(fused)), inputs)
