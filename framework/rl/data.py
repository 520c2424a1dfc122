"""Questions for training steps and validation, as Lightning dataloaders.

A training "batch" is one step's groups. The sampler lives in the data module and is stateful: the
state saved in a checkpoint is the one after the last step that was trained (not after the batch
Lightning prefetched), so a resumed run draws exactly the questions the uninterrupted run would.
Under data parallelism every rank draws the same global step and trains its own share of groups.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, IterableDataset

from framework.data.schema import QAItem
from framework.registry.protocols import ObservedState, ObservingSampler
from framework.types import GroupRequest


@dataclass
class StepBatch:
    """The groups one rank trains in one step, and the sampler state right after drawing them."""

    groups: list[GroupRequest]
    sampler_state: dict[str, Any]


class _Steps(IterableDataset):
    def __init__(self, dm: QuestionDataModule) -> None:
        self.dm = dm

    def __len__(self) -> int:  # the progress bar's total
        return self.dm.max_steps

    def __iter__(self) -> Iterator[StepBatch]:
        while True:
            groups = self.dm.sampler.next_groups()
            yield StepBatch(self.dm.shard(groups), self.dm.sampler.state_dict())


class _Once(IterableDataset):
    def __init__(self, rows: list[int]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return 1

    def __iter__(self) -> Iterator[list[int]]:
        yield self.rows


class QuestionDataModule(L.LightningDataModule):
    """Training steps from the sampler, and a fixed validation subset.

    Args:
        train: the training questions.
        validation: validation questions (may be empty: validation is then skipped).
        sampler: a built sampler (``next_groups()``, ``state_dict()``, ``load_state_dict()``).
        max_steps: training steps of the run (progress bar total).
        val_questions: size of the validation subset (0 = all).
        seed: picks the validation subset.
    """

    def __init__(
        self,
        train: Sequence[QAItem],
        validation: Sequence[QAItem],
        sampler: Any,
        *,
        max_steps: int,
        val_questions: int,
        seed: int,
    ) -> None:
        super().__init__()
        self.train_items = list(train)
        self.val_items = list(validation)
        self.sampler = sampler
        self.max_steps = max_steps
        self.consumed = sampler.state_dict()
        gen = torch.Generator().manual_seed(seed)
        order = torch.randperm(len(self.val_items), generator=gen).tolist()
        self.val_rows = order[: val_questions or len(order)]

    def shard(self, groups: list[GroupRequest]) -> list[GroupRequest]:
        """This rank's groups of a global step (all of them on one device); the reserve groups
        of dynamic sampling are shared out the same way, so each rank refills from its own."""
        trainer = self.trainer
        world = trainer.world_size if trainer is not None else 1
        rank = trainer.global_rank if trainer is not None else 0
        primary = [g for g in groups if not g.reserve]
        reserve = [g for g in groups if g.reserve]
        if len(primary) < world:
            raise ValueError(
                f"[sampler.questions_per_step] got {len(primary)}; expected at least the "
                f"{world} training processes. Fix: raise sampler.questions_per_step."
            )
        return primary[rank::world] + reserve[rank::world]

    def observe(self, step: int, result: Any, reward_cfg: Any) -> None:
        """Give an adaptive sampler (one with ``observe``) every process's trained groups of
        ``step`` (a :class:`~framework.rl.step.StepResult` of this process's share)."""
        if not isinstance(self.sampler, ObservingSampler):
            return
        mine = result.group_outcomes(reward_cfg)
        parts: list[Any] = [mine]
        trainer = self.trainer
        if trainer is not None and trainer.world_size > 1:
            import torch.distributed as dist

            parts = [None] * trainer.world_size
            dist.all_gather_object(parts, mine)
        questions, rewards, correct = ([x for p in parts for x in p[i]] for i in range(3))
        self.sampler.observe(step, questions, rewards, correct)

    def mark_trained(self, batch: StepBatch) -> None:
        """Record that ``batch`` was trained (what a checkpoint resumes after). An adaptive
        sampler adds the observations received up to this step (``state_after``)."""
        state = dict(batch.sampler_state)
        sampler = self.sampler
        self.consumed = sampler.state_after(state) if isinstance(sampler, ObservedState) else state

    def train_dataloader(self) -> DataLoader:
        self.sampler.load_state_dict(self.consumed)
        return DataLoader(_Steps(self), batch_size=None, collate_fn=_identity)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(_Once(self.val_rows), batch_size=None, collate_fn=_identity)

    def state_dict(self) -> dict[str, Any]:
        return {"sampler": dict(self.consumed)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.consumed = dict(state["sampler"])
        self.sampler.load_state_dict(self.consumed)


def _identity(x: Any) -> Any:
    return x
