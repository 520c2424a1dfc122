"""SALT: step-level advantages from a trajectory graph (arXiv 2510.20022), reconstructed.

Outcome rewards credit every step of a rollout alike, so a good search inside a failed rollout is
punished and a bad one inside a lucky rollout rewarded. SALT merges the steps that several rollouts
of a question share into the nodes of a graph and gives each step the mean trajectory advantage of
the rollouts passing through its node: a step that good and bad rollouts share averages toward 0
(neutral), a step only one side took keeps its sign (decisive). No extra rollout and no critic.

The method section could not be read from here; our choices (``../shared/METHODS-2.md`` item 2),
hence "reconstructed":

- a step is a model turn; two steps merge when their rollouts belong to the same question and made
  the same actions up to and including this step (a prefix-tree of actions, so each node's rollouts
  agree on everything before it);
- a turn's action is its tool calls (tool, queries, page; the number of invalid calls), compared
  exactly as GiGPO compares them (:func:`~framework.algorithms.advantages.steps.turn_key`); a final
  turn without calls is its normalised answer (the ``answers`` input), so two rollouts that searched
  alike but answered differently part at the answer;
- the trajectory advantage is GRPO's (this config's normalisation); the node value is the plain mean
  over its rollouts, with no mixing weight toward the rollout's own advantage (a step no other
  rollout shares keeps exactly its rollout's advantage);
- think text is not part of an action; queries are compared exactly (no fuzzy merge).

Checked 2026-11-26: SALT's method section and code are still out of reach, but another paper
describes the mechanism (GRAFT, arXiv 2609.28963, appendix A.3): GRPO's trajectory advantages
first, then identical transitions ``(s, a, s')`` across the group's trajectories form a group whose
members get the mean of their trajectories' advantages. That is this module's rule with the whole
history as the state ``s``; whether SALT's state is the history or only the latest observation
(which would merge more steps) is not said there, so this stays reconstructed.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor

from framework.algorithms.advantages.grpo import GRPOAdvantageConfig, grpo_advantage
from framework.algorithms.advantages.steps import turn_key
from framework.registry import ADVANTAGES
from framework.types import AdvantageInputs, TurnSpan


@dataclass
class SALTAdvantageConfig(GRPOAdvantageConfig):
    requires: ClassVar[tuple[str, ...]] = ("answers",)
    paper: ClassVar[str] = "SALT: step-level advantage via trajectory graph, arXiv 2510.20022"
    fidelity: ClassVar[str] = "reconstructed"


def action_keys(turns: Sequence[TurnSpan], answer: str) -> list[Hashable]:
    """Per turn the node key of the steps up to it: the actions so far (a final turn without calls
    is the answer)."""
    keys: list[Hashable] = []
    path: tuple[Hashable, ...] = ()
    for k, turn in enumerate(turns):
        last = k == len(turns) - 1
        action = (
            ("answer", answer)
            if last and not turn.calls and not turn.invalid_calls
            else turn_key(turn)
        )
        path = (*path, action)
        keys.append(path)
    return keys


def node_means(
    values: Tensor, nodes: Sequence[Sequence[Hashable]], group_index: Tensor
) -> list[list[float]]:
    """Per rollout, per step: the mean of ``values`` over the rollouts of its question whose steps
    reach the same node."""
    members: dict[tuple[int, Hashable], list[int]] = {}
    groups = group_index.tolist()
    for i, keys in enumerate(nodes):
        for key in keys:
            members.setdefault((groups[i], key), []).append(i)
    v = values.tolist()
    return [
        [
            sum(v[j] for j in members[(groups[i], key)]) / len(members[(groups[i], key)])
            for key in keys
        ]
        for i, keys in enumerate(nodes)
    ]


@ADVANTAGES.register("salt", config=SALTAdvantageConfig)
def salt_advantage(inputs: AdvantageInputs, *, cfg: SALTAdvantageConfig) -> Tensor:
    """SALT (reconstructed; module docstring): each turn's tokens get the mean GRPO advantage of
    the rollouts of its question that took the same actions up to that turn::

        A_j = GRPO advantage of rollout j
        node(i, k) = (question of i, actions of i's turns 0..k; a final answer turn: its answer)
        A_{i,k} = mean of A_j over the rollouts j with node(j, k) = node(i, k)

    A rollout without recorded turns keeps its trajectory advantage on every generated token.

    Args:
        inputs: ``rewards``, ``group_index``, ``token_mask [N, L]``, ``turns``,
            ``extras["answers"]``.
        cfg: the trajectory advantage's normalisation.

    Returns:
        ``[N, L]`` per-token advantages.
    """
    if inputs.token_mask is None or len(inputs.turns) != len(inputs.rewards):
        raise ValueError(
            "[advantage.salt] got inputs without a token mask or turns; expected both. Fix: build "
            "them with RolloutBatch.advantage_inputs() (framework.rl.batch)."
        )
    traj = grpo_advantage(inputs, cfg=cfg)  # [N]
    answers = inputs.extras["answers"]
    nodes = [action_keys(turns, answers[i]) for i, turns in enumerate(inputs.turns)]
    means = node_means(traj, nodes, inputs.group_index)
    mask = inputs.token_mask
    out = traj.unsqueeze(-1).expand(mask.shape).clone()  # rollouts without turns
    for i, turns in enumerate(inputs.turns):
        if turns:
            out[i] = 0.0
        for turn, value in zip(turns, means[i], strict=True):
            out[i, turn.start : turn.end] = value
    return out * mask.to(out.dtype)
