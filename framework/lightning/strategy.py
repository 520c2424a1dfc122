"""The distributed strategies' settings (``trainer.ddp``, ``trainer.fsdp``) and the Lightning
strategy object a run gets from them.

``trainer.strategy=ddp`` builds Lightning's ``DDPStrategy`` with the ``trainer.ddp`` settings.
``trainer.strategy=fsdp`` builds
:class:`~framework.lightning.fully_sharded.FullyShardedStrategy`, Lightning's
``ModelParallelStrategy`` with the whole world one sharding dimension; the modules then shard their
policy with FSDP2 (``torch.distributed.fsdp.fully_shard``, :mod:`framework.training.sharding`) in
their ``configure_model`` hook. FSDP2 rather than Lightning's ``FSDPStrategy`` (FSDP1): Lightning
2.6 refuses ``FSDPStrategy`` on a CPU accelerator, so FSDP1 could not be run or tested here, while
FSDP2 runs over gloo on CPU processes; FSDP2 shards each parameter on its own (DTensor), so frozen
and trained parameters may share a unit; and its unit of sharding is any module the caller names,
here the model's decoder layer. Any other ``trainer.strategy`` string goes to Lightning unchanged.

Heavy imports (Lightning, torch.distributed) stay inside the functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from framework.config import option
from framework.problems import Problem, check_choice
from framework.training.sharding import PROCESS_GROUP_BACKENDS, FSDPConfig

if TYPE_CHECKING:
    from lightning.pytorch.strategies import Strategy

#: ``trainer.strategy`` values this module builds an object for
DDP, FSDP = "ddp", "fsdp"
#: Lightning precisions ``ModelParallelStrategy`` accepts (``auto`` resolves to one of them)
FSDP_PRECISIONS = ("auto", "32-true", "32", "bf16-mixed", "bf16-true", "16-true")


@dataclass
class DDPConfig:
    """``torch.nn.parallel.DistributedDataParallel`` settings, read with ``trainer.strategy=ddp``."""

    find_unused_parameters: bool = option(
        False,
        "search the autograd graph for parameters that got no gradient after every backward (a "
        "model with branches some steps skip; costs a graph walk per backward). Unneeded here: "
        "every pass reaches every trained parameter",
    )
    gradient_as_bucket_view: bool = option(
        False,
        "gradients are views into DDP's all-reduce buckets instead of copies (saves one "
        "gradient's worth of memory)",
    )
    process_group_backend: str = option(
        "auto", "auto (nccl on GPUs, gloo on CPUs), gloo, nccl or mpi"
    )

    def problems(self) -> list[Problem]:
        return check_choice(
            self.process_group_backend, "process_group_backend", PROCESS_GROUP_BACKENDS
        )


def strategy_problems(
    strategy: str, accelerator: str, precision: str, ddp: DDPConfig, fsdp: FSDPConfig
) -> list[Problem]:
    """What the strategy settings cannot run on ``accelerator`` (paths relative to ``trainer``)."""
    out: list[Problem] = []
    on_cpu = accelerator == "cpu"
    used = {DDP: ("ddp", ddp.process_group_backend), FSDP: ("fsdp", fsdp.process_group_backend)}
    if strategy in used and on_cpu:
        section, backend = used[strategy]
        if backend not in ("auto", "gloo", "mpi") and backend in PROCESS_GROUP_BACKENDS:
            out.append(
                Problem(
                    f"{section}.process_group_backend",
                    backend,
                    "auto, gloo or mpi on CPU (nccl needs GPUs)",
                    f"set trainer.{section}.process_group_backend=auto",
                )
            )
    if strategy == FSDP:
        if precision not in FSDP_PRECISIONS:
            out.append(
                Problem(
                    "precision",
                    precision,
                    f"one of {list(FSDP_PRECISIONS)} with strategy=fsdp (what Lightning's "
                    "ModelParallelStrategy accepts)",
                    "use trainer.precision=32-true and set trainer.fsdp.param_dtype for mixed "
                    "precision",
                )
            )
        if on_cpu and fsdp.cpu_offload:
            out.append(
                Problem(
                    "fsdp.cpu_offload",
                    True,
                    "false with accelerator=cpu (the shards already live in CPU memory)",
                    "set trainer.fsdp.cpu_offload=false",
                )
            )
        if on_cpu and "float16" in (fsdp.param_dtype, fsdp.reduce_dtype):
            field = "param_dtype" if fsdp.param_dtype == "float16" else "reduce_dtype"
            out.append(
                Problem(
                    f"fsdp.{field}",
                    "float16",
                    "float32 or bfloat16 on CPU (fp16 needs a GPU)",
                    f"set trainer.fsdp.{field}=float32",
                )
            )
    sharded_elsewhere = strategy != FSDP and strategy.startswith(("fsdp", "deepspeed"))
    if sharded_elsewhere and on_cpu:  # Lightning refuses both on CPU, with a traceback
        out.append(
            Problem(
                "strategy",
                strategy,
                "ddp, fsdp or auto on CPU (Lightning runs its other FSDP strategies and "
                "DeepSpeed only on GPUs)",
                "use trainer.strategy=fsdp (FSDP2, runs on CPU processes too) or "
                "trainer.strategy=ddp, or run trainer=deepspeed on a GPU machine",
            )
        )
    return out


def build_strategy(strategy: str, ddp: DDPConfig, fsdp: FSDPConfig) -> str | Strategy:
    """The ``strategy`` argument of ``lightning.Trainer``: a strategy object built from the
    settings for ``ddp`` and ``fsdp``, any other name unchanged (Lightning resolves it)."""
    if strategy == DDP:
        from lightning.pytorch.strategies import DDPStrategy

        return DDPStrategy(
            find_unused_parameters=ddp.find_unused_parameters,
            gradient_as_bucket_view=ddp.gradient_as_bucket_view,
            process_group_backend=_backend(ddp.process_group_backend),
        )
    if strategy == FSDP:
        from framework.lightning.fully_sharded import FullyShardedStrategy

        # checkpoints stay one file, assembled on rank 0, as with the other strategies
        return FullyShardedStrategy(
            save_distributed_checkpoint=False,
            process_group_backend=_backend(fsdp.process_group_backend),
        )
    return strategy


def _backend(name: str) -> str | None:
    return None if name == "auto" else name
