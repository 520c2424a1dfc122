"""The policy's teacher-forced probability of the gold answer after each turn of a rollout (IGPO).

IGPO (Wang et al. 2025, arXiv 2510.14967) rewards a turn by how much it raised the policy's belief in
the ground truth. The belief after ``k`` turns is the probability that the policy, conditioned on the
rollout so far (prompt, the first ``k`` model turns and their tool responses) and then on a fixed
answer scaffold, writes the gold answer; as in the paper, the geometric mean of the per-token
probabilities of the gold answer's tokens::

    p_k = exp( (1/|a|) Σ_j log π(a_j | prefix_k, scaffold, a_<j) )

The scaffold is the authors' (their prompts end in ``<think>``, which ours leave to the model, so
it opens with one): ``"<think>\\nNow there's enough information to answer\\n</think>\\n<answer>\\n"``,
then the answer (``advantage.probe_prefix``; their closing ``"\\n</answer>"`` is left out: in a
causal LM what follows the answer does not change its probability). The prefix, the scaffold and
the answer are tokenised separately and concatenated, so the answer's tokens are the same whatever
the prefix ends with.

Each probe is one teacher-forced forward pass (no gradient) through
:func:`~framework.training.scoring.teacher_forced`, which projects onto the vocabulary only at
the answer's positions.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from framework.algorithms.advantages.igpo import IGPOAdvantageConfig
from framework.algorithms.advantages.spae import (
    SPAEAdvantageConfig,
    probe_accuracy,
    probe_confidence,
)
from framework.algorithms.advantages.turns import PROBE_PREFIX
from framework.data.schema import QAItem
from framework.registry import INPUT_PROVIDERS
from framework.registry.protocols import Tokenizer
from framework.rl.inputs import InputContext
from framework.training.scoring import scoring_row, teacher_forced
from framework.types import Trajectory


def probe_prefix_ends(trajectory: Trajectory) -> list[int]:
    """Where the prefixes of ``trajectory``'s belief probes end, in ``token_ids`` positions: before
    its first turn (the prompt), then after each turn but the last (after the turn's tool response,
    or after the turn itself when it got none). One probe per turn: ``T`` ends for ``T`` turns, the
    belief before turn ``k`` (0-based) at index ``k``."""
    ends = [trajectory.prompt_len]
    for turn in trajectory.turns[:-1]:
        ends.append(turn.observation[1] if turn.observation is not None else turn.end)
    return ends[: len(trajectory.turns)]


@dataclass(frozen=True)
class BeliefProbes:
    """How the belief probes are built and batched.

    Args:
        tokenizer: encodes the scaffold and the answer.
        pad_id: padding id of the packed probes.
        batch_size: probes per forward pass.
        prefix: scaffold between the rollout prefix and the answer.
    """

    tokenizer: Tokenizer
    pad_id: int
    batch_size: int = 8
    prefix: str = PROBE_PREFIX

    @classmethod
    def of_step(
        cls, ctx: InputContext, cfg: IGPOAdvantageConfig | SPAEAdvantageConfig
    ) -> BeliefProbes:
        """The probes of the step ``ctx`` with the requiring config's ``probe_batch_size`` and
        ``probe_prefix``."""
        return cls(ctx.tokenizer, ctx.pad_id, cfg.probe_batch_size, cfg.probe_prefix)


@torch.no_grad()
def answer_probs(
    policy: torch.nn.Module,
    trajectories: Sequence[Trajectory],
    items: Sequence[QAItem],
    probes: BeliefProbes,
) -> Tensor:
    """``[N, T]`` float: ``p_k`` of rollout ``i`` in column ``k``, the policy's probability of its
    question's first gold answer before its turn ``k`` (:func:`probe_prefix_ends`).

    Args:
        policy: the causal LM, with the weights that generated the rollouts (call it in eval
            mode; no gradient is taken).
        trajectories: the ``N`` rollouts; ``items[t.group]`` is each one's question.
        items: the questions (``golden_answers[0]`` is the probed answer).
        probes: the tokenizer, padding, batch size and scaffold of the probes.

    Returns:
        ``[N, T]`` with ``T`` the most turns of any rollout (at least 1); 0 past a rollout's turns.
    """
    width = max([len(t.turns) for t in trajectories] + [1])
    out = torch.zeros((len(trajectories), width))
    for (i, k), logp, _ in gold_probes(policy, trajectories, items, probes):
        out[i, k] = float(logp.float().mean().exp())
    return out


@torch.no_grad()
def gold_probes(
    policy: torch.nn.Module,
    trajectories: Sequence[Trajectory],
    items: Sequence[QAItem],
    probes: BeliefProbes,
    *,
    entropy: bool = False,
) -> Iterator[tuple[tuple[int, int], Tensor, Tensor | None]]:
    """Every belief probe of the rollouts (:func:`probe_prefix_ends`): ``((i, k), log-probs of the
    gold answer's tokens [a], their next-token entropies [a] or None)``, teacher-forced behind the
    scaffold ``probes.prefix`` under ``policy`` (no gradient), ``probes.batch_size`` probes per
    forward pass."""
    tokenizer, batch_size = probes.tokenizer, probes.batch_size
    rows: list[Trajectory] = []
    where: list[tuple[int, int]] = []
    head = _encode(tokenizer, probes.prefix)
    for i, t in enumerate(trajectories):
        answer = _encode(tokenizer, items[t.group].golden_answers[0])
        for k, end in enumerate(probe_prefix_ends(t)):
            context = t.token_ids[:end] + head
            rows.append(scoring_row(context, answer, question=t.question, group=t.group))
            where.append((i, k))
    for chunk in teacher_forced(
        policy, rows, probes.pad_id, batch_size=batch_size, entropy=entropy
    ):
        logp, ent = chunk.logprobs, chunk.entropy  # [n, R], 0 off the answer
        on_answer = chunk.batch.loss_mask.bool()  # [n, R]
        for row, key in enumerate(where[chunk.start : chunk.start + batch_size]):
            sel = on_answer[row]
            yield key, logp[row][sel].cpu(), None if ent is None else ent[row][sel].cpu()


@INPUT_PROVIDERS.register("answer_probs", config=IGPOAdvantageConfig)
def answer_probs_input(ctx: InputContext, *, cfg: IGPOAdvantageConfig) -> Tensor:
    """The ``answer_probs`` input (IGPO's ``requires``): :func:`answer_probs` of the step's
    rollouts under the pre-update policy, with the requiring config's ``probe_batch_size`` and
    ``probe_prefix``."""
    return answer_probs(ctx.policy, ctx.trajectories, ctx.items, BeliefProbes.of_step(ctx, cfg))


def _encode(tokenizer: Tokenizer, text: str) -> list[int]:
    ids = [int(x) for x in tokenizer.encode(text, add_special_tokens=False)]
    if not ids and text:
        raise ValueError(f"[advantage.igpo] the tokenizer encodes {text!r} as no token")
    return ids


@INPUT_PROVIDERS.register("gold_potential", config=SPAEAdvantageConfig)
def gold_potential_input(ctx: InputContext, *, cfg: SPAEAdvantageConfig) -> Tensor:
    """The ``gold_potential`` input (SPAE's ``requires``): ``[N, T]`` ``Φ = Acc · Conf`` before each
    turn, from one teacher-forced probe per turn under the pre-update policy
    (:func:`gold_probes`: the gold answer's mean token probability, and ``exp`` of minus the mean
    entropy at its tokens), with the requiring config's ``probe_batch_size`` and
    ``probe_prefix``."""
    trajs = ctx.trajectories
    out = torch.zeros((len(trajs), max([len(t.turns) for t in trajs] + [1])))
    probes = gold_probes(ctx.policy, trajs, ctx.items, BeliefProbes.of_step(ctx, cfg), entropy=True)
    for (i, k), logp, ent in probes:
        assert ent is not None  # asked for
        acc = probe_accuracy([logp.float().exp().tolist()])
        out[i, k] = acc * probe_confidence([ent.float().tolist()])
    return out
