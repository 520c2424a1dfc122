"""The step's rollouts as one typed batch, built once after scoring.

:class:`RolloutBatch` holds everything the rest of the step reads per rollout: the token ids packed
once (left padded, as the model scores them), the response and trained-token masks, turn indices
and spans, the backend's log-probs, group ids, rewards and their parts, and every dataset column.
The advantage estimator sees it as :class:`~framework.types.AdvantageInputs` (a view, no copy); the
update slices its micro-batches out of it (:meth:`RolloutBatch.micro_batches`) instead of packing
again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from framework.algorithms.stats.aggregation import chunk_weights, masked_mean
from framework.data.schema import QAItem, dataset_columns
from framework.rollout.scoring import Scores
from framework.training.tokens import (
    TokenBatch,
    pack,
    packed_rollout_logprobs,
    response_mask,
    right_aligned,
    turn_index,
)
from framework.types import STATUS_OVER_BUDGET, AdvantageInputs, Trajectory, TurnSpan


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
        turn_index: ``[n, R]`` long, each response token's model turn in the packed layout (-1 on
            padding and outside any turn).
    """

    rows: Tensor
    tokens: TokenBatch
    advantages: Tensor | None
    sample_mask: Tensor
    group_index: Tensor
    rollout_logprobs: Tensor | None
    extras: dict[str, object] = field(default_factory=dict)
    turn_index: Tensor | None = None


@dataclass(frozen=True)
class PlanOptions:
    """How an update groups a batch's rows into micro-batches: fixed for a run by the ``optim``
    section and the loss (:func:`~framework.rl.update.plan_options`).

    Attributes:
        micro_batch_size: most rollouts in one micro-batch.
        agg: the loss aggregation (``AGG_MODES``), which decides each micro-batch's weight.
        skip_zero: leave out rollouts whose advantage is exactly 0 or that are masked out (their
            loss terms are 0: no KL term is configured then).
        max_tokens: most padded tokens (rows x longest row) in one micro-batch; 0 for no limit.
        whole_groups: a loss that reads group statistics (``needs_groups``): every group lies in
            exactly one micro-batch.
        mini_batch_size: most rollouts in one PPO mini-batch (one optimiser step); 0 for one
            mini-batch of the whole batch. Mini-batches hold whole groups (:meth:`RolloutBatch.plan`).
    """

    micro_batch_size: int
    agg: str
    skip_zero: bool = False
    max_tokens: int = 0
    whole_groups: bool = False
    mini_batch_size: int = 0


@dataclass
class UpdatePlan:
    """Which rows of a batch go through the model, in which micro-batches, with which weights.

    Attributes:
        chunks: ``[n_k]`` row indices per micro-batch.
        weights: each micro-batch's accumulation weight
            (:func:`~framework.algorithms.stats.aggregation.chunk_weights`).
        micro: the micro-batches, sliced once (:meth:`RolloutBatch.micro_batches`).
        rollouts: ``N``, the batch's rollouts.
        skipped: rollouts left out of every micro-batch.
        pad_id: the padding id of the batch's tokens.
        probe: when no planned row has a trained token (so none measures the policy's entropy),
            the batch's first rows (at most a micro-batch) to measure it on; else ``None``.
        advantage_abs_mean: mean ``|A|`` over rollouts (``[N]``) or generated tokens (``[N, L]``).
        spans: per PPO mini-batch (one optimiser step each), the ``(start, stop)`` range of its
            micro-batches in :attr:`micro`; its micro-batches' :attr:`weights` sum to its own
            loss. Empty means one mini-batch of every micro-batch (:attr:`mini_spans`).
        mini_rollouts: the rollouts of each mini-batch, skipped ones included (empty with
            ``spans``).
        mini_batched: the run splits batches into mini-batches (``mini_batch_size > 0``), even
            where this one fits in one (under data parallelism every process then agrees on the
            number of optimiser steps).
    """

    chunks: list[Tensor]
    weights: list[float]
    micro: list[MicroBatch] = field(default_factory=list)
    rollouts: int = 0
    skipped: int = 0
    pad_id: int = 0
    probe: MicroBatch | None = None
    advantage_abs_mean: float = 0.0
    spans: list[tuple[int, int]] = field(default_factory=list)
    mini_rollouts: list[int] = field(default_factory=list)
    mini_batched: bool = False

    @property
    def mini_spans(self) -> list[tuple[int, int]]:
        """The mini-batches' micro-batch ranges: :attr:`spans`, or one range over all of them."""
        return self.spans or [(0, len(self.micro))]


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
        sample_mask: ``[N]`` bool, 0 on rollouts left out of the loss (over-budget ones with
            ``optim.over_budget=drop``).
        token_mask: ``[N, L]`` bool, 1 on the response tokens the model generated.
        trained_mask: ``[N, L]`` bool, ``token_mask`` of the rollouts in the loss.
        turn_index: ``[N, L]`` long, each response token's model turn (-1 on padding).
        turns: per rollout its turns in response positions (tool calls and retrieved evidence as
            data).
        stats: per rollout the agent loop's counters.
        columns: every dataset column, one entry per rollout.
        rollout_logprobs: ``[N, R]`` the backend's log-probs in the packed layout, ``None`` when a
            trained rollout has none.
        packed_turn_index: ``[N, R]`` long, :attr:`turn_index` in the packed layout (-1 where no
            turn), what each micro-batch slices for the loss.
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
    columns: dict[str, list[object]]
    rollout_logprobs: Tensor | None
    packed_turn_index: Tensor | None = None
    extras: dict[str, object] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        trajectories: Sequence[Trajectory],
        items: Sequence[QAItem] = (),
        scores: Scores | None = None,
        *,
        pad_id: int,
        sample_mask: Tensor | None = None,
        over_budget: str = "train",
    ) -> RolloutBatch:
        """The batch of ``trajectories``: packing, masks and turn indices computed here, once.

        Args:
            items: the questions (``items[t.group]``); their columns go to :attr:`columns`.
            scores: the rollouts' rewards; their extras start :attr:`extras`.
            sample_mask: ``[N]``; by default every rollout, or every rollout but an over-budget
                one with ``over_budget="drop"`` (``optim.over_budget``).
        """
        trajs = list(trajectories)
        mask = response_mask(trajs)  # [N, L], the response layout
        tokens = pack(trajs, pad_id) if trajs else None  # [N, W], the packed layout
        behaviour = packed_rollout_logprobs(trajs, tokens.response_width) if tokens else None
        turns = turn_index(trajs, width=mask.shape[1])
        packed_turns = right_aligned(turns, trajs, tokens.response_width, -1) if tokens else None
        if sample_mask is None:
            sample_mask = torch.tensor(
                [over_budget == "train" or t.status != STATUS_OVER_BUDGET for t in trajs],
                dtype=torch.bool,
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
            turn_index=turns,
            turns=[[turn.shifted(-t.prompt_len) for turn in t.turns] for t in trajs],
            stats=[dict(t.stats) for t in trajs],
            columns=dataset_columns([items[t.group] for t in trajs]) if items else {},
            rollout_logprobs=behaviour,
            packed_turn_index=packed_turns,
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

    def estimate(self, estimator: Callable[[AdvantageInputs], Tensor], name: str) -> Tensor:
        """The advantages of this batch by ``estimator`` (bound from the ``advantage`` section
        named ``name``) on its :meth:`advantage_inputs`, checked (:func:`check_advantages`);
        ``[0]`` for an empty batch."""
        if not self.trajectories:
            return torch.zeros(0)
        inputs = self.advantage_inputs()
        return check_advantages(estimator(inputs), inputs, name)

    def plan(self, advantages: Tensor, options: PlanOptions) -> UpdatePlan:
        """Micro-batches of similar length (less padding), sliced, with their accumulation weights.

        A micro-batch holds at most ``options.micro_batch_size`` rollouts and, when
        ``options.max_tokens`` is set, at most that many padded tokens (rows x longest row; a
        single longer rollout still gets its own micro-batch): activation memory grows with
        tokens, and search trajectories vary in length.

        With ``skip_zero``, rollouts whose advantage is exactly 0 or that are masked out are left
        out: their loss terms are 0, and :func:`~framework.algorithms.stats.aggregation.chunk_weights`
        keeps them in the batch totals, so loss and gradient equal the full batch's.

        With ``whole_groups``, the unit packed into micro-batches is a group (the rollouts sharing
        ``Trajectory.group``) instead of a rollout: every group lies in exactly one micro-batch, so
        the loss sees each group complete. A group larger than ``micro_batch_size`` (or
        ``max_tokens``) gets a micro-batch of its own; ``skip_zero`` leaves out only groups none of
        whose rollouts would be trained.

        With ``mini_batch_size`` below the batch's rollouts, the batch is first split into PPO
        mini-batches, each one optimiser step (:func:`~framework.rl.update.policy_update`): whole
        groups in batch order, as many as fit in ``mini_batch_size`` rollouts (as verl splits a
        batch of ``n`` rollouts per prompt into ``ppo_mini_batch_size`` prompts; a group larger
        than the size is a mini-batch alone). Each mini-batch is packed into micro-batches as
        above, and their weights sum to the mini-batch's own loss (its aggregation over its own
        rows, skipped ones included): :attr:`UpdatePlan.spans`.

        Args:
            advantages: ``[N]`` or ``[N, L]`` (the response layout).
        """
        o, n = options, len(self.trajectories)
        adv_rows = advantages.reshape(n, -1).abs().sum(-1) if n else advantages
        trained = [
            not o.skip_zero or (bool(self.sample_mask[i]) and float(adv_rows[i]) != 0.0)
            for i in range(n)
        ]
        minis = self._mini_rows(o.mini_batch_size)
        chunks: list[Tensor] = []
        weights: list[float] = []
        spans: list[tuple[int, int]] = []
        for rows in minis:
            groups = self._packed_rows(rows, trained, o)
            mine = [torch.tensor(g, dtype=torch.long) for g in groups]
            if len(minis) == 1:  # the whole batch: its own totals (no re-indexing)
                weights += chunk_weights(self.trained_mask, mine, o.agg)
            else:  # normalised over the mini-batch's rows alone, as its own loss
                where = {r: k for k, r in enumerate(rows)}
                local = [torch.tensor([where[int(i)] for i in c], dtype=torch.long) for c in mine]
                weights += chunk_weights(self.trained_mask[rows], local, o.agg)
            spans.append((len(chunks), len(chunks) + len(mine)))
            chunks += mine
        micro = self.micro_batches(chunks, advantages) if chunks else []
        probe = None  # the entropy's rows when no planned row has a trained token to measure it
        if n and not any(bool(self.trained_mask[c].any()) for c in chunks):
            probe = self.micro_batches([torch.arange(min(n, o.micro_batch_size))])[0]
        if advantages.dim() == 1:
            abs_mean = float(advantages.abs().mean())
        else:
            abs_mean = float(masked_mean(advantages.abs(), self.token_mask))
        return UpdatePlan(
            chunks,
            weights,
            micro,
            rollouts=n,
            skipped=n - sum(len(c) for c in chunks),
            pad_id=self.pad_id,
            probe=probe,
            advantage_abs_mean=abs_mean,
            spans=spans if len(minis) > 1 else [],
            mini_rollouts=[len(rows) for rows in minis] if len(minis) > 1 else [],
            mini_batched=o.mini_batch_size > 0,
        )

    def _mini_rows(self, size: int) -> list[list[int]]:
        """The rows of each PPO mini-batch: whole groups in batch order, as many as fit in
        ``size`` rollouts (a larger group alone); one mini-batch of every row when ``size`` is 0
        or the batch fits in one."""
        n = len(self.trajectories)
        if size <= 0 or n <= size:
            return [list(range(n))]
        by_group: dict[int, list[int]] = {}
        for i, g in enumerate(self.group_index.tolist()):
            by_group.setdefault(g, []).append(i)
        minis: list[list[int]] = []
        for rows in by_group.values():
            if minis and len(minis[-1]) + len(rows) <= size:
                minis[-1].extend(rows)
            else:
                minis.append(list(rows))
        return minis

    def _packed_rows(self, rows: list[int], trained: list[bool], o: PlanOptions) -> list[list[int]]:
        """``rows`` (one mini-batch) packed into micro-batches of similar length: units (rollouts,
        or whole groups with ``o.whole_groups``) in ascending length, at most
        ``o.micro_batch_size`` rollouts and ``o.max_tokens`` padded tokens each."""
        units: list[list[int]]
        if o.whole_groups:
            by_group: dict[int, list[int]] = {}
            for i in rows:
                by_group.setdefault(int(self.group_index[i]), []).append(i)
            units = [unit for unit in by_group.values() if any(trained[i] for i in unit)]
        else:
            units = [[i] for i in rows if trained[i]]
        longest = [max(self.lengths[i] for i in unit) for unit in units]
        groups: list[list[int]] = []
        for u in sorted(range(len(units)), key=lambda u: longest[u]):
            unit, cur = units[u], groups[-1] if groups else []  # ascending: the longest row so far
            fits = bool(groups) and len(cur) + len(unit) <= o.micro_batch_size
            if fits and o.max_tokens and (len(cur) + len(unit)) * longest[u] > o.max_tokens:
                fits = False
            if fits:
                cur.extend(unit)
            else:
                groups.append(list(unit))
        return groups

    def rows_of_extras(self, rows: Tensor) -> dict[str, object]:
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
        t, behaviour, turns, out = self.tokens, self.rollout_logprobs, self.packed_turn_index, []
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
                    turn_index=None if turns is None else turns[rows, -resp:],
                )
            )
        return out


def _rows_of(value: object, rows: Tensor, n: int) -> object:
    """``value``'s entries of ``rows`` when it has one per rollout (first dimension ``n``)."""
    if isinstance(value, Tensor) and value.dim() > 0 and value.shape[0] == n:
        return value[rows]
    if isinstance(value, (list, tuple)) and len(value) == n:
        return [value[int(i)] for i in rows]
    return value


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


class BatchView:
    """The rollouts and questions of ``self.batch``, for a record that holds a step's
    :class:`RolloutBatch` (what an input provider reads, what a step returns)."""

    batch: RolloutBatch

    @property
    def trajectories(self) -> list[Trajectory]:
        """The ``N`` rollouts, grouped (``items[t.group]`` is a rollout's question)."""
        return self.batch.trajectories

    @property
    def items(self) -> list[QAItem]:
        """The question of each group; a rollout's ``group`` indexes them."""
        return self.batch.items
