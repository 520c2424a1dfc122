"""HiPER's hierarchical advantage (arXiv 2602.16165) on Monte-Carlo boundary values, without a
critic (the values, ``boundary_values``: :mod:`framework.algorithms.advantages.spo`).

HiPER, partial (item 3): the hierarchical advantage estimator (HAE) as in the authors' code, with
two choices forced by the absence of a critic: both value heads are the Monte-Carlo boundary
values (``V_low(s_t) = V_high(s_t) = V(s_t)``), so the termination advantage (their difference) is 0
and not used; and the reward is the outcome at the last turn (per-turn rewards 0 before it). A
segment starts at turn 0 and at every turn whose text says ``<switch>SWITCH</switch>`` (the
``switch_flags`` input); the policy is not trained to write the tag (the paper's format reward and
KEEP penalty are not implemented), so for a policy that never writes it the whole rollout is one
segment. Token assignment: the first turn of a segment gets the high-level advantage (the paper puts
it on the subgoal tokens, which a policy without the format does not write), every other turn its
low-level advantage. ``γ = 1``, ``λ_turn = 1``, ``λ_seg = 0.95`` as in the authors' code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.advantages.spo import boundary_values
from framework.algorithms.advantages.turns import turn_token_values
from framework.config import ComponentConfig, Problem, check_range, option
from framework.registry import ADVANTAGES
from framework.types import AdvantageInputs


def hae_advantages(
    rewards: Tensor,
    v_low: Tensor,
    v_high: Tensor,
    switch: Tensor,
    count: int,
    *,
    gamma: float,
    lambda_turn: float,
    lambda_seg: float,
) -> tuple[Tensor, Tensor, list[int]]:
    """HiPER's hierarchical advantages of one rollout (the authors' ``core_hae``).

    Args:
        rewards: ``[T]`` per-turn rewards.
        v_low: ``[T + 1]`` low-level values of the states before each turn (entry ``T``: after the
            last, 0 when the episode is done).
        v_high: ``[T + 1]`` high-level values, same states.
        switch: ``[T]`` bool, turn starts a new segment (turn 0 always does).
        count: ``T``, the rollout's turns.
        gamma, lambda_turn, lambda_seg: discount and the two GAE parameters.

    Returns:
        ``(A_low [T], A_high [number of segments], segment start turns)``.
    """
    starts = [t for t in range(count) if t == 0 or bool(switch[t])]
    ends = [*starts[1:], count]
    a_low = torch.zeros(count)
    for s, e in zip(starts, ends, strict=True):
        acc = 0.0
        for t in reversed(range(s, e)):
            # the segment's last turn looks at the next segment's high-level value
            nxt = float(v_high[e]) if t == e - 1 else float(v_low[t + 1])
            delta = float(rewards[t]) + gamma * nxt - float(v_low[t])
            acc = delta + (gamma * lambda_turn * acc if t < e - 1 else 0.0)
            a_low[t] = acc
    a_high = torch.zeros(len(starts))
    acc = 0.0
    for j in reversed(range(len(starts))):
        s, e = starts[j], ends[j]
        d = e - s
        ret = sum(gamma**u * float(rewards[s + u]) for u in range(d))
        delta = ret + gamma**d * float(v_high[e]) - float(v_high[s])
        acc = delta + (gamma**d * lambda_seg * acc if j < len(starts) - 1 else 0.0)
        a_high[j] = acc
    return a_low, a_high, starts


@dataclass
class HiPERAdvantageConfig(ComponentConfig):
    requires: ClassVar[tuple[str, ...]] = ("boundary_values", "switch_flags")
    paper: ClassVar[str] = "HiPER: Hierarchical Plan-Execute RL (HAE), arXiv 2602.16165"
    fidelity: ClassVar[str] = "partial"
    gamma: float = option(1.0, "discount (authors' code: 1.0)")
    lambda_turn: float = option(1.0, "low-level GAE lambda (code: 1.0)")
    lambda_seg: float = option(0.95, "segment GAE lambda (code: 0.95)")

    def problems(self) -> list[Problem]:
        out: list[Problem] = []
        for name in ("gamma", "lambda_turn", "lambda_seg"):
            out += check_range(getattr(self, name), name, low=0.0, high=1.0)
        return out


@ADVANTAGES.register("hiper", config=HiPERAdvantageConfig)
def hiper_advantage(inputs: AdvantageInputs, *, cfg: HiPERAdvantageConfig) -> Tensor:
    """HiPER's HAE on Monte-Carlo boundary values (module docstring): the first turn of each
    segment gets its segment's high-level advantage, the other turns their low-level one;
    ``[N, L]``. The outcome reward sits on each rollout's last turn; its value after the last turn
    is 0 (the episode is done)."""
    values, counts = boundary_values(inputs, "hiper")
    switch = inputs.extras.get("switch_flags")
    width = values.shape[1] - 1
    if switch is None or switch.dim() != 2 or switch.shape[0] != counts.numel():
        raise ValueError(
            "[advantage.hiper] got no extras['switch_flags'] [N, T]; expected the provider's. "
            "Fix: load the built-in components (framework.rl.providers registers it)."
        )
    rewards = inputs.rewards.to(torch.get_default_dtype())
    per_turn = torch.zeros((counts.numel(), max(width, 1)))
    for i, t_i in enumerate(counts.tolist()):
        if t_i == 0:
            continue
        r = torch.zeros(t_i)
        r[-1] = rewards[i]
        v = values[i, : t_i + 1].clone()
        v[t_i] = 0.0  # done: no value after the last turn
        flags = torch.zeros(t_i, dtype=torch.bool)
        flags[: min(t_i, switch.shape[1])] = switch[i, :t_i].bool()
        a_low, a_high, starts = hae_advantages(
            r,
            v,
            v,
            flags,
            t_i,
            gamma=cfg.gamma,
            lambda_turn=cfg.lambda_turn,
            lambda_seg=cfg.lambda_seg,
        )
        per_turn[i, :t_i] = a_low
        for j, s in enumerate(starts):
            per_turn[i, s] = a_high[j]
    return turn_token_values(per_turn, inputs)
