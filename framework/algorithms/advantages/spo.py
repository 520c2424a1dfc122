"""SPO (arXiv 2505.23564): credit from Monte-Carlo values at turn boundaries, without a critic.

SPO and HiPER (:mod:`framework.algorithms.advantages.hiper`) read ``boundary_values`` ``[N, W]``:
column ``k`` of row ``i`` is ``V(s_k)``, the value of the state of rollout ``i`` after its first
``k`` turns (and their tool responses): column 0 the prompt (the mean reward of the rollout's
group), column ``T_i`` the rollout's own reward, columns between the mean reward of continuations
rolled out from that boundary, and columns past ``T_i`` the rollout's reward again. The ``mc_values`` augmenter (:mod:`framework.rl.augmenters`) makes them.

SPO, partial (``../shared/METHODS-2.md`` item 1): the chain variant with segments = turns, which
removes the cutpoint threshold; the advantage of turn ``k`` (1-based) is ``V(s_k) - V(s_{k-1})`` on
every generated token of that turn (the paper's probability mask, advantages only on low-probability
tokens, is not applied: with turn segments METHODS-2 makes whole turns the default). Our choices:
``V(s_0)`` is the group's mean reward (the group's rollouts are Monte-Carlo samples from the
prompt), the number of continuations per boundary is the augmenter's ``continuations`` (4; the
paper's value was not recovered), and a boundary's continuations are scored by the step's reward.
The advantages of a rollout telescope: their sum is ``r_i - mean_g r`` (Dr. GRPO's advantage).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.advantages.turns import turn_counts, turn_token_values
from framework.config import ComponentConfig
from framework.registry import ADVANTAGES
from framework.types import AdvantageInputs

SOURCE = "set augment=mc_values (the spo and hiper bundles do)"


def boundary_values(inputs: AdvantageInputs, who: str) -> tuple[Tensor, Tensor]:
    """``(values [N, W], turn counts [N])`` with ``W`` at least the most turns + 1.

    Raises:
        ValueError: the ``boundary_values`` extra is missing or too narrow.
    """
    counts = turn_counts(inputs, who)
    need = int(counts.max()) + 1 if counts.numel() else 1
    v = inputs.extras.get("boundary_values")
    if v is None or v.dim() != 2 or v.shape[0] != counts.numel() or v.shape[1] < need:
        got = "none" if v is None else f"shape {tuple(v.shape)}"
        raise ValueError(
            f"[advantage.{who}] got extras['boundary_values'] {got}; expected [N, W] = "
            f"({counts.numel()}, >= {need}). Fix: {SOURCE}."
        )
    return v.to(torch.get_default_dtype()), counts


def spo_turn_advantages(values: Tensor) -> Tensor:
    """``[N, W-1]``: column ``k`` is ``V(s_{k+1}) - V(s_k)``, the advantage of (0-based) turn ``k``."""
    return values[:, 1:] - values[:, :-1]


@dataclass
class SPOAdvantageConfig(ComponentConfig):
    requires: ClassVar[tuple[str, ...]] = ("boundary_values",)
    paper: ClassVar[str] = "SPO: Segment Policy Optimization, arXiv 2505.23564"
    fidelity: ClassVar[str] = "partial"


@ADVANTAGES.register("spo", config=SPOAdvantageConfig)
def spo_advantage(inputs: AdvantageInputs, *, cfg: SPOAdvantageConfig) -> Tensor:
    """SPO-chain with turn segments: each turn's tokens get ``V(s_k) - V(s_{k-1})`` (module
    docstring); ``[N, L]``."""
    values, counts = boundary_values(inputs, "spo")
    per_turn = spo_turn_advantages(values)  # [N, W-1]
    valid = torch.arange(per_turn.shape[1]).unsqueeze(0) < counts.unsqueeze(-1)
    return turn_token_values(torch.where(valid, per_turn, torch.zeros_like(per_turn)), inputs)
