"""Teacher-forced scoring: the policy's log-probabilities of given tokens after a given context.

One function, :func:`teacher_forced`, serves every place that runs the policy over known token
sequences and reads the log-probabilities of some of their tokens: the SFT loss (with gradient),
the belief probes of IGPO and SPAE, InfoReasoner's reader, ArenaRL's policy judge, R³'s entropy
profile and HiLL's reliance (without). Rows are :class:`~framework.types.Trajectory`
objects whose loss mask marks the scored tokens; :func:`scoring_row` builds one from a context and
the tokens to score after it. Gradient is the caller's choice (``torch.no_grad()`` around the
loop, or not).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from framework.training.tokens import TokenBatch, pack, token_logprobs
from framework.types import Trajectory


@dataclass(frozen=True)
class ScoredChunk:
    """One forward pass of :func:`teacher_forced`.

    Attributes:
        start: index of the chunk's first row in the scored rows.
        batch: the packed rows (on the policy's device); ``batch.loss_mask`` ``[n, R]`` marks the
            scored tokens.
        logprobs: ``[n, R]`` log-probabilities of the scored tokens, 0 elsewhere.
        entropy: ``[n, R]`` next-token entropies at the scored tokens (0 elsewhere), when asked.
    """

    start: int
    batch: TokenBatch
    logprobs: Tensor
    entropy: Tensor | None


def scoring_row(
    context: Sequence[int], scored: Sequence[int], *, question: int = 0, group: int = 0
) -> Trajectory:
    """A row of :func:`teacher_forced`: ``scored`` teacher-forced after ``context`` (the loss mask
    on ``scored`` only)."""
    ids = [*context, *scored]
    return Trajectory(question, group, ids, [0] * len(context) + [1] * len(scored), len(context))


def teacher_forced(
    policy: Any,
    rows: Sequence[Trajectory],
    pad_id: int,
    *,
    batch_size: int | None = None,
    entropy: bool = False,
    device: Any = None,
) -> Iterator[ScoredChunk]:
    """Run ``policy`` over ``rows``, ``batch_size`` at a time (all at once for ``None``), and yield
    the log-probabilities of each row's loss-masked tokens
    (:func:`~framework.training.tokens.token_logprobs`), chunk by chunk.

    Args:
        policy: the causal LM (its mode and the gradient are the caller's).
        rows: the sequences; their loss masks mark the tokens scored.
        pad_id: padding id of the packed rows.
        batch_size: rows per forward pass; ``None``: one pass.
        entropy: also return the next-token entropies at the scored tokens.
        device: where the packed rows go; ``None``: the device of the policy's parameters.

    Yields:
        :class:`ScoredChunk` per forward pass, in row order.
    """
    if device is None:
        device = next(policy.parameters()).device
    step = batch_size or max(len(rows), 1)
    for lo in range(0, len(rows), step):
        batch = pack(rows[lo : lo + step], pad_id).to(device)
        logp, ent = token_logprobs(policy, batch, entropy=entropy)
        yield ScoredChunk(lo, batch, logp, ent)
