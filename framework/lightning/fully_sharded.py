"""``trainer.strategy=fsdp``: Lightning's ``ModelParallelStrategy`` with one mesh dimension.

Imported only when a run uses it (it imports Lightning); the settings live in
:mod:`framework.lightning.strategy`, the sharding itself in :mod:`framework.training.sharding`.
"""

from __future__ import annotations

from lightning.pytorch.strategies import ModelParallelStrategy


class FullyShardedStrategy(ModelParallelStrategy):
    """``ModelParallelStrategy`` whose device mesh has every process of every node in its
    ``data_parallel`` dimension (the one FSDP2 shards over) and none in ``tensor_parallel``.

    The parent's ``"auto"`` sizes would make the mesh ``num_nodes x devices``: data parallel
    across nodes, tensor parallel within a node, which this framework does not apply.
    """

    def setup_environment(self) -> None:
        self._data_parallel_size = self.num_nodes * self.num_processes
        self._tensor_parallel_size = 1
        super().setup_environment()
