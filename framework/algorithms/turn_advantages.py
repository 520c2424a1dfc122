"""Turn-level advantage estimators: a reward per model turn becomes an advantage per turn.

A turn-level estimator reads per-turn values from :attr:`~framework.types.AdvantageInputs.extras`
(``[N, T]``, column ``k`` = model turn ``k``, 0-based, in the order of ``inputs.turns``; a rollout
has ``len(inputs.turns[i])`` turns and the columns past them are ignored), computes one advantage
per turn, and gives it to every token the policy generated in that turn (``inputs.turn_index``,
``inputs.token_mask``): the result is ``[N, L]``, 0 on tool responses and padding.

* ``igpo`` reads ``extras["answer_probs"]``, the policy's probability of the gold answer before each
  turn, which the training step computes because the config ``requires`` it
  (:func:`framework.rl.answer_probs.answer_probs`).
* ``matchtir`` reads ``extras["turn_rewards"]``, which a turn-level reward returns in a
  :class:`~framework.types.RewardOutput` (``reward=matchtir``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor

from framework.algorithms.advantages import GRPOAdvantageConfig, grpo_advantage
from framework.algorithms.group import group_mean, group_std
from framework.config import ComponentConfig, Problem, check_range
from framework.registry.kinds import ADVANTAGES
from framework.types import AdvantageInputs

#: the authors' answer scaffold for IGPO's belief probes (their ``pseudo_resps_with_gt``, our tags)
PROBE_PREFIX = "<think>\nNow there's enough information to answer\n</think>\n<answer>\n"


# -- pure turn math ---------------------------------------------------------------------------------
def turn_counts(inputs: AdvantageInputs, who: str) -> Tensor:
    """``[N]`` long: the number of model turns of each rollout (``len(inputs.turns[i])``).

    Raises:
        ValueError: the inputs carry no turn structure.
    """
    n = len(inputs.rewards)
    if len(inputs.turns) != n or inputs.turn_index is None or inputs.token_mask is None:
        raise ValueError(
            f"[advantage.{who}] got inputs without the turn structure (turns, turn_index, "
            f"token_mask) of all {n} rollouts; expected the trainer's AdvantageInputs. Fix: build "
            "them with RolloutBatch.advantage_inputs() (framework.rl.batch)."
        )
    return torch.tensor([len(t) for t in inputs.turns], dtype=torch.long)


def turn_extra(inputs: AdvantageInputs, key: str, who: str, source: str) -> Tensor:
    """``inputs.extras[key]`` as ``[N, T]`` float, ``T`` at least the most turns of any rollout.

    Raises:
        ValueError: the extra is missing or has the wrong shape, saying what provides it.
    """
    counts = turn_counts(inputs, who)
    need = max(int(counts.max()) if counts.numel() else 0, 1)
    value = inputs.extras.get(key)
    if value is None or value.dim() != 2 or value.shape[0] != counts.numel():
        got = "none" if value is None else f"shape {tuple(value.shape)}"
        raise ValueError(
            f"[advantage.{who}] got extras[{key!r}] {got}; expected [N, T] = "
            f"({counts.numel()}, >= {need}). Fix: {source}."
        )
    if value.shape[1] < need:
        value = torch.nn.functional.pad(value, (0, need - value.shape[1]))
    return value[:, :need].to(torch.get_default_dtype())


def turn_valid(counts: Tensor, width: int) -> Tensor:
    """``[N, T]`` bool: column ``k`` of row ``i`` is one of rollout ``i``'s ``counts[i]`` turns."""
    return torch.arange(width).unsqueeze(0) < counts.unsqueeze(-1)


def discounted_turn_returns(rewards: Tensor, valid: Tensor, gamma: float) -> Tensor:
    """``R_k = Σ_{j >= k} γ^(j-k) r_j`` over each rollout's own turns; 0 past them.

    Args:
        rewards: ``[N, T]`` turn rewards.
        valid: ``[N, T]`` bool, each row's turns (a prefix of the columns).
        gamma: the discount.

    Returns:
        ``[N, T]`` returns.
    """
    out = torch.zeros_like(rewards)
    acc = rewards.new_zeros(rewards.shape[0])  # [N]
    for k in reversed(range(rewards.shape[1])):
        acc = torch.where(valid[:, k], rewards[:, k] + gamma * acc, torch.zeros_like(acc))
        out[:, k] = acc
    return out


def normalize_over(
    values: Tensor, valid: Tensor, keys: Tensor, *, epsilon: float, unbiased: bool
) -> Tensor:
    """``(v - mean_s) / (std_s + eps)`` over the valid entries that share a key ``s``; 0 where a
    set's std is 0 (a set of one, or of equal values) and on invalid entries.

    Args:
        values: ``[N, T]``.
        valid: ``[N, T]`` bool.
        keys: ``[N, T]`` int, the set of each entry.
        epsilon: added to the std.
        unbiased: Bessel-corrected std.

    Returns:
        ``[N, T]``.
    """
    v, s = values[valid], keys[valid]  # [M], [M]
    out = torch.zeros_like(values)
    if v.numel() == 0:
        return out
    centred = v - group_mean(v, s)
    std = group_std(v, s, unbiased=unbiased)
    out[valid] = torch.where(std > 0, centred / (std + epsilon), torch.zeros_like(centred))
    return out


def turn_token_values(values: Tensor, inputs: AdvantageInputs) -> Tensor:
    """``[N, L]``: each generated token gets its turn's entry of ``values [N, T]``; 0 on tool
    responses, padding and tokens outside any turn."""
    index, mask = inputs.turn_index, inputs.token_mask  # [N, L], -1 on padding; [N, L]
    if index is None or mask is None:
        raise ValueError("turn_token_values() needs inputs with turn_index and token_mask")
    picked = values.gather(1, index.clamp(min=0, max=values.shape[1] - 1))  # [N, L]
    keep = mask.bool() & (index >= 0) & (index < values.shape[1])
    return torch.where(keep, picked, torch.zeros_like(picked))


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

    gamma: float = field(
        default=1.0,
        metadata={"help": "turn discount of the cumulative advantage (authors' config: 1.0)"},
    )
    epsilon: float = field(default=1e-6, metadata={"help": "added to the group std"})
    unbiased_std: bool = field(default=True, metadata={"help": "Bessel-corrected group std"})
    probe_batch_size: int = field(
        default=8, metadata={"help": "belief probes (prefix + gold answer) per forward pass"}
    )
    probe_prefix: str = field(
        default=PROBE_PREFIX, metadata={"help": "scaffold between a rollout prefix and the answer"}
    )

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
    rewards match the released code's bookkeeping (``tests/unit/algorithms/test_turn_advantages.py``)
    and its probabilities (``exp(mean log-prob)`` of the answer tokens behind the same scaffold;
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
    counts = turn_counts(inputs, who)
    belief = turn_extra(inputs, key, who, source)
    valid = turn_valid(counts, belief.shape[1])
    rewards = information_gain_rewards(belief, inputs.rewards.to(belief), counts)
    keys = inputs.group_index.unsqueeze(-1).expand_as(rewards)
    normed = normalize_over(rewards, valid, keys, epsilon=cfg.epsilon, unbiased=cfg.unbiased_std)
    return turn_token_values(discounted_turn_returns(normed, valid, cfg.gamma), inputs)


# -- matchtir ---------------------------------------------------------------------------------------
@dataclass
class MatchTIRAdvantageConfig(ComponentConfig):
    gamma: float = field(
        default=0.9, metadata={"help": "turn discount of the turn-level return (authors' code 0.9)"}
    )
    epsilon: float = field(default=1e-6, metadata={"help": "added to every std"})
    unbiased_std: bool = field(default=True, metadata={"help": "Bessel-corrected stds"})

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
    (``tests/unit/algorithms/test_turn_advantages.py``). One difference: a turn index that only
    one rollout of the group reaches gets ``A_turn = 0`` here (no baseline), the raw return there.
    With all turn rewards 0, ``A = A_traj / 2``.

    Args:
        inputs: ``rewards [N]``, ``group_index [N]``, ``token_mask``/``turn_index [N, L]``,
            ``turns``, ``extras["turn_rewards"] [N, T]``.
        cfg: discount and normalisation.

    Returns:
        ``[N, L]`` advantages, 0 on tool responses and padding.
    """
    counts = turn_counts(inputs, "matchtir")
    rewards = turn_extra(
        inputs,
        "turn_rewards",
        "matchtir",
        "use a turn-level reward (reward=matchtir) that returns them in a RewardOutput",
    )
    valid = turn_valid(counts, rewards.shape[1])
    returns = discounted_turn_returns(rewards, valid, cfg.gamma)
    group = torch.unique(inputs.group_index, return_inverse=True)[1]  # [N], 0..K-1
    keys = group.unsqueeze(-1) * rewards.shape[1] + torch.arange(rewards.shape[1])  # (group, k)
    a_turn = normalize_over(returns, valid, keys, epsilon=cfg.epsilon, unbiased=cfg.unbiased_std)
    grpo = GRPOAdvantageConfig(name="grpo", epsilon=cfg.epsilon, unbiased_std=cfg.unbiased_std)
    a_traj = grpo_advantage(inputs, cfg=grpo).to(a_turn)  # [N]
    fused = (a_traj.unsqueeze(-1) + a_turn) / 2  # [N, T]
    return turn_token_values(torch.where(valid, fused, torch.zeros_like(fused)), inputs)
