"""A batched sampling loop for Hugging Face causal LMs that does less work than ``generate``.

``TransformersBackend`` uses it by default (``decoder=loop``); ``decoder=generate`` keeps
``model.generate``. What it saves, and why each matters on a CPU (``tools/bench/train_step.py``):

- **Finished rows leave the batch.** ``generate`` keeps decoding every row until the longest one
  ends; here a row's KV entries are dropped when it ends, so a step costs what its live rows cost.
- **Per-row budgets and cheap stop checks.** Each row stops at its own ``max_new_tokens``; stop
  strings are looked for in the decoded text of the last few tokens only.
- **The KV cache grows in place.** It is allocated once for the prompt and the budget, instead of
  being concatenated (copied whole) at every step.
- **Identical sequences prefilled once.** The samples of one question start from the same prompt:
  its KV entries are computed once and copied to each sample's row.
- **Prefix reuse across turns.** After a call, each row's KV entries are kept, keyed by the tokens
  they encode (:class:`PrefixCache`). A later sequence that extends a kept one, such as the next
  turn of a search agent (previous context + tool response), prefills only its new tokens. The
  cache must be cleared whenever the weights change (the backend does it in ``update_weights``).
- **Prefill in groups of like length, decode in one batch.** Rows are prefilled in groups whose
  new parts have about the same length (:func:`prefill_groups`), so padding costs little; each
  row's whole sequence is then placed right-aligned in one decoding batch as wide as the longest
  sequence (not as the longest reused prefix plus the longest new part), which is what every
  decode step's attention reads.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Logits with every token outside the top-k and outside the nucleus set to -inf.

    The nucleus keeps, in order of decreasing probability, each token whose more likely
    predecessors hold less than ``top_p`` of the mass (so at least the most likely token).
    """
    out = logits
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(out, top_k, dim=-1).values[..., -1:]
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = torch.sort(out, dim=-1, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs
        drop_sorted = before >= top_p
        drop_sorted[..., 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        out = out.masked_fill(drop, float("-inf"))
    return out


def sample_tokens(
    logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """One token per row of ``logits`` [B, V]: argmax at temperature 0, else a draw from
    softmax(filtered logits / temperature) with torch's global generator.

    The draw inverts the cumulative distribution with one uniform number per row; a token of
    probability 0 is never drawn. (``torch.multinomial`` draws an exponential variate for every
    vocabulary entry, which took 12 % of SmolLM2's decode time on a CPU.)
    """
    return sample_with_logprobs(logits, temperature, top_k, top_p)[0]


_MASK32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (PCG's output permutation) of int64 values in ``[0, 2**32)``; every
    product stays below 2**63, so int64 arithmetic is exact."""
    x = (x * 747796405 + 2891336453) & _MASK32
    word = ((x >> ((x >> 28) + 4)) ^ x) * 277803737 & _MASK32
    return ((word >> 22) ^ word) & _MASK32


def counter_uniforms(seeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """One uniform number in (0, 1) per row, a pure function of the row's ``seed`` (int64) and the
    ``position`` of the token being drawn: a rollout's draws do not depend on which other rollouts
    share its batch, which slot it sits in, or how often anything else sampled before it."""
    x = _mix32(seeds & _MASK32)
    x = _mix32(x ^ ((seeds >> 32) & _MASK32))
    x = _mix32(x ^ (positions & _MASK32))
    return (x.double() + 0.5) / 2.0**32


def sample_with_logprobs(
    logits: torch.Tensor,
    temperature: float,
    top_k: int = 0,
    top_p: float = 1.0,
    uniforms: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`sample_tokens` (the same draw) and each drawn token's log-probability ``[B]`` under
    the distribution it was drawn from: ``log_softmax(filtered logits / temperature)`` (the
    unprocessed ``log_softmax(logits)`` at temperature 0), in float32.

    ``uniforms`` ``[B]`` in (0, 1) replace the draws from torch's global generator (per-row seeded
    sampling, :func:`counter_uniforms`)."""
    if temperature == 0:
        picked = logits.argmax(dim=-1)
        scaled = logits.float()
    else:
        scaled = filter_logits(logits.float() / temperature, top_k, top_p)
        cdf = torch.cumsum(torch.softmax(scaled, dim=-1), dim=-1)
        if uniforms is None:
            u = torch.rand((cdf.shape[0], 1), device=cdf.device) * cdf[:, -1:]
        else:
            u = uniforms.to(device=cdf.device, dtype=cdf.dtype).view(-1, 1) * cdf[:, -1:]
        picked = torch.searchsorted(cdf, u, right=True).squeeze(-1)
        picked = picked.clamp_(max=cdf.shape[-1] - 1)
    chosen = scaled.gather(-1, picked.unsqueeze(-1)).squeeze(-1)
    return picked, chosen - torch.logsumexp(scaled, dim=-1)


@functools.cache
def _in_place_layer() -> type:
    """A cache-layer class whose buffer of ``capacity`` positions is allocated at the first update:
    later entries are written in place and the layer exposes views of the filled part
    (transformers' ``DynamicLayer`` concatenates, copying the whole cache at every step). Built on
    first use so that importing this module does not import transformers."""
    from transformers.cache_utils import DynamicLayer

    class InPlaceLayer(DynamicLayer):
        def __init__(self, capacity: int) -> None:
            super().__init__()
            self.capacity = capacity

        def lazy_initialization(self, k: torch.Tensor, v: torch.Tensor) -> None:
            super().lazy_initialization(k, v)
            shape = (*k.shape[:-2], self.capacity, k.shape[-1])
            self._k, self._v, self._n = k.new_zeros(shape), v.new_zeros(shape), 0

        def update(  # type: ignore[override]  # the same call, the parameters named k and v
            self, k: torch.Tensor, v: torch.Tensor, *args: object, **kwargs: object
        ) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(k, v)
            n, add = self._n, k.shape[-2]
            if k.dtype != self._k.dtype:  # entries kept under another autocast setting
                self._k, self._v = self._k.to(k.dtype), self._v.to(v.dtype)
            if n + add > self._k.shape[-2]:  # past the planned budget: grow (not in normal use)
                more = (*self._k.shape[:-2], max(n + add, 2 * self._k.shape[-2]), self._k.shape[-1])
                self._k = torch.cat([self._k[..., :n, :], self._k.new_zeros(more)], dim=-2)
                self._v = torch.cat([self._v[..., :n, :], self._v.new_zeros(more)], dim=-2)
            self._k[..., n : n + add, :] = k
            self._v[..., n : n + add, :] = v
            self._n = n + add
            self.keys, self.values = self._k[..., : self._n, :], self._v[..., : self._n, :]
            return self.keys, self.values

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            self._k, self._v = self._k[indices], self._v[indices]
            self.keys, self.values = self._k[..., : self._n, :], self._v[..., : self._n, :]

    return InPlaceLayer


@dataclass
class _Entry:
    tokens: tuple[int, ...]
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer, [heads, len(tokens), head_dim]
    call: int = 0  # the caller's call (:meth:`PrefixCache.new_call`) that stored it


class PrefixCache:
    """KV entries of finished sequences, keyed by their tokens, at most ``max_tokens`` in all
    (the oldest are dropped first). An entry is handed out once: taking it removes it.

    A caller that sends every continuing sequence in its next call (the agent loop sends every
    rollout still in flight at each turn) marks its calls with :meth:`new_call`: an entry that
    was not taken by the call after the one that stored it belongs to a sequence that ended, and
    is dropped, so the cache holds the rollouts in flight rather than filling up with finished
    ones and pushing live entries out."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._entries: list[_Entry] = []
        self.hits = 0
        self.reused_tokens = 0
        self.call = 0
        self.evicted_tokens = 0  # live entries dropped because the cache was full

    def new_call(self) -> None:
        """Start a call: drop the entries stored before the previous call and not taken since."""
        self.call += 1
        self._entries = [e for e in self._entries if e.call >= self.call - 1]

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def tokens(self) -> int:
        return sum(len(e.tokens) for e in self._entries)

    def clear(self) -> None:
        self._entries.clear()

    def take(self, seq: Sequence[int]) -> _Entry | None:
        """The longest entry that is a proper prefix of ``seq`` (removed from the cache)."""
        best = None
        for e in self._entries:
            n = len(e.tokens)
            if (
                n < len(seq)
                and (best is None or n > len(best.tokens))
                and tuple(seq[:n]) == e.tokens
            ):
                best = e
        if best is not None:
            self._entries.remove(best)
            self.hits += 1
            self.reused_tokens += len(best.tokens)
        return best

    def put(self, entry: _Entry) -> None:
        if len(entry.tokens) == 0 or len(entry.tokens) > self.max_tokens:
            return
        entry.call = self.call
        self._entries.append(entry)
        while self.tokens > self.max_tokens:
            self.evicted_tokens += len(self._entries.pop(0).tokens)


#: the attention implementation :func:`use_packed_decode_attention` installs
PACKED_SDPA = "seekrl_sdpa"


def _packed_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    **kw: Any,  # transformers' attention keywords, passed on as they came
) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, except that a one-token query without a mask on a CPU takes
    the path it takes with a mask (the query heads of a key/value head packed as one block)
    instead of SDPA's ``enable_gqa``, which the CPU kernel runs about 2.7x slower per decode step
    (SmolLM2-135M, 32 rows x 800 keys, bf16: 500 against 183 ms). transformers drops the mask
    whenever no row is padded, which is when every row of a decoding batch has the same length,
    such as the samples of one question."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if (
        mask is None
        and query.shape[2] == 1
        and query.device.type == "cpu"
        and getattr(module, "num_key_value_groups", 1) > 1
    ):
        mask = torch.ones((query.shape[0], 1, 1, key.shape[2]), dtype=torch.bool, device=key.device)
    return sdpa_attention_forward(module, query, key, value, mask, **kw)


def use_packed_decode_attention(model: Any) -> bool:
    """Run ``model``'s SDPA attention through :func:`_packed_sdpa` (the same results; a faster
    kernel for unmasked one-token queries on a CPU). Returns whether it did: models with another
    attention implementation, or a transformers without ``AttentionInterface``, are left as
    they are."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft
    config = getattr(base, "config", None)
    if getattr(config, "_attn_implementation", None) not in ("sdpa", PACKED_SDPA):
        return False
    try:
        from transformers import AttentionInterface, AttentionMaskInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

        AttentionInterface.register(PACKED_SDPA, _packed_sdpa)
        # the masks SDPA takes (an unknown name would get 2-D padding masks, as flash attention)
        AttentionMaskInterface.register(PACKED_SDPA, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
        base.set_attn_implementation(PACKED_SDPA)
    except (ImportError, AttributeError, ValueError, TypeError):
        return False
    return True


@runtime_checkable
class WrapsBaseModel(Protocol):
    """A wrapper of the model it trains (peft's ``PeftModel``)."""

    def get_base_model(self) -> torch.nn.Module: ...


def _accepts(model: torch.nn.Module, name: str) -> bool:
    base = model.get_base_model() if isinstance(model, WrapsBaseModel) else model  # peft wrappers
    try:
        return name in inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return False


def cache_argument(model: torch.nn.Module) -> str:
    """The keyword the model's forward takes its KV cache by: ``cache`` where transformers has it
    (5.24 here, which warns that ``past_key_values`` goes in 5.40), ``past_key_values`` before."""
    return "cache" if _accepts(model, "cache") else "past_key_values"


def returned_cache(result: Any) -> Any:
    """The KV cache a forward returned, under either name (see :func:`cache_argument`)."""
    cache = result.get("cache")
    return cache if cache is not None else result.past_key_values


def supports_prefix_reuse(model: torch.nn.Module) -> bool:
    """Whether the model's cache is plain full attention (no sliding windows, no recurrent state)."""
    config = getattr(model, "config", None)
    text = config.get_text_config(decoder=True) if config is not None else None
    types = getattr(text, "layer_types", None) or []
    return all(t == "full_attention" for t in types) and not getattr(text, "sliding_window", None)


def decode(
    model: torch.nn.Module, seqs: Sequence[Sequence[int]], limits: Sequence[int], **kwargs: Any
) -> list[list[int]]:
    """New tokens for each sequence: up to its limit, an end-of-sequence token, or the token that
    completes a stop string (the caller cuts exactly with ``cut_generation``).

    ``token_text`` decodes token ids (used on a short tail for stop strings). With
    ``prefix_cache``, kept prefixes are reused and every row's entries are kept afterwards.

    Takes :func:`decode_with_logprobs`'s arguments and returns its tokens alone.
    """
    return decode_with_logprobs(model, seqs, limits, **kwargs)[0]


def decode_with_logprobs(
    model: torch.nn.Module,
    seqs: Sequence[Sequence[int]],
    limits: Sequence[int],
    *,
    stop: Sequence[str],
    eos_ids: set[int],
    pad_id: int,
    token_text: Callable[[list[int]], str],
    temperature: float,
    top_k: int = 0,
    top_p: float = 1.0,
    prefix_cache: PrefixCache | None = None,
    seeds: Sequence[int] | None = None,
    counters: dict[str, int] | None = None,
) -> tuple[list[list[int]], list[list[float]]]:
    """:func:`decode`'s tokens and, aligned with them, each token's sampling log-probability
    (:func:`sample_with_logprobs`: log-softmax of the processed logits it was drawn from).

    With ``seeds`` (one per sequence), each token is drawn with :func:`counter_uniforms` of the
    sequence's seed and the token's position in it, instead of torch's global generator.

    ``counters`` (if given) accumulates ``prefill_tokens`` (tokens run through the model before the
    first draw: neither reused from the prefix cache nor a duplicate row's), ``decode_tokens``
    (tokens run one per row per step after it) and ``forward_calls``."""
    n_rows = len(seqs)
    device = next(model.parameters()).device
    out: list[list[int]] = [[] for _ in range(n_rows)]
    logps: list[list[float]] = [[] for _ in range(n_rows)]
    rows = [i for i in range(n_rows) if limits[i] > 0]
    if not rows:
        return out, logps
    b = len(rows)
    budget = max(limits[i] for i in rows)
    keep_logits = {"logits_to_keep": 1} if _accepts(model, "logits_to_keep") else {}
    cache_kw = cache_argument(model)
    # rows whose whole sequence is the same (the samples of one question at their first turn) are
    # prefilled once; their KV entries and last logits are then copied to every such row
    first_of: dict[tuple[int, ...], int] = {}
    expand = [first_of.setdefault(tuple(seqs[i]), r) for r, i in enumerate(rows)]
    unique = sorted(first_of.values())
    reuse = {
        r: prefix_cache.take(seqs[rows[r]]) if prefix_cache is not None else None for r in unique
    }
    with torch.inference_mode():
        kv, last = _prefill(
            model,
            {r: seqs[rows[r]] for r in unique},
            reuse,
            pad_id,
            keep_logits,
            cache_kw,
            counters,
        )
        # the batch: each row's whole sequence right-aligned in a block of the longest one's length
        lengths = [len(seqs[i]) for i in rows]
        width = max(lengths)
        mask = torch.zeros((b, width), dtype=torch.long)
        for r, n in enumerate(lengths):
            mask[r, width - n :] = 1
        mask = mask.to(device)
        step_pos = torch.tensor(lengths, dtype=torch.long, device=device).unsqueeze(-1) - 1

        from transformers import DynamicCache

        cache = DynamicCache()  # its layers are created at their first update, as InPlaceLayers
        # a factory of the layer class, which DynamicCache calls as it would the class itself
        cache.layer_class_to_replicate = functools.partial(  # type: ignore[assignment]
            _in_place_layer(), width + budget
        )
        for layer in range(len(kv[unique[0]])):
            k0, v0 = kv[unique[0]][layer]
            keys = k0.new_zeros((b, k0.shape[0], width, k0.shape[-1]))
            values = v0.new_zeros((b, v0.shape[0], width, v0.shape[-1]))
            for r in range(b):
                k, v = kv[expand[r]][layer]
                keys[r, :, width - lengths[r] :] = k
                values[r, :, width - lengths[r] :] = v
            cache.update(keys, values, layer)
        del kv
        first_logits: torch.Tensor | None = torch.stack([last[expand[r]] for r in range(b)])

    window = max((len(s.encode()) for s in stop), default=0)
    live = list(range(b))  # positions in the batch -> rows[...]
    row_seeds = torch.tensor([seeds[i] for i in rows], dtype=torch.long) if seeds else None
    with torch.inference_mode():
        step_ids: torch.Tensor | None = None
        while True:
            if first_logits is not None:
                logits, first_logits = first_logits, None
            else:
                result = model(
                    input_ids=step_ids,
                    attention_mask=mask,
                    position_ids=step_pos,
                    use_cache=True,
                    **{cache_kw: cache},
                    **keep_logits,
                )
                cache = returned_cache(result)
                logits = result.logits[:, -1]
                if counters is not None:
                    counters["forward_calls"] = counters.get("forward_calls", 0) + 1
                    counters["decode_tokens"] = counters.get("decode_tokens", 0) + len(live)
            uniforms = None
            if row_seeds is not None:
                at = [len(seqs[rows[j]]) + len(out[rows[j]]) for j in live]
                uniforms = counter_uniforms(row_seeds[live], torch.tensor(at, dtype=torch.long))
            picked, picked_logp = sample_with_logprobs(logits, temperature, top_k, top_p, uniforms)
            tokens, token_logp = picked.tolist(), picked_logp.tolist()
            ended = []
            for slot, tok in enumerate(tokens):
                i = rows[live[slot]]
                gen = out[i]
                gen.append(int(tok))
                logps[i].append(float(token_logp[slot]))
                if (
                    tok in eos_ids
                    or len(gen) >= limits[i]
                    or (window and any(s in token_text(gen[-window:]) for s in stop))
                ):
                    ended.append(slot)
            if ended and prefix_cache is not None:
                for slot in ended:
                    i = rows[live[slot]]
                    _keep(prefix_cache, cache, slot, mask[slot], (*seqs[i], *out[i][:-1]))
            if len(ended) == len(live):
                break
            step_pos = step_pos[:, -1:] + 1
            next_ids = torch.tensor(tokens, dtype=torch.long, device=device).unsqueeze(-1)
            if ended:
                gone = set(ended)
                keep = torch.tensor([s for s in range(len(live)) if s not in gone], device=device)
                cache.batch_select_indices(keep)
                mask, step_pos, next_ids = mask[keep], step_pos[keep], next_ids[keep]
                live = [live[s] for s in keep.tolist()]
            mask = torch.cat([mask, mask.new_ones((len(live), 1))], dim=-1)
            step_ids = next_ids
    return out, logps


#: a prefill group's padding: at most this share above its real new tokens
PREFILL_SLACK = 1.125
#: new tokens (padding included) of one prefill forward
PREFILL_GROUP_TOKENS = 8192


def prefill_groups(new_lengths: dict[int, int]) -> list[list[int]]:
    """Rows grouped for batched prefill, shortest first: a row joins the current group while the
    group's padded size (rows x its longest new part) stays within :data:`PREFILL_SLACK` of its
    real new tokens and within :data:`PREFILL_GROUP_TOKENS`. A prefill of a few hundred tokens
    already fills the matrix units by itself, so a row whose length matches nobody's is prefilled
    alone rather than padded (docs/benchmarks/decode_profile.md)."""
    groups: list[list[int]] = []
    current: list[int] = []
    total = 0
    for r in sorted(new_lengths, key=lambda r: new_lengths[r]):
        n = new_lengths[r]
        padded = (len(current) + 1) * n
        if current and (padded > PREFILL_SLACK * (total + n) or padded > PREFILL_GROUP_TOKENS):
            groups.append(current)
            current, total = [], 0
        current.append(r)
        total += n
    if current:
        groups.append(current)
    return groups


def _prefill(
    model: torch.nn.Module,
    seqs: dict[int, Sequence[int]],
    reuse: dict[int, _Entry | None],
    pad_id: int,
    keep_logits: dict[str, int],
    cache_kw: str,
    counters: dict[str, int] | None,
) -> tuple[dict[int, list[tuple[torch.Tensor, torch.Tensor]]], dict[int, torch.Tensor]]:
    """Run every row's new tokens (its sequence past the reused prefix ``reuse[r]``) through the
    model, in the groups of :func:`prefill_groups`; returns, per row, each layer's KV entries of
    its whole sequence (``[heads, len, head_dim]``) and the logits after its last token.

    A group's layout: row ``j`` holds its ``p_j`` reused tokens right-aligned in a block of
    ``P = max p``, then its ``s_j`` new tokens right-aligned in a block of ``S = max s``; the
    attention mask marks the holes and position ids count only real tokens, so every row sees
    exactly its own sequence."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    past = {r: len(e.tokens) if e is not None else 0 for r, e in reuse.items()}
    new_len = {r: len(seqs[r]) - past[r] for r in seqs}
    kv: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    last: dict[int, torch.Tensor] = {}
    for group in prefill_groups(new_len):
        g = len(group)
        width_p = max(past[r] for r in group)
        width_s = max(new_len[r] for r in group)
        ids = torch.full((g, width_s), pad_id, dtype=torch.long)
        mask = torch.zeros((g, width_p + width_s), dtype=torch.long)
        pos = torch.zeros((g, width_s), dtype=torch.long)
        for j, r in enumerate(group):
            p, n = past[r], new_len[r]
            ids[j, width_s - n :] = torch.tensor(list(seqs[r][p:]), dtype=torch.long)
            mask[j, width_p - p : width_p] = 1
            mask[j, width_p + width_s - n :] = 1
            pos[j, width_s - n :] = torch.arange(p, p + n)
        cache = DynamicCache()
        if width_p > 0:
            first = next(reuse[r] for r in group if reuse[r] is not None)
            assert first is not None
            for layer in range(len(first.kv)):
                k0, v0 = first.kv[layer]
                keys = k0.new_zeros((g, k0.shape[0], width_p, k0.shape[-1]))
                values = v0.new_zeros((g, v0.shape[0], width_p, v0.shape[-1]))
                for j, r in enumerate(group):
                    entry = reuse[r]
                    if entry is not None:
                        keys[j, :, width_p - past[r] :] = entry.kv[layer][0]
                        values[j, :, width_p - past[r] :] = entry.kv[layer][1]
                cache.update(keys, values, layer)
        mask = mask.to(device)
        result = model(
            input_ids=ids.to(device),
            attention_mask=mask,
            position_ids=pos.to(device),
            use_cache=True,
            **{cache_kw: cache},
            **keep_logits,
        )
        layers = returned_cache(result).layers
        for j, r in enumerate(group):
            cols = mask[j].nonzero().squeeze(-1)
            kv[r] = [(layer.keys[j][:, cols], layer.values[j][:, cols]) for layer in layers]
            last[r] = result.logits[j, -1]
        if counters is not None:
            counters["forward_calls"] = counters.get("forward_calls", 0) + 1
            counters["prefill_tokens"] = counters.get("prefill_tokens", 0) + sum(
                new_len[r] for r in group
            )
    return kv, last


def _keep(
    prefix_cache: PrefixCache,
    cache: Any,
    slot: int,
    row_mask: torch.Tensor,
    tokens: tuple[int, ...],
) -> None:
    """Store the KV entries of batch row ``slot``: the columns ``row_mask`` marks, which encode
    ``tokens`` (the sequence and every generated token but the last, which was never fed)."""
    cols = row_mask.nonzero().squeeze(-1)
    if len(cols) != len(tokens):
        raise RuntimeError(f"prefix cache: {len(cols)} KV columns for {len(tokens)} tokens")
    kv = [(layer.keys[slot][:, cols], layer.values[slot][:, cols]) for layer in cache.layers]
    prefix_cache.put(_Entry(tokens, kv))
