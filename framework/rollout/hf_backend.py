"""The transformers ``generate`` backend (CPU and GPU)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from framework.config import ComponentConfig, Problem, check_choice, check_range, option
from framework.registry.kinds import ROLLOUT_BACKENDS
from framework.rollout.decoding import (
    PrefixCache,
    decode_with_logprobs,
    supports_prefix_reuse,
    use_packed_decode_attention,
)
from framework.rollout.policy import PolicyConfig, load_policy
from framework.training.precision import native_bf16_on
from framework.types import Generation

DECODERS = ("loop", "generate")
COMPUTE_DTYPES = ("auto", "float32", "bfloat16")


@dataclass
class SamplingConfig:
    """Decoding parameters shared by every backend."""

    temperature: float = option(1.0, "0 = greedy")
    top_p: float = option(1.0, "nucleus sampling mass")
    top_k: int = option(0, "0 = no top-k filter")
    seed: int = option(0, "sampling seed (advanced per call)")

    def problems(self) -> list[Problem]:
        out = check_range(self.temperature, "temperature", low=0.0)
        out += check_range(self.top_p, "top_p", low=0.0, high=1.0, low_inclusive=False)
        out += check_range(self.top_k, "top_k", low=0)
        return out


@dataclass
class TransformersBackendConfig(ComponentConfig):
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    micro_batch: int = option(
        32,
        "sequences per decoding batch, sorted by length (at 64 agent rollouts in "
        "flight, 16, 32 and 64 took 165, 155 and 167 s: docs/benchmarks/decode_profile.md)",
    )
    decoder: str = option(
        "loop", "loop (framework/rollout/decoding.py, faster) or generate (model.generate)"
    )
    prefix_cache_tokens: int = option(
        65536,
        "decoder=loop: KV entries kept for reuse across turns, in tokens (SmolLM2-135M: "
        "23 KB each in bf16, 46 KB in fp32); 0 = off. Entries of finished rollouts are dropped "
        "at the next turn, so this caps the rollouts in flight times their length: 16,384 "
        "lost half the prefixes at 64 rollouts in flight (docs/benchmarks/decode_profile.md)",
    )
    compute_dtype: str = option(
        "auto",
        "dtype of the weights rollouts run with: auto (bfloat16 where the hardware "
        "computes bf16 natively, else float32), float32 or bfloat16; a policy trained in "
        "another dtype is copied into this one at every weight sync",
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.micro_batch, "micro_batch", low=1)
        out += check_choice(self.decoder, "decoder", DECODERS)
        out += check_choice(self.compute_dtype, "compute_dtype", COMPUTE_DTYPES)
        out += check_range(self.prefix_cache_tokens, "prefix_cache_tokens", low=0)
        return out


def cut_generation(
    new: list[int],
    stop: Sequence[str],
    eos_ids: set[int],
    limit: int,
    decode: Callable[[list[int]], str],
    logprobs: Sequence[float] | None = None,
) -> Generation:
    """The tokens a sequence really generated: up to and including the first end-of-sequence
    token or the token that completes a stop string, at most ``limit`` tokens.

    ``new`` may carry padding after the sequence finished (batched generation); it is dropped.
    ``logprobs``, aligned with ``new``, are cut to the same tokens.
    """
    end, finish = min(len(new), limit), "length"
    for i, t in enumerate(new[:end]):
        if t in eos_ids:
            end, finish = i + 1, "eos"
            break
    text = decode(new[:end])
    hits = [(text.find(s), s) for s in stop if s in text]
    if hits:
        pos, s = min(hits)
        target = pos + len(s)
        lo, hi = 1, end  # smallest prefix whose decoded text contains the stop string
        while lo < hi:
            mid = (lo + hi) // 2
            if len(decode(new[:mid])) >= target:
                hi = mid
            else:
                lo = mid + 1
        end, finish = lo, "stop"
    kept = None if logprobs is None else [float(x) for x in logprobs[:end]]
    return Generation(list(new[:end]), finish, kept)


@ROLLOUT_BACKENDS.register("transformers", config=TransformersBackendConfig)
class TransformersBackend:
    """Batched sampling with left padding, a KV cache and stop strings, either through the
    framework's decoding loop (finished rows leave the batch; KV entries are reused across turns)
    or through ``model.generate``.

    The loop records each token's sampling log-probability (:attr:`Generation.logprobs`);
    ``decoder=generate`` does not (its generations carry ``logprobs=None``), so rollout correction
    (``loss.rollout_correction``) needs ``decoder=loop``.

    Rollouts run with weights in ``cfg.compute_dtype`` (:func:`rollout_dtype`). When the given
    policy holds another dtype (a policy trained with fp32 master weights), the backend keeps its
    own copy in the rollout dtype, refreshed by :meth:`update_weights`; ``owns_model`` lets it
    convert the given model in place instead (an evaluation, which trains nothing).

    Args:
        cfg: policy, sampling and batch size.
        model: an already loaded policy (e.g. the one being trained); loaded from ``cfg`` if None.
        tokenizer: its tokenizer (required with ``model``).
        owns_model: the caller hands ``model`` over (it may be converted in place).
    """

    def __init__(
        self,
        *,
        cfg: TransformersBackendConfig,
        model: Any = None,
        tokenizer: Any = None,
        owns_model: bool = False,
    ) -> None:
        self.cfg = cfg
        if model is None:
            model, tokenizer = load_policy(cfg.policy)
            owns_model = True
        self.dtype, self.dtype_reason = rollout_dtype(cfg.compute_dtype, cfg.policy.device)
        self.own_copy = False
        first = next(model.parameters())
        # a model handed over is also moved to where rollouts run (a sharded policy's plain copy
        # is made on the CPU, whatever the rollout device: framework/rl/module.py)
        elsewhere = owns_model and first.device != torch.device(cfg.policy.device)
        if first.dtype != self.dtype or elsewhere:
            if not owns_model:
                import copy

                model = copy.deepcopy(model).requires_grad_(False)
                self.own_copy = True
            # the rollout copy lives where rollouts run (cfg.policy.device), not where the trained
            # module happens to be when the backend is built (the train app builds it before
            # Lightning moves the policy to its GPU: a copy left there rolled out on the CPU)
            model = model.to(device=cfg.policy.device, dtype=self.dtype).eval()
        self.model, self.tokenizer = model, tokenizer
        if cfg.decoder == "loop":
            use_packed_decode_attention(model)
        self.eos_ids = {
            i
            for i in [*_as_list(model.generation_config.eos_token_id), tokenizer.eos_token_id]
            if i is not None
        }
        self.pad_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        )
        self.calls = 0
        #: work done by the decoding loop so far: prefill_tokens, decode_tokens, forward_calls
        self.counters: dict[str, int] = {}
        keep = cfg.prefix_cache_tokens if supports_prefix_reuse(model) else 0
        self.prefix_cache = PrefixCache(keep) if cfg.decoder == "loop" and keep > 0 else None

    def generate(
        self,
        sequences: Sequence[Sequence[int]],
        max_new_tokens: Sequence[int],
        stop: Sequence[str],
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        """New tokens for each sequence (see :class:`~framework.registry.protocols.RolloutBackend`).

        ``seeds`` (one per sequence) make each sequence's random numbers a function of its seed
        and the token's position alone (``decoder=loop``); without them a call draws from torch's
        generator, seeded per call. The logits a number is compared with are not bit-for-bit
        independent of the other sequences: the kernels sum in an order set by the rows and
        padding of the batch (on a CPU, the bf16 and fp32 matrix kernels give one row other
        last bits at another row count), so a draw at a boundary of the distribution can pick
        another token in another batch."""
        out: list[Generation | None] = [None] * len(sequences)
        if self.prefix_cache is not None:
            self.prefix_cache.new_call()
        order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))  # less padding
        step = self.cfg.micro_batch
        for start in range(0, len(order), step):
            idx = order[start : start + step]
            gens = self._generate_batch(
                [sequences[i] for i in idx],
                [max_new_tokens[i] for i in idx],
                stop,
                None if seeds is None else [seeds[i] for i in idx],
            )
            for i, g in zip(idx, gens, strict=True):
                out[i] = g
        return out  # type: ignore[return-value]

    def _generate_batch(
        self,
        seqs: list[Sequence[int]],
        limits: list[int],
        stop: Sequence[str],
        seeds: list[int] | None = None,
    ) -> list[Generation]:
        import torch

        s = self.cfg.sampling
        self.calls += 1
        torch.manual_seed(s.seed * 1_000_003 + self.calls)
        decode_text = lambda t: self.tokenizer.decode(t, skip_special_tokens=False)  # noqa: E731
        logps: list[list[float]] | list[None]
        if self.cfg.decoder == "loop":
            new, logps = decode_with_logprobs(
                self.model,
                seqs,
                limits,
                stop=stop,
                eos_ids=self.eos_ids,
                pad_id=self.pad_id,
                token_text=decode_text,
                temperature=s.temperature,
                top_k=s.top_k,
                top_p=s.top_p,
                prefix_cache=self.prefix_cache,
                seeds=seeds,
                counters=self.counters,
            )
        else:
            new, logps = self._model_generate(seqs, limits, stop), [None] * len(seqs)
        return [
            cut_generation(n, stop, self.eos_ids, lim, decode_text, lp)
            for n, lim, lp in zip(new, limits, logps, strict=True)
        ]

    def _model_generate(
        self, seqs: list[Sequence[int]], limits: list[int], stop: Sequence[str]
    ) -> list[list[int]]:
        import torch

        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, s in enumerate(seqs):  # left padding: every sequence ends at the last column
            ids[row, width - len(s) :] = torch.tensor(list(s), dtype=torch.long)
            mask[row, width - len(s) :] = 1
        device = next(self.model.parameters()).device
        sampling = self.cfg.sampling
        kwargs: dict[str, bool | float | int | None] = {"do_sample": sampling.temperature > 0}
        if sampling.temperature > 0:
            kwargs.update(
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=sampling.top_k or None,
            )
        with torch.inference_mode():
            generated = self.model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=max(limits),
                stop_strings=list(stop) or None,
                tokenizer=self.tokenizer,
                pad_token_id=self.pad_id,
                use_cache=True,
                **kwargs,
            )
        return generated[:, width:].tolist()

    def restart(self) -> None:
        """Go on as a new backend with the same weights would: no KV entries kept from earlier
        calls, and the per-call seed count back at 0. An evaluation starts each of its waves here
        (:func:`framework.eval.harness.rollout_records`), so a wave decodes the same whether it
        follows other waves or opens a resumed evaluation in a new process."""
        self.calls = 0
        if self.prefix_cache is not None:
            self.prefix_cache.clear()

    def update_weights(self, model: torch.nn.Module) -> None:
        """Generate with ``model``'s weights from now on (no copy when it is the same module);
        KV entries computed with the old weights are dropped."""
        if self.prefix_cache is not None:
            self.prefix_cache.clear()
        if model is not self.model:
            self.model.load_state_dict(model.state_dict())  # cast to the rollout dtype


def rollout_dtype(requested: str, device: str = "cpu") -> tuple[torch.dtype, str]:
    """The torch dtype rollouts run in for ``compute_dtype=requested``, and why.

    ``auto`` is bfloat16 where the hardware computes it natively (a CPU with AVX512-BF16, AMX or
    Arm BF16; a GPU that supports bf16), float32 elsewhere: emulated bf16 is slower than fp32.
    Measured on 2 cores of an AMD EPYC with ``avx512_bf16``: 64 agent rollouts of SmolLM2-135M
    generated 194 tokens/s with bf16 weights and 97 in fp32 (``tools/bench/roofline.py``,
    docs/benchmarks/roofline.md).
    """
    import torch

    if requested != "auto":
        return getattr(torch, requested), f"set explicitly (rollout.compute_dtype={requested})"
    native, why = native_bf16_on(device)
    return (torch.bfloat16 if native else torch.float32), f"auto: {why}"


def _as_list(value: int | list[int] | tuple[int, ...] | None) -> list[int]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]
