"""Step-level advantages for multi-turn search agents: GiGPO and HGPO.

A *step* is one model turn of a rollout: a :class:`~framework.types.TurnSpan` of ``inputs.turns[i]``
(its calls and the observation after it). Both estimators give each step the discounted return of
the rollout's outcome reward, which arrives only after the last turn (sparse), and compare it with
the steps of the same question's other rollouts that were in the same *state*. They return
``[N, L]`` advantages in the layout of ``inputs.token_mask``: every generated token of turn ``t``
carries that step's advantage; tool responses and padding get 0. As everywhere in
:mod:`framework.algorithms`, over-budget rollouts count in the statistics (the loss masks them).

States, the extension point: ``cfg.state_key`` names an entry of :data:`STATE_KEYS`, a function of
the turns *before* a step that returns a hashable key; two steps of one question are in the same
state when their keys are equal. The initial state (no turn yet) is shared by every rollout of a
question, so the first turns of a group always form one group. Shipped keys: ``calls`` (every call
so far), ``last_calls`` (the previous turn's calls) and ``observations`` (every call so far and the
digest of every observation's text, for retrievers that are not deterministic). To group by
something else (a normalised query, ...), add a function to :data:`STATE_KEYS` (from a plugin
module, at import time) and select it with ``advantage.state_key=<name>``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from framework.algorithms.advantages.grpo import GRPOAdvantageConfig, _float_rewards, grpo_advantage
from framework.config import ComponentConfig, Problem, check_choice, check_range, option
from framework.types import AdvantageInputs, ToolCall, TurnSpan

#: the state before a step, from the turns that came before it (``[]`` for the first turn)
StateKey = Callable[[Sequence[TurnSpan]], Hashable]


def call_key(call: ToolCall) -> Hashable:
    """What decides a call's observation: the tool, its queries in order and the page it asks for.

    The ``visit`` goal is left out: the page returned does not depend on it.
    """
    return (call.name, call.queries, call.doc_id, call.title)


def turn_key(turn: TurnSpan) -> Hashable:
    """What one turn did to the environment: its valid calls in order and how many were invalid
    (each answered with an error message)."""
    return (tuple(call_key(c) for c in turn.calls), turn.invalid_calls)


def calls_state(turns_so_far: Sequence[TurnSpan]) -> Hashable:
    """Every call made so far, turn by turn: equal keys mean identical tool calls and, with a
    deterministic retriever, identical observations, i.e. the same conversation apart from the
    model's own text (the issue's definition of an anchor state for this agent)."""
    return tuple(turn_key(t) for t in turns_so_far)


def last_calls_state(turns_so_far: Sequence[TurnSpan]) -> Hashable:
    """The calls of the previous turn only, i.e. the latest observation (``()`` before the first
    turn): verl-agent's search environment anchors GiGPO on the latest observation this way."""
    return turn_key(turns_so_far[-1]) if turns_so_far else ()


def observations_state(turns_so_far: Sequence[TurnSpan]) -> Hashable:
    """Every call made so far and the text of every observation it returned: the issue's anchor
    state taken literally, which also holds with a retriever that is not deterministic (a sampled
    or updated index, a web search), where equal calls may see different pages."""
    return tuple((turn_key(t), t.observation_digest) for t in turns_so_far)


#: named state keys, selected by ``state_key`` in the configs below; add entries to extend
STATE_KEYS: dict[str, StateKey] = {
    "calls": calls_state,
    "last_calls": last_calls_state,
    "observations": observations_state,
}


@dataclass(frozen=True)
class AgentSteps:
    """Every model turn of a batch, flattened: ``S`` steps, rollout by rollout, turns in order.

    Attributes:
        rollout: ``[S]`` long, the row of each step's rollout.
        turn: ``[S]`` long, the turn index ``t`` within its rollout.
        returns: ``[S]`` float, the discounted return ``gamma^(T - 1 - t) R`` of each step.
        states: ``[S]`` each step's state key (the turns before it, through the key function).
    """

    rollout: Tensor
    turn: Tensor
    returns: Tensor
    states: list[Hashable]


def agent_steps(
    inputs: AdvantageInputs, *, gamma: float, state_key: StateKey, name: str
) -> AgentSteps:
    """The steps of a batch with their discounted returns and state keys.

    Args:
        inputs: ``rewards [N]`` (the outcome, credited after the last turn), ``turns`` per rollout,
            ``token_mask [N, L]``.
        gamma: discount per turn.
        state_key: the state of a step from the turns before it.
        name: the estimator, for error messages.

    Raises:
        ValueError: ``inputs`` has no token mask or no turns for some rollout.
    """
    n = len(inputs.rewards)
    if inputs.token_mask is None or len(inputs.turns) != n:
        raise ValueError(
            f"[advantage.{name}] got token_mask={'None' if inputs.token_mask is None else 'set'} "
            f"and turns for {len(inputs.turns)} of {n} rollouts; expected a token mask [N, L] and "
            "the model turns of every rollout. Fix: build the inputs with "
            "RolloutBatch.advantage_inputs() (framework.rl.batch), or use a per-rollout "
            "estimator (grpo)."
        )
    r = _float_rewards(inputs)
    rollout, turn, exponent, states = [], [], [], []
    for i, turns in enumerate(inputs.turns):
        for t in range(len(turns)):
            rollout.append(i)
            turn.append(t)
            exponent.append(len(turns) - 1 - t)
            states.append(state_key(turns[:t]))
    rows = torch.tensor(rollout, dtype=torch.long, device=r.device)
    power = torch.tensor(exponent, dtype=r.dtype, device=r.device)
    return AgentSteps(
        rollout=rows,
        turn=torch.tensor(turn, dtype=torch.long, device=r.device),
        returns=torch.full_like(power, gamma).pow(power) * r[rows],
        states=states,
    )


def dense_ids(keys: Iterable[Hashable], device: torch.device | None = None) -> Tensor:
    """``[S]`` long: equal keys get equal ids (in order of first appearance)."""
    index: dict[Hashable, int] = {}
    return torch.tensor(
        [index.setdefault(k, len(index)) for k in keys], dtype=torch.long, device=device
    )


def steps_to_tokens(values: Tensor, steps: AgentSteps, inputs: AdvantageInputs) -> Tensor:
    """``[N, L]``: each step's value on the tokens its turn generated, 0 elsewhere.

    Args:
        values: ``[S]`` one value per step.
        steps: the steps, as :func:`agent_steps` made them from ``inputs``.
        inputs: ``turns`` (response positions) and ``token_mask [N, L]``.
    """
    mask = inputs.token_mask
    if mask is None:
        raise ValueError("steps_to_tokens() needs inputs with a token_mask")
    out = torch.zeros(mask.shape, dtype=values.dtype, device=values.device)
    for i, t, v in zip(steps.rollout.tolist(), steps.turn.tolist(), values.tolist(), strict=True):
        span = inputs.turns[i][t]
        out[i, span.start : span.end] = v
    return out * mask.to(out.dtype)  # tool responses inside a span stay 0


@dataclass
class StepAdvantageConfig(ComponentConfig):
    """Fields shared by the step-level estimators."""

    gamma: float = option(0.95, "discount per turn of the step return (both papers: 0.95)")
    state_key: str = option(
        "calls",
        "the STATE_KEYS entry that decides which steps share a state: calls, "
        "last_calls, observations (calls and the observations' text), or a plugin's",
    )
    scale_by_std: bool = option(
        True, "divide by the group std (the code's mean_std_norm); false: mean_norm"
    )
    unbiased_std: bool = option(True, "Bessel-corrected std (n - 1), as torch.std")
    epsilon: float = option(1e-6, "added to the std before dividing")

    def problems(self) -> list[Problem]:
        out = check_range(
            self.gamma,
            "gamma",
            low=0.0,
            high=1.0,
            low_inclusive=False,
            fix="set gamma to the per-turn discount, 0.95 in the paper",
        )
        out += check_choice(self.state_key, "state_key", sorted(STATE_KEYS))
        out += check_range(self.epsilon, "epsilon", low=0.0, fix="use a small epsilon such as 1e-6")
        return out

    def normalizer(self) -> GRPOAdvantageConfig:
        """The within-group normalisation, as GRPO's config (so both levels share one code path)."""
        return GRPOAdvantageConfig(
            name="grpo",
            scale_by_std=self.scale_by_std,
            epsilon=self.epsilon,
            unbiased_std=self.unbiased_std,
        )


def configured_steps(inputs: AdvantageInputs, cfg: StepAdvantageConfig, name: str) -> AgentSteps:
    """:func:`agent_steps` of ``inputs`` with ``cfg``'s discount and state key (``name``: the
    estimator, for errors)."""
    return agent_steps(inputs, gamma=cfg.gamma, state_key=STATE_KEYS[cfg.state_key], name=name)


def relative_to_group(values: Tensor, ids: Tensor, cfg: StepAdvantageConfig) -> Tensor:
    """``[S]`` ``(v - mean) / (std + eps)`` (or ``v - mean``) within the groups of ``ids``; 0 in a
    group of one or of equal values (:func:`~framework.algorithms.advantages.grpo.grpo_advantage`)."""
    return grpo_advantage(AdvantageInputs(values, ids), cfg=cfg.normalizer())
