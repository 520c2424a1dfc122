"""IGPO: a turn's reward is the gain in the policy's belief in the gold answer (arXiv 2510.14967).

Reads ``extras["answer_probs"]`` (:func:`framework.rl.answer_probs.answer_probs`); the turn layout
is :mod:`framework.algorithms.advantages.turns`'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from framework.algorithms.advantages.turns import (
    PROBE_PREFIX,
    discounted_turn_returns,
    normalize_over,
    turn_table,
    turn_token_values,
)
from framework.config import ComponentConfig, Problem, check_range, option
from framework.registry.kinds import ADVANTAGES
from framework.types import AdvantageInputs


def information_gain_rewards(probs: Tensor, outcome: Tensor, counts: Tensor) -> Tensor:
    """IGPO's turn rewards: ``r_k = p_(k+1) - p_k`` for every turn but the last, which gets the
    outcome reward.

    Args:
        probs: ``[N, T]``, ``p_k`` = the policy's probability of the gold answer before turn ``k``.
        outcome: ``[N]`` the rollout's reward.
        counts: ``[N]`` turns per rollout.

    Returns:
        ``[N, T]``, 0 past each rollout's turns.
    """
    n, width = probs.shape
    gain = torch.zeros_like(probs)
    gain[:, :-1] = probs[:, 1:] - probs[:, :-1]
    cols = torch.arange(width).unsqueeze(0)  # [1, T]
    last = (counts - 1).unsqueeze(-1)  # [N, 1]
    out = torch.where(cols == last, outcome.to(probs).unsqueeze(-1).expand(n, width), gain)
    return torch.where(cols < counts.unsqueeze(-1), out, torch.zeros_like(out))


# -- igpo -------------------------------------------------------------------------------------------
@dataclass
class IGPOAdvantageConfig(ComponentConfig):
    #: ``extras["answer_probs"]``: the pre-update policy's gold-answer probability before each
    #: turn, computed by the ``answer_probs`` input provider (framework/rl/answer_probs.py)
    #: with this config's ``probe_batch_size`` and ``probe_prefix``
    requires: ClassVar[tuple[str, ...]] = ("answer_probs",)

    gamma: float = option(1.0, "turn discount of the cumulative advantage (authors' config: 1.0)")
    epsilon: float = option(1e-6, "added to the group std")
    unbiased_std: bool = option(True, "Bessel-corrected group std")
    probe_batch_size: int = option(8, "belief probes (prefix + gold answer) per forward pass")
    probe_prefix: str = option(PROBE_PREFIX, "scaffold between a rollout prefix and the answer")

    def problems(self) -> list[Problem]:
        out = check_range(self.gamma, "gamma", low=0.0, high=1.0, fix="the paper discounts by <= 1")
        out += check_range(self.epsilon, "epsilon", low=0.0, fix="use a small positive epsilon")
        out += check_range(self.probe_batch_size, "probe_batch_size", low=1)
        return out


@ADVANTAGES.register("igpo", config=IGPOAdvantageConfig)
def igpo_advantage(inputs: AdvantageInputs, *, cfg: IGPOAdvantageConfig) -> Tensor:
    """IGPO: information-gain turn rewards, z-normalised over the group's turns, summed forward.

    Information Gain-based Policy Optimization (Wang et al. 2025, arXiv 2510.14967), with ``p_k``
    the policy's teacher-forced probability of the gold answer before turn ``k`` (geometric mean
    over the answer's tokens, ``extras["answer_probs"]``) and ``T_i`` the rollout's turns::

        r_(i,k) = p_(i,k+1) - p_(i,k)   for k < T_i - 1;   r_(i,T_i-1) = R_i (the outcome reward)
        r~_(i,k) = (r_(i,k) - mean_g r) / (std_g r + eps)   over every turn of every rollout of g
        A_(i,k) = Σ_(j >= k) γ^(j-k) r~_(i,j)                on every token generated in turn k

    Choices (METHODS.md leaves them open): ``γ = 1`` as in the authors' released training config
    (``algorithm.gamma: 1.0``); the outcome ``R_i`` is whatever the configured reward gives
    (``algorithm=igpo`` uses ``reward=outcome`` with the paper's F1; the authors' code also gives a
    malformed answer -2, ours the reward's 0); a rollout's last turn gets the outcome even when it
    ended without answering, as in the authors' code. The normalisation follows the paper (the
    released code subtracts a per-position group mean of the token returns instead). The turn
    rewards match the released code's bookkeeping
    (``tests/unit/algorithms/advantages/test_turn_advantages.py``) and its probabilities
    (``exp(mean log-prob)`` of the answer tokens behind the same scaffold;
    ``tests/unit/training/test_turn_level_step.py`` checks them against a direct forward pass).
    A group whose turn rewards are all equal gets 0.

    Args:
        inputs: ``rewards [N]``, ``group_index [N]``, ``token_mask``/``turn_index [N, L]``,
            ``turns``, ``extras["answer_probs"] [N, T]``.
        cfg: discount and normalisation.

    Returns:
        ``[N, L]`` advantages, 0 on tool responses and padding.
    """
    source = (
        "the training step fills it through the answer_probs input provider, which igpo's config "
        "requires (framework.rl.answer_probs); outside the step, call answer_probs()"
    )
    return belief_gain_advantage(inputs, "answer_probs", "igpo", source, cfg)


def belief_gain_advantage(
    inputs: AdvantageInputs, key: str, who: str, source: str, cfg: Any
) -> Tensor:
    """IGPO's credit from a belief before each turn (``inputs.extras[key]`` ``[N, T]``, which
    ``source`` says how to provide): the belief's gains as turn rewards, the outcome on the last
    turn, z-normalised over each group's turns and summed forward with ``cfg.gamma``
    (``cfg.epsilon``, ``cfg.unbiased_std``); ``[N, L]`` on every token generated in each turn."""
    counts, belief, valid = turn_table(inputs, key, who, source)
    rewards = information_gain_rewards(belief, inputs.rewards.to(belief), counts)
    keys = inputs.group_index.unsqueeze(-1).expand_as(rewards)
    normed = normalize_over(rewards, valid, keys, epsilon=cfg.epsilon, unbiased=cfg.unbiased_std)
    return turn_token_values(discounted_turn_returns(normed, valid, cfg.gamma), inputs)
