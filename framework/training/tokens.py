"""Trajectories as padded token tensors, and the policy's log-probabilities of their tokens.

Rows are left padded, exactly as the transformers backend generates, so every sequence ends in the
last column and its response lies in the last ``R`` columns (``R`` = the longest response). Position
ids follow the attention mask, so a padded row is scored as it was generated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from framework.training.sharding import is_sharded
from framework.types import Trajectory


@dataclass
class TokenBatch:
    """Left-padded sequences of a micro-batch.

    Attributes:
        input_ids: ``[n, W]`` prompt and response tokens, padded on the left.
        attention_mask: ``[n, W]`` 1 on real tokens.
        position_ids: ``[n, W]`` positions counted over real tokens only.
        loss_mask: ``[n, R]`` the trajectories' loss masks over the last ``R`` columns (1 only on
            model-generated tokens).
    """

    input_ids: Tensor
    attention_mask: Tensor
    position_ids: Tensor
    loss_mask: Tensor

    @property
    def response_width(self) -> int:
        return self.loss_mask.shape[1]

    def to(self, device: Any) -> TokenBatch:
        return TokenBatch(*(t.to(device) for t in vars(self).values()))


def pack(trajectories: Sequence[Trajectory], pad_id: int) -> TokenBatch:
    """Left-pad ``trajectories`` into one batch (raises on an empty sequence)."""
    if not trajectories:
        raise ValueError("pack() needs at least one trajectory")
    width = max(len(t.token_ids) for t in trajectories)
    resp = max(max(len(t.token_ids) - t.prompt_len for t in trajectories), 1)
    n = len(trajectories)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    loss = torch.zeros((n, width), dtype=torch.long)
    for row, t in enumerate(trajectories):
        k = len(t.token_ids)
        ids[row, width - k :] = torch.tensor(t.token_ids, dtype=torch.long)
        attn[row, width - k :] = 1
        loss[row, width - k :] = torch.tensor(t.loss_mask, dtype=torch.long)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    return TokenBatch(ids, attn, positions, loss[:, width - resp :])


def response_mask(trajectories: Sequence[Trajectory]) -> Tensor:
    """``[N, L]`` bool: 1 on the response tokens the model generated, left-aligned (column ``j`` is
    response token ``j``; ``L`` the longest response, at least 1)."""
    width = max((len(t.loss_mask) - t.prompt_len for t in trajectories), default=1)
    mask = torch.zeros((len(trajectories), max(width, 1)), dtype=torch.bool)
    for i, t in enumerate(trajectories):
        m = torch.tensor(t.loss_mask[t.prompt_len :], dtype=torch.bool)
        mask[i, : m.numel()] = m
    return mask


def turn_index(trajectories: Sequence[Trajectory], width: int | None = None) -> Tensor:
    """``[N, L]`` long: per response token the model turn it belongs to (a tool response belongs to
    the turn that called the tool); -1 on padding and in rollouts that recorded no turns.

    Same layout as :func:`response_mask` (whose width ``L`` is
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


def right_aligned(
    values: Tensor, trajectories: Sequence[Trajectory], width: int, fill: float = 0
) -> Tensor:
    """Per-token ``values [n, L]`` in :func:`response_mask`'s layout moved to :func:`pack`'s: row
    ``k``'s response ends in the last of ``width`` columns (``width`` >= every response length).

    Returns:
        ``[n, width]``, ``fill`` where a row has no response token.
    """
    out = values.new_full((values.shape[0], width), fill)
    for k, t in enumerate(trajectories):
        r = len(t.token_ids) - t.prompt_len
        if r > 0:
            out[k, width - r :] = values[k, :r]
    return out


def packed_rollout_logprobs(trajectories: Sequence[Trajectory], width: int) -> Tensor | None:
    """The rollout backend's log-probs (``Trajectory.rollout_logprobs``) in :func:`pack`'s
    response layout: ``[n, width]`` float32, each row's last tokens in the last columns, 0 before.

    Returns:
        ``None`` when a trajectory with generated tokens (loss mask 1) has no rollout log-probs;
        trajectories without generated tokens need none (their row is 0).
    """
    out = torch.zeros((len(trajectories), width), dtype=torch.float32)
    for k, t in enumerate(trajectories):
        logps = t.rollout_logprobs
        if logps is None or len(logps) != len(t.token_ids):
            if any(t.loss_mask):
                return None
            continue
        take = min(width, len(logps))
        if take:
            out[k, width - take :] = torch.tensor(logps[len(logps) - take :], dtype=torch.float32)
    return out


#: trained positions projected onto the vocabulary at a time: the logits of one chunk (1,024 x
#: 49,152 float32 entries, 200 MB for SmolLM2) are the only ones alive, in forward and in backward
VOCAB_CHUNK_TOKENS = 1024


def token_logprobs(
    model: Any,
    batch: TokenBatch,
    *,
    entropy: bool = False,
    chunk: int = VOCAB_CHUNK_TOKENS,
) -> tuple[Tensor, Tensor | None]:
    """Log-probabilities ``[n, R]`` of the last ``R`` tokens of each row under ``model``.

    Only positions whose token is trained (``batch.loss_mask``) are scored: the decoder runs over the
    whole sequence, but the vocabulary projection, the only step whose cost scales with the
    vocabulary, runs on those positions alone (prompts and tool responses are most of a search
    trajectory), ``chunk`` positions at a time: each chunk's logits are recomputed in the backward
    pass instead of kept, so memory holds one chunk's logits, not every trained token's. Other
    positions get 0. Entropy of the next-token distribution at the same positions is returned too
    when asked (no gradient). Models whose logits are post-processed (soft-capping, logit scales)
    take the plain full-logits path.
    """
    r = batch.response_width
    targets = batch.input_ids[:, -r:]
    sel = batch.loss_mask.bool()
    if _plain_head(model):
        hidden = model.get_decoder()(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
            use_cache=False,
        ).last_hidden_state
        h = hidden[:, -(r + 1) : -1, :][sel]  # [T, H]: position t predicts token t + 1
        picked, values = chunked_head_logprobs(
            model.get_output_embeddings(), h, targets[sel], chunk=chunk, entropy=entropy
        )
    else:
        out = model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
            logits_to_keep=r + 1,
            use_cache=False,
        )
        logits = out.logits[:, :-1, :].float()[sel]  # [T, V]
        picked, values = _picked_and_entropy(logits, targets[sel], entropy)
    logp = torch.zeros(sel.shape, dtype=picked.dtype, device=picked.device)
    logp = logp.masked_scatter(sel, picked)
    ent = None
    if values is not None:
        ent = torch.zeros(sel.shape, dtype=values.dtype, device=values.device)
        ent = ent.masked_scatter(sel, values)
    return logp, ent


def chunked_head_logprobs(
    head: Any, h: Tensor, targets: Tensor, *, chunk: int, entropy: bool = False
) -> tuple[Tensor, Tensor | None]:
    """``log_softmax(head(h))`` at ``targets`` ``[T]`` (and the entropy ``[T]``, no gradient),
    ``chunk`` rows of ``h`` ``[T, H]`` at a time. With a gradient, each chunk runs under activation
    checkpointing: its logits are freed after the forward and recomputed in the backward (one more
    projection of the chunk, a few percent of a step), so peak memory holds one chunk's logits."""
    from torch.utils.checkpoint import checkpoint

    picked: list[Tensor] = []
    ents: list[Tensor] = []
    grad = torch.is_grad_enabled() and (
        h.requires_grad or any(p.requires_grad for p in head.parameters())
    )
    for start in range(0, h.shape[0], max(chunk, 1)):
        hc, tc = h[start : start + chunk], targets[start : start + chunk]
        if grad:
            p, e = checkpoint(_head_picked, head, hc, tc, entropy, use_reentrant=False)
        else:
            p, e = _head_picked(head, hc, tc, entropy)
        picked.append(p)
        if e is not None:
            ents.append(e)
    if not picked:  # no trained position: keep the graph (a zero-size projection)
        return _head_picked(head, h, targets, entropy)
    return torch.cat(picked), (torch.cat(ents) if entropy else None)


def _head_picked(
    head: Any, h: Tensor, targets: Tensor, entropy: bool
) -> tuple[Tensor, Tensor | None]:
    return _picked_and_entropy(head(h).float(), targets, entropy)


def _picked_and_entropy(
    logits: Tensor, targets: Tensor, entropy: bool
) -> tuple[Tensor, Tensor | None]:
    """Each row's log-probability of its target ``[T]``, and its entropy ``[T]`` (detached)."""
    lse = torch.logsumexp(logits, dim=-1)
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
    values = None
    if entropy:
        with torch.no_grad():
            values = lse.detach() - (logits.softmax(-1) * logits).sum(-1)
    return picked, values


def _plain_head(model: Any) -> bool:
    """True when logits are exactly ``lm_head(decoder(x))`` (no soft-capping or scaling) and the
    decoder and head may be called apart: not for a sharded policy, whose root unit (embeddings,
    final norm, head) is gathered only by the model's own forward
    (:func:`~framework.training.sharding.shard_policy`)."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "get_decoder") or is_sharded(model):
        return False
    special = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier")
    return not any(getattr(config, k, None) not in (None, 1, 1.0) for k in special)
