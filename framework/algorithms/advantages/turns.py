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

import torch
from torch import Tensor

from framework.algorithms.stats.group import group_mean, group_std
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


def turn_table(
    inputs: AdvantageInputs, key: str, who: str, source: str
) -> tuple[Tensor, Tensor, Tensor]:
    """What a turn-level estimator reads: ``(counts [N], values [N, T], valid [N, T])``, from
    :func:`turn_counts`, :func:`turn_extra` (``inputs.extras[key]``; ``source`` says how to
    provide it) and :func:`turn_valid`."""
    counts = turn_counts(inputs, who)
    values = turn_extra(inputs, key, who, source)
    return counts, values, turn_valid(counts, values.shape[1])


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
