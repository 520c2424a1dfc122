"""Batch types passed to components; one per component kind, fields optional where a kind allows.

Shapes: ``N`` rollouts in the batch (all groups concatenated), ``L`` padded response length.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor


@dataclass
class AdvantageInputs:
    """Inputs of an advantage estimator.

    Attributes:
        rewards: ``[N]`` float scalar reward per rollout.
        group_index: ``[N]`` int; rollouts with equal values belong to one group (one question).
            Values need not be contiguous and groups may differ in size.
        token_mask: ``[N, L]`` optional, 1 on trained tokens (for token-level estimators).
        extras: optional per-rollout tensors for estimators that need more (step rewards, ...).
    """

    rewards: Tensor
    group_index: Tensor
    token_mask: Tensor | None = None
    extras: Mapping[str, Tensor] = field(default_factory=dict)


@dataclass
class PolicyLossInputs:
    """Inputs of a policy loss.

    Attributes:
        logprobs: ``[N, L]`` log-probabilities of the sampled tokens under the current policy.
        old_logprobs: ``[N, L]`` the same under the behaviour policy that generated them.
        advantages: ``[N]`` per rollout (broadcast to its tokens) or ``[N, L]`` per token.
        token_mask: ``[N, L]`` 1 on tokens the policy generated (tool responses and padding are 0).
        sample_mask: ``[N]`` optional; 0 drops a whole rollout from the loss (over-budget rollouts)
            without touching the group statistics its reward took part in.
    """

    logprobs: Tensor
    old_logprobs: Tensor
    advantages: Tensor
    token_mask: Tensor
    sample_mask: Tensor | None = None

    def effective_mask(self) -> Tensor:
        """``[N, L]`` bool: token mask with dropped samples removed."""
        mask = self.token_mask.bool()
        if self.sample_mask is not None:
            mask = mask & self.sample_mask.bool().unsqueeze(-1)
        return mask

    def token_advantages(self) -> Tensor:
        """``[N, L]`` advantages broadcast to tokens."""
        adv = self.advantages
        return adv.unsqueeze(-1).expand_as(self.logprobs) if adv.dim() == 1 else adv


@dataclass
class LossOutput:
    """A scalar loss to minimise and detached diagnostics (``clip_frac``, ``approx_kl``, ...)."""

    loss: Tensor
    metrics: dict[str, Tensor] = field(default_factory=dict)


@dataclass
class RewardInputs:
    """Inputs of a reward function: the whole batch, so rewards can use group statistics.

    Attributes:
        group_index: ``[N]`` int, as in :class:`AdvantageInputs`.
        completions: the model-generated text of each rollout.
        columns: dataset columns aligned with the rollouts, e.g. ``golden_answers``
            (``list[list[str]]``) and ``entities`` (``list[list[list[str]]]``: per entity its
            surface form followed by aliases).
        status: per-rollout outcome of the rollout engine: ``"ok"``, ``"format_error"`` or
            ``"over_budget"``; ``None`` means all ok.
        think_texts: the concatenated ``<think>`` contents per rollout; ``None`` lets the reward
            extract them from ``completions``.
    """

    group_index: Tensor
    completions: Sequence[str]
    columns: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    status: Sequence[str] | None = None
    think_texts: Sequence[str] | None = None

    def __len__(self) -> int:
        return len(self.completions)
