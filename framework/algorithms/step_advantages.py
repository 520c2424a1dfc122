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

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from framework.algorithms.advantages import GRPOAdvantageConfig, _float_rewards, grpo_advantage
from framework.algorithms.group import group_size
from framework.config import ComponentConfig, Problem, check, check_choice, check_range
from framework.registry.kinds import ADVANTAGES
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


# --------------------------------------------------------------------------- configs


@dataclass
class StepAdvantageConfig(ComponentConfig):
    """Fields shared by the step-level estimators."""

    gamma: float = field(
        default=0.95, metadata={"help": "discount per turn of the step return (both papers: 0.95)"}
    )
    state_key: str = field(
        default="calls",
        metadata={
            "help": "the STATE_KEYS entry that decides which steps share a state: calls, "
            "last_calls, observations (calls and the observations' text), or a plugin's"
        },
    )
    scale_by_std: bool = field(
        default=True,
        metadata={"help": "divide by the group std (the code's mean_std_norm); false: mean_norm"},
    )
    unbiased_std: bool = field(
        default=True, metadata={"help": "Bessel-corrected std (n - 1), as torch.std"}
    )
    epsilon: float = field(default=1e-6, metadata={"help": "added to the std before dividing"})

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


def relative_to_group(values: Tensor, ids: Tensor, cfg: StepAdvantageConfig) -> Tensor:
    """``[S]`` ``(v - mean) / (std + eps)`` (or ``v - mean``) within the groups of ``ids``; 0 in a
    group of one or of equal values (:func:`~framework.algorithms.advantages.grpo_advantage`)."""
    return grpo_advantage(AdvantageInputs(values, ids), cfg=cfg.normalizer())


# --------------------------------------------------------------------------- GiGPO


@dataclass
class GiGPOAdvantageConfig(StepAdvantageConfig):
    omega: float = field(
        default=1.0, metadata={"help": "weight of the step-level advantage (paper: 1)"}
    )
    episode_stats_per_step: bool = field(
        default=False,
        metadata={
            "help": "count each rollout once per turn in the episode mean and std, as the "
            "public code does; false: once per rollout (the paper's eq. 3)"
        },
    )

    def problems(self) -> list[Problem]:
        return super().problems() + check(
            math.isfinite(self.omega) and self.omega >= 0,
            "omega",
            self.omega,
            "a finite number >= 0",
            "set omega to 1.0 (the paper); 0 gives episode-level GRPO on every token",
        )


def gigpo_episode_advantage(
    inputs: AdvantageInputs, steps: AgentSteps, cfg: GiGPOAdvantageConfig
) -> Tensor:
    """``[N]`` GiGPO's episode level: GRPO over each question's rewards (see ``gigpo``)."""
    r = _float_rewards(inputs)
    if not cfg.episode_stats_per_step:
        return relative_to_group(r, inputs.group_index, cfg)
    per_step = relative_to_group(r[steps.rollout], inputs.group_index[steps.rollout], cfg)
    out = torch.zeros_like(r)  # a rollout without turns has no token to carry it
    out[steps.rollout] = per_step
    return out


@ADVANTAGES.register("gigpo", config=GiGPOAdvantageConfig)
def gigpo_advantage(inputs: AdvantageInputs, *, cfg: GiGPOAdvantageConfig) -> Tensor:
    """GiGPO: episode-level GRPO plus ``omega`` times a step advantage within each anchor state.

    Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training", arXiv 2505.10978
    (https://arxiv.org/abs/2505.10978); code https://github.com/langfengQ/verl-agent
    (``gigpo/core_gigpo.py``). For rollout ``i`` of a question, with reward ``R_i`` after its
    ``T_i`` turns, and turn ``t`` in the anchor group ``U(i, t)`` (the question's steps whose state
    before the turn is the same)::

        A_E(i)    = (R_i - mean_g R) / (std_g R + eps)                        eq. 3
        G(i, t)   = gamma^(T_i - 1 - t) R_i                                   eq. 5
        A_S(i, t) = (G(i, t) - mean_U G) / (std_U G + eps)                    eqs. 6-7
        A(i, t)   = A_E(i) + omega A_S(i, t)                                  eq. 8

    Choices (defaults: ``gamma = 0.95``, ``omega = 1``, as the paper and its scripts):

    - Anchor state: ``STATE_KEYS[state_key]`` of the turns before ``t``; the default ``calls`` is
      every call so far, turn by turn (identical calls and observations). Step 0 of every rollout
      is the question itself, so the first turns of a question form one anchor group.
      ``last_calls`` anchors on the latest observation only, as verl-agent's search environment;
      ``observations`` compares the observations' text as well as the calls.
    - Normalisation: by the std (``scale_by_std``; the code's ``mode=mean_std_norm``, which its run
      scripts use; the paper reports both with and without std) with ``torch.std``'s Bessel
      correction, as the code. ``scale_by_std=false`` is the code's ``mean_norm``.
    - Episode statistics: each rollout counted once (eq. 3). The code's rows are steps and it
      counts a rollout once per step (``compute_mean_std_cross_steps``), so long rollouts weigh
      more; ``episode_stats_per_step=true`` reproduces that.
    - Groups of one: a question with one rollout gets ``A_E = 0`` (GRPO's convention here; the
      code uses mean 0 and std 1), a step alone in its anchor group gets ``A_S = 0`` (as the code).
    - The outcome reward is the only step reward (sparse): ``G`` discounts it back from the last
      turn. A single-turn group gets ``A = (1 + omega) A_E``; ``omega = 0`` is GRPO per token.

    Args:
        inputs: ``rewards [N]``, ``group_index [N]``, ``token_mask [N, L]``, ``turns``.
        cfg: the estimator's config.

    Returns:
        ``[N, L]``: ``A(i, t)`` on the generated tokens of turn ``t``, 0 on tool responses and
        padding.

    Raises:
        ValueError: ``inputs`` carries no token mask or no turns.
    """
    steps = agent_steps(inputs, gamma=cfg.gamma, state_key=STATE_KEYS[cfg.state_key], name="gigpo")
    episode = gigpo_episode_advantage(inputs, steps, cfg)  # [N]
    question = inputs.group_index[steps.rollout].tolist()
    anchors = dense_ids(zip(question, steps.states, strict=True), steps.returns.device)  # [S]
    step = relative_to_group(steps.returns, anchors, cfg)  # [S]
    return steps_to_tokens(episode[steps.rollout] + cfg.omega * step, steps, inputs)


# --------------------------------------------------------------------------- HGPO


@dataclass
class HGPOAdvantageConfig(StepAdvantageConfig):
    state_key: str = field(
        default="last_calls",
        metadata={
            "help": "the STATE_KEYS entry of one state; levels k > 0 add the k states before it"
        },
    )
    unbiased_std: bool = field(
        default=False,
        metadata={"help": "Bessel-corrected std; false: population std, as the paper's code"},
    )
    K: int = field(
        default=2,
        metadata={"help": "deepest level: steps that share their last K + 1 states (paper: 2, 4)"},
    )
    alpha: float = field(
        default=1.0, metadata={"help": "level weights w_k ∝ (k + weight_offset)^alpha; 0: uniform"}
    )
    weight_offset: int = field(
        default=1,
        metadata={"help": "1: w_k ∝ (k + 1)^alpha (METHODS.md); 2: as the public code"},
    )

    def problems(self) -> list[Problem]:
        out = super().problems()
        out += check(
            self.K >= 0,
            "K",
            self.K,
            "an integer >= 0",
            "set K to 2 (the paper); 0 leaves GiGPO's step part alone",
        )
        out += check(
            math.isfinite(self.alpha), "alpha", self.alpha, "a finite number", "set alpha to 1.0"
        )
        out += check(
            self.weight_offset >= 1,
            "weight_offset",
            self.weight_offset,
            "an integer >= 1",
            "set weight_offset to 1 (METHODS.md) or 2 (the public code)",
        )
        return out


def hgpo_step_advantage(steps: AgentSteps, group_index: Tensor, cfg: HGPOAdvantageConfig) -> Tensor:
    """``[S]`` HGPO's advantage of each step (see ``hgpo``)."""
    question = group_index[steps.rollout].tolist()
    turn = steps.turn.tolist()
    num = torch.zeros_like(steps.returns)
    den = torch.zeros_like(steps.returns)
    for k in range(cfg.K + 1):
        keys = [
            (q, tuple(steps.states[s - k : s + 1])) if t >= k else ("no level", s)
            for s, (q, t) in enumerate(zip(question, turn, strict=True))
        ]
        ids = dense_ids(keys, steps.returns.device)
        adv = relative_to_group(steps.returns, ids, cfg)
        has_baseline = group_size(ids) >= 2  # alone, or no level k before turn k: drops out
        w = float(k + cfg.weight_offset) ** cfg.alpha
        num += torch.where(has_baseline, w * adv, torch.zeros_like(adv))
        den += has_baseline.to(den.dtype) * w
    return torch.where(den > 0, num / torch.where(den > 0, den, torch.ones_like(den)), num)


@ADVANTAGES.register("hgpo", config=HGPOAdvantageConfig)
def hgpo_advantage(inputs: AdvantageInputs, *, cfg: HGPOAdvantageConfig) -> Tensor:
    """HGPO: a weighted mean of step advantages over nested groups sharing the last ``k + 1`` states.

    He et al. 2026, "Hierarchy-of-Groups Policy Optimization for Long-Horizon Agentic Tasks", arXiv
    2602.22817 (https://arxiv.org/abs/2602.22817), ICLR 2026; code
    https://github.com/langfengQ/verl-agent/tree/master/recipe/hgpo (``core_hgpo.py``). With
    ``G(i, t)`` GiGPO's discounted step return and ``s(i, t)`` the state before turn ``t``::

        C_k(i, t) = (s(i, t - k), ..., s(i, t))                    k = 0..K, for t >= k
        A_k(i, t) = (G(i, t) - mean_Hk G) / (std_Hk G + eps)       Hk: same question and C_k
        w_k       = (k + 1)^alpha
        A(i, t)   = sum_{k in V} w_k A_k(i, t) / sum_{k in V} w_k  V: levels with |Hk| >= 2

    Level 0 is GiGPO's anchor group; ``H_0 ⊇ H_1 ⊇ ... ⊇ H_K`` trade variance (large, mixed-context
    groups) for bias (small, context-consistent ones), and the weights favour consistency.

    Choices (METHODS.md marks nothing loose; where the paper and code differ, said here):

    - Defaults: ``K = 2`` (the code's ``history_length=2``; the paper also runs 4), ``alpha = 1``
      (``length_weight_alpha``), ``gamma = 0.95``, std-normalised with the population std
      (``mode=mean_std_norm``, ``std(unbiased=False)``), ``eps = 1e-6``. No episode-level term:
      the code's optional ``base_group`` is off in its scripts.
    - Weights: ``w_k ∝ (k + 1)^alpha`` as METHODS.md states. The code weighs a window of
      ``k + 1`` states by ``(k + 2)^alpha`` (it keeps ``1^alpha`` for the optional base group);
      ``weight_offset = 2`` reproduces it.
    - Adaptive normalisation: the weights are renormalised over the levels where the step has a
      baseline (two or more steps in ``H_k``); a level where it is alone, or that does not exist
      yet (``t < k``), drops out, and a step alone at every level gets 0. The code does the same,
      but also drops a level whose advantage is exactly 0 (e.g. a group of equal returns); here
      such a level stays and pulls the mean toward 0.
    - State: ``last_calls``, the latest observation, as the paper's environments anchor on the
      current observation while the context holds history. With a full-history key (``calls``,
      ``observations``) every ``H_k`` equals ``H_0``, so HGPO becomes GiGPO's step part (a test checks it); our agent
      keeps its whole history in context, so only that key is an exactly consistent context.
    - ``K = 0`` is GiGPO's ``A_S`` alone (``omega A_S`` without ``A_E``).

    Args:
        inputs: ``rewards [N]``, ``group_index [N]``, ``token_mask [N, L]``, ``turns``.
        cfg: the estimator's config.

    Returns:
        ``[N, L]``: ``A(i, t)`` on the generated tokens of turn ``t``, 0 on tool responses and
        padding.

    Raises:
        ValueError: ``inputs`` carries no token mask or no turns.
    """
    steps = agent_steps(inputs, gamma=cfg.gamma, state_key=STATE_KEYS[cfg.state_key], name="hgpo")
    return steps_to_tokens(hgpo_step_advantage(steps, inputs.group_index, cfg), steps, inputs)
