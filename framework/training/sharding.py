"""FSDP2 sharding of a policy (``torch.distributed.fsdp.fully_shard``) and what reads a sharded
one whole: the rollout copy's weight sync and the export.

:func:`shard_policy` makes every decoder layer one sharded unit and the model itself the root unit
(embeddings, final norm and head); the Lightning modules call it in ``configure_model`` under
``trainer.strategy=fsdp`` (:mod:`framework.lightning.strategy`). Plain torch: no Lightning.

A sharded policy's parameters are DTensors, each process holding ``1 / world_size`` of every one.
Every forward and backward of a sharded unit is a collective (an all-gather, and a
reduce-scatter after the backward), so every process must run as many of them as the others, in
the same order; the update pads its passes for that (:func:`framework.rl.update.policy_update`).
Rollouts therefore never run on the sharded policy: :class:`GatheredRollouts` gives the
backend a plain copy whose weights are gathered whole after each update.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from framework.config import option
from framework.problems import Problem, check_choice
from framework.registry.protocols import RolloutBackend, Tokenizer
from framework.types import Generation

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

#: dtypes the gathered parameters compute in and gradients are reduced in
FSDP_DTYPES = ("float32", "bfloat16", "float16")
#: ``trainer.fsdp.sharding``: whether parameters are sharded again after each forward
FSDP_SHARDINGS = ("full_shard", "shard_grad_op")
#: ``process_group_backend`` values; ``auto`` is Lightning's choice (nccl on GPUs, gloo on CPUs)
PROCESS_GROUP_BACKENDS = ("auto", "gloo", "nccl", "mpi")


@dataclass
class FSDPConfig:
    """FSDP2 (``torch.distributed.fsdp.fully_shard``) settings, read with ``trainer.strategy=fsdp``.

    Each sharded unit (a decoder layer, and the root with the embeddings, final norm and head)
    all-gathers its parameters before its forward and backward and reduce-scatters its
    gradients after the backward; every process keeps ``1 / world_size`` of the parameters,
    gradients and optimiser state. Activation checkpointing is ``trainer.gradient_checkpointing``,
    the one switch for every strategy (the model's own per-decoder-layer recomputation, which
    FSDP2 recomputes inside the layer's unit).
    """

    wrap: str = option(
        "auto",
        "the module class that is one sharded unit: auto = the model's decoder layer (the "
        "class of model.model.layers, else the first of the model's _no_split_modules present), "
        "or a class name such as Qwen2DecoderLayer",
    )
    sharding: str = option(
        "full_shard",
        "full_shard: each unit's parameters are sharded again after its forward and gathered "
        "again for its backward (ZeRO-3); shard_grad_op: they stay gathered from forward to "
        "backward (one all-gather fewer per unit, the gathered layers' memory kept)",
    )
    param_dtype: str = option(
        "bfloat16",
        "dtype of the gathered parameters the forward and backward compute in; the sharded "
        "master weights and the optimiser state keep the model's dtype (float32)",
    )
    reduce_dtype: str = option("float32", "dtype gradients are reduce-scattered in")
    cpu_offload: bool = option(
        False,
        "keep the sharded parameters, gradients and optimiser state in CPU memory (each unit is "
        "copied to the GPU for its forward and backward; the optimiser steps on the CPU)",
    )
    process_group_backend: str = option(
        "auto", "auto (nccl on GPUs, gloo on CPUs), gloo, nccl or mpi"
    )

    def problems(self) -> list[Problem]:
        out = check_choice(self.sharding, "sharding", FSDP_SHARDINGS)
        out += check_choice(self.param_dtype, "param_dtype", FSDP_DTYPES)
        out += check_choice(self.reduce_dtype, "reduce_dtype", FSDP_DTYPES)
        out += check_choice(
            self.process_group_backend, "process_group_backend", PROCESS_GROUP_BACKENDS
        )
        if not self.wrap.strip():
            out.append(Problem("wrap", self.wrap, "auto or a module class name", "set wrap=auto"))
        return out


class ShardingError(ValueError):
    """The policy has no module of the class ``trainer.fsdp.wrap`` names."""


def decoder_layer_class(model: torch.nn.Module, wrap: str = "auto") -> type[torch.nn.Module]:
    """The module class each sharded unit is: ``wrap`` when it names a class found in ``model``;
    for ``auto``, the class of ``model.model.layers`` (Hugging Face decoder-only models), else the
    first of the model's ``_no_split_modules`` (the blocks transformers never splits across
    devices) that ``model`` holds.

    Raises:
        ShardingError: no module of that class in ``model`` (the error lists the candidates).
    """
    classes = {type(m).__name__: type(m) for m in model.modules()}
    if wrap != "auto":
        if wrap in classes:
            return classes[wrap]
        hint = f"one of the model's _no_split_modules {_no_split(model)}, or auto"
        raise ShardingError(
            f"[trainer.fsdp.wrap] got {wrap!r}; expected a module class of the policy "
            f"({type(model).__name__}). Fix: set trainer.fsdp.wrap to {hint}."
        )
    layers = getattr(getattr(model, "model", None), "layers", None)
    if isinstance(layers, torch.nn.ModuleList) and len(layers) > 0:
        return type(layers[0])
    for name in _no_split(model):
        if name in classes:
            return classes[name]
    raise ShardingError(
        f"[trainer.fsdp.wrap] got 'auto'; expected a policy with model.layers or a "
        f"_no_split_modules class ({type(model).__name__} has neither). Fix: set "
        "trainer.fsdp.wrap to the class name of the policy's repeated block."
    )


def _no_split(model: torch.nn.Module) -> list[str]:
    return list(getattr(model, "_no_split_modules", None) or [])


def fully_shard_kwargs(fsdp: FSDPConfig, mesh: DeviceMesh | None = None) -> dict[str, Any]:
    """The keyword arguments of ``fully_shard`` for the ``trainer.fsdp`` settings: the mesh, the
    mixed-precision policy (``param_dtype`` / ``reduce_dtype``), the CPU offload policy and
    ``reshard_after_forward`` (``full_shard``: True; ``shard_grad_op``: False)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy

    return {
        "mesh": mesh,
        "mp_policy": MixedPrecisionPolicy(
            param_dtype=getattr(torch, fsdp.param_dtype),
            reduce_dtype=getattr(torch, fsdp.reduce_dtype),
        ),
        "offload_policy": CPUOffloadPolicy() if fsdp.cpu_offload else OffloadPolicy(),
        "reshard_after_forward": fsdp.sharding == "full_shard",
    }


def shard_policy(model: torch.nn.Module, fsdp: FSDPConfig, mesh: DeviceMesh) -> int:
    """Shard ``model`` in place over ``mesh`` (1-D): each module of its decoder-layer class
    (:func:`decoder_layer_class`) one unit, then the model itself as the root unit. Returns the
    number of layer units. A model already sharded is left as it is (Lightning may call
    ``configure_model`` again, for a validation after the fit).

    Raises:
        ShardingError: see :func:`decoder_layer_class`.
    """
    from torch.distributed.fsdp import FSDPModule, fully_shard

    if isinstance(model, FSDPModule):
        return sum(isinstance(m, FSDPModule) for m in model.modules()) - 1
    layer = decoder_layer_class(model, fsdp.wrap)
    kwargs = fully_shard_kwargs(fsdp, mesh)
    units = [m for m in model.modules() if isinstance(m, layer)]
    for unit in units:
        fully_shard(unit, **kwargs)
    fully_shard(model, **kwargs)
    return len(units)


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds DTensor parameters (sharded by FSDP2)."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def full_state_dict(model: torch.nn.Module, *, rank0_only: bool = False) -> dict[str, Tensor]:
    """``model``'s state dict with whole tensors: its own for a plain model; for a sharded one
    gathered from every process (a collective: every process calls it), on every process, or with
    ``rank0_only`` on rank 0 only, in CPU memory (the others get an empty dict)."""
    if not is_sharded(model):
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=rank0_only)
    state: dict[str, Tensor] = {}
    for key, value in get_model_state_dict(model, options=options).items():
        assert isinstance(value, Tensor)  # a module's state holds tensors only
        state[key] = value
    # a parameter under two names (tied embeddings) is gathered into two tensors: make them one
    # again, as in a plain model's state dict, so that save_pretrained drops the tied copy
    first: dict[int, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        kept = first.setdefault(id(p), name)
        if kept != name and kept in state and name in state:
            state[name] = state[kept]
    return state


class GatheredRollouts:
    """A rollout backend over a plain copy of a sharded policy: ``update_weights(policy)`` gathers
    the sharded policy's weights whole (every process calls it, as every step does) into the
    copy, then hands the copy to the wrapped backend (which converts it to its rollout dtype, or
    reloads its engine from it).

    Args:
        backend: the backend built on ``copy`` (the transformers backend generates with it).
        copy: the plain model the backend was built on, unsharded (made before sharding).
    """

    def __init__(self, backend: RolloutBackend, copy: torch.nn.Module) -> None:
        self.backend = backend
        self.copy = copy
        self.tokenizer: Tokenizer = backend.tokenizer

    @property
    def calls(self) -> int:
        """The wrapped backend's ``generate`` calls (0 when it does not count them)."""
        return int(getattr(self.backend, "calls", 0))

    @calls.setter
    def calls(self, value: int) -> None:
        if hasattr(self.backend, "calls"):
            self.backend.calls = value  # a CountsCalls backend

    def generate(
        self,
        sequences: Sequence[Sequence[int]],
        max_new_tokens: Sequence[int],
        stop: Sequence[str],
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        return self.backend.generate(sequences, max_new_tokens, stop, seeds)

    def update_weights(self, model: torch.nn.Module) -> None:
        state = full_state_dict(model)
        with torch.no_grad():
            self.copy.load_state_dict(state)  # cast to the copy's dtype, on the copy's device
        self.backend.update_weights(self.copy)
