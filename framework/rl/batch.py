"""The step's rollouts as one typed batch, built once after scoring.

:class:`RolloutBatch` holds everything the rest of the step reads per rollout: the token ids packed
once (left padded, as the model scores them), the response and trained-token masks, turn indices
and spans, the backend's log-probs, group ids, rewards and their parts, and every dataset column.
The advantage estimator sees it as :class:`~framework.types.AdvantageInputs` (a view, no copy); the
update slices its micro-batches out of it (:meth:`RolloutBatch.micro_batches`) instead of packing
again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from framework.data.schema import QAItem
from framework.rollout.scoring import Scores, dataset_columns
from framework.rollout.types import Trajectory
from framework.training.tokens import (
    TokenBatch,
    pack,
    packed_rollout_logprobs,
    response_mask,
    right_aligned,
)
from framework.types import STATUS_OVER_BUDGET, AdvantageInputs, TurnSpan


@dataclass
class MicroBatch:
    """Rows of a :class:`RolloutBatch` as the model scores them together, sliced once per update.

    Attributes:
        rows: ``[n]`` the rows' indices in the batch.
        tokens: their packed tokens, exactly as :func:`~framework.training.tokens.pack` packs them
            alone (``loss_mask`` ``[n, R]``, ``R`` their longest response).
        advantages: ``[n]``, or ``[n, R]`` per token in the packed layout; ``None`` when the slice
            is scored without a loss (an entropy probe).
        sample_mask: ``[n]`` bool.
        group_index: ``[n]`` long.
        rollout_logprobs: ``[n, R]`` the backend's log-probs, ``None`` when not recorded.
        extras: the batch's extras of these rows (tensors and lists with one entry per rollout).
    """

    rows: Tensor
    tokens: TokenBatch
    advantages: Tensor | None
    sample_mask: Tensor
    group_index: Tensor
    rollout_logprobs: Tensor | None
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass
class RolloutBatch:
    """``N`` rollouts with every per-rollout tensor the step needs, each computed once.

    Two token layouts appear: the *response* layout ``[N, L]`` (column ``j`` is response token
    ``j``; ``L`` the longest response), which advantage estimators read and return, and the
    *packed* layout of :attr:`tokens` (``[N, W]`` left padded, responses in the last ``R``
    columns), which the model scores. :meth:`micro_batches` slices the packed layout and moves
    response-layout advantages into it.

    Attributes:
        trajectories: the rollouts, grouped (``items[t.group]`` is a rollout's question).
        items: the question of each group (empty where a caller has no questions).
        scores: total reward, its components and the rewards' extras (``None`` before scoring).
        pad_id: the padding id of :attr:`tokens`.
        tokens: the whole batch packed (:func:`~framework.training.tokens.pack`); ``None`` when
            the batch is empty.
        lengths: each rollout's sequence length (prompt and response).
        rewards: ``[N]`` float total rewards (zeros before scoring).
        group_index: ``[N]`` long, each rollout's group.
        sample_mask: ``[N]`` bool, 0 on rollouts left out of the loss (over budget).
        token_mask: ``[N, L]`` bool, 1 on the response tokens the model generated.
        trained_mask: ``[N, L]`` bool, ``token_mask`` of the rollouts in the loss.
        turn_index: ``[N, L]`` long, each response token's model turn (-1 on padding).
        turns: per rollout its turns in response positions (tool calls and retrieved evidence as
            data).
        stats: per rollout the agent loop's counters.
        columns: every dataset column, one entry per rollout.
        rollout_logprobs: ``[N, R]`` the backend's log-probs in the packed layout, ``None`` when a
            trained rollout has none.
        extras: per-rollout inputs beyond these: what rewards returned besides ``[N]`` and what
            input providers computed (:mod:`framework.rl.inputs`).
    """

    trajectories: list[Trajectory]
    items: list[QAItem]
    scores: Scores | None
    pad_id: int
    tokens: TokenBatch | None
    lengths: list[int]
    rewards: Tensor
    group_index: Tensor
    sample_mask: Tensor
    token_mask: Tensor
    trained_mask: Tensor
    turn_index: Tensor
    turns: list[list[TurnSpan]]
    stats: list[dict[str, int]]
    columns: dict[str, list[Any]]
    rollout_logprobs: Tensor | None
    extras: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        trajectories: Sequence[Trajectory],
        items: Sequence[QAItem] = (),
        scores: Scores | None = None,
        *,
        pad_id: int,
        sample_mask: Tensor | None = None,
    ) -> RolloutBatch:
        """The batch of ``trajectories``: packing, masks and turn indices computed here, once.

        Args:
            items: the questions (``items[t.group]``); their columns go to :attr:`columns`.
            scores: the rollouts' rewards; their extras start :attr:`extras`.
            sample_mask: ``[N]``; by default every rollout but an over-budget one.
        """
        trajs = list(trajectories)
        mask = response_mask(trajs)  # [N, L], the response layout
        tokens = pack(trajs, pad_id) if trajs else None  # [N, W], the packed layout
        behaviour = packed_rollout_logprobs(trajs, tokens.response_width) if tokens else None
        if sample_mask is None:
            sample_mask = torch.tensor(
                [t.status != STATUS_OVER_BUDGET for t in trajs], dtype=torch.bool
            )
        sample_mask = sample_mask.bool()
        return cls(
            trajectories=trajs,
            items=list(items),
            scores=scores,
            pad_id=pad_id,
            tokens=tokens,
            lengths=[len(t.token_ids) for t in trajs],
            rewards=scores.total.float() if scores is not None else torch.zeros(len(trajs)),
            group_index=torch.tensor([t.group for t in trajs], dtype=torch.long),
            sample_mask=sample_mask,
            token_mask=mask,
            trained_mask=mask & sample_mask.reshape(-1, 1),
            turn_index=turn_index(trajs, width=mask.shape[1]),
            turns=[[turn.shifted(-t.prompt_len) for turn in t.turns] for t in trajs],
            stats=[dict(t.stats) for t in trajs],
            columns=dataset_columns([items[t.group] for t in trajs]) if items else {},
            rollout_logprobs=behaviour,
            extras=dict(scores.extras) if scores is not None else {},
        )

    @property
    def size(self) -> int:
        """``N``, the number of rollouts."""
        return len(self.trajectories)

    def advantage_inputs(self) -> AdvantageInputs:
        """What the advantage estimator sees: this batch's tensors, not copies."""
        return AdvantageInputs(
            rewards=self.rewards,
            group_index=self.group_index,
            token_mask=self.token_mask,
            sample_mask=self.sample_mask,
            turn_index=self.turn_index,
            turns=self.turns,
            stats=self.stats,
            columns=self.columns,
            extras=self.extras,
        )

    def rows_of_extras(self, rows: Tensor) -> dict[str, Any]:
        """:attr:`extras` of ``rows``: per-rollout entries sliced, anything else as it is."""
        return {k: _rows_of(v, rows, self.size) for k, v in self.extras.items()}

    def micro_batches(
        self, chunks: Sequence[Tensor], advantages: Tensor | None = None
    ) -> list[MicroBatch]:
        """Each chunk of rows as the model scores it, with its advantages in the packed layout.

        A chunk's tokens are the columns its longest row needs and the last ``R`` response
        columns of its longest response: exactly what :func:`~framework.training.tokens.pack`
        gives those trajectories alone.

        Args:
            chunks: ``[n_k]`` row indices per micro-batch (non-empty).
            advantages: ``[N]`` or ``[N, L]`` (the response layout) of the whole batch.
        """
        if self.tokens is None:
            raise ValueError("RolloutBatch.micro_batches() needs a non-empty batch")
        t, behaviour, out = self.tokens, self.rollout_logprobs, []
        for rows in chunks:
            picked = [self.trajectories[int(i)] for i in rows]
            width = max(self.lengths[int(i)] for i in rows)
            resp = max(max(len(x.token_ids) - x.prompt_len for x in picked), 1)
            adv = None if advantages is None else advantages[rows]
            if adv is not None and adv.dim() == 2:
                adv = right_aligned(adv, picked, resp)
            out.append(
                MicroBatch(
                    rows=rows,
                    tokens=TokenBatch(
                        t.input_ids[rows, -width:],
                        t.attention_mask[rows, -width:],
                        t.position_ids[rows, -width:],
                        t.loss_mask[rows, -resp:],
                    ),
                    advantages=adv,
                    sample_mask=self.sample_mask[rows],
                    group_index=self.group_index[rows],
                    rollout_logprobs=None if behaviour is None else behaviour[rows, -resp:],
                    extras=self.rows_of_extras(rows),
                )
            )
        return out


def _rows_of(value: Any, rows: Tensor, n: int) -> Any:
    """``value``'s entries of ``rows`` when it has one per rollout (first dimension ``n``)."""
    if isinstance(value, Tensor) and value.dim() > 0 and value.shape[0] == n:
        return value[rows]
    if isinstance(value, (list, tuple)) and len(value) == n:
        return [value[int(i)] for i in rows]
    return value


def turn_index(trajectories: Sequence[Trajectory], width: int | None = None) -> Tensor:
    """``[N, L]`` long: per response token the model turn it belongs to (a tool response belongs to
    the turn that called the tool); -1 on padding and in rollouts that recorded no turns.

    Same layout as :func:`~framework.training.tokens.response_mask` (whose width ``L`` is
    ``width``, computed from the trajectories when not given).
    """
    if width is None:
        width = response_mask(trajectories).shape[1]
    index = torch.full((len(trajectories), width), -1, dtype=torch.long)
    for i, t in enumerate(trajectories):
        p = t.prompt_len
        for k, turn in enumerate(t.turns):
            index[i, turn.start - p : turn.end - p] = k
            if turn.observation is not None:
                index[i, turn.observation[0] - p : turn.observation[1] - p] = k
    return index


def per_rollout(advantages: Tensor, token_mask: Tensor | None) -> Tensor:
    """``[N]``: the advantages themselves, or for ``[N, L]`` each rollout's mean over its
    generated tokens (``token_mask``; 0 without any)."""
    if advantages.dim() == 1 or token_mask is None:
        return advantages
    m = token_mask.float()
    return (advantages * m).sum(-1) / m.sum(-1).clamp(min=1)


def check_advantages(advantages: Tensor, inputs: AdvantageInputs, name: str) -> Tensor:
    """``advantages`` as float, after checking that they are ``[N]`` or ``[N, L]``.

    Raises:
        ValueError: another shape, naming the estimator and both accepted shapes.
    """
    n = len(inputs.rewards)
    width = inputs.token_mask.shape[1] if inputs.token_mask is not None else None
    shape = tuple(advantages.shape)
    if shape != (n,) and (width is None or shape != (n, width)):
        per_token = f" or [N, L] = ({n}, {width})" if width is not None else ""
        raise ValueError(
            f"[advantage.{name}] got advantages of shape {shape}; expected [N] = ({n},)"
            f"{per_token}, L being the width of inputs.token_mask. Fix: return one advantage "
            "per rollout, or one per response token in the layout of inputs.token_mask."
        )
    return advantages.float()
