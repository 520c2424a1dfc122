"""Lightning glue of the SFT stage: length-bucketed batches and the NLL training step."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, IterableDataset, Sampler

from framework.algorithms.losses.sft import sft_loss
from framework.training.schedule import adamw, lr_multiplier
from framework.training.scoring import teacher_forced
from framework.types import Trajectory


class LengthBuckets(Sampler[list[int]]):
    """Batches of similar length: shuffle, cut into pools of ``pool`` batches, sort each pool by
    length, batch it, and shuffle the batches. Padding falls to a few tokens per row."""

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int, pool: int = 16) -> None:
        self.lengths = list(lengths)
        self.batch_size = batch_size
        self.seed = seed
        self.pool = pool
        self.epoch = 0

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        rng = random.Random(self.seed * 1_000_003 + self.epoch)
        self.epoch += 1
        order = list(range(len(self.lengths)))
        rng.shuffle(order)
        size = self.batch_size * self.pool
        batches = []
        for start in range(0, len(order), size):
            chunk = sorted(order[start : start + size], key=lambda i: self.lengths[i])
            batches += [
                chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size)
            ]
        rng.shuffle(batches)
        return iter(batches)


def padding_fraction(trajectories: Sequence[Trajectory], batches: Sequence[list[int]]) -> float:
    """Share of padded positions over all batches (what bucketing saves)."""
    real = padded = 0
    for b in batches:
        lens = [len(trajectories[i].token_ids) for i in b]
        real += sum(lens)
        padded += max(lens) * len(lens)
    return 1.0 - real / padded if padded else 0.0


def padding_report(trajectories: Sequence[Trajectory], batch_size: int) -> dict[str, float]:
    """Padding share of length-bucketed batches against batches in dataset order."""
    buckets = list(LengthBuckets([len(t.token_ids) for t in trajectories], batch_size, 0))
    plain = [
        list(range(i, min(i + batch_size, len(trajectories))))
        for i in range(0, len(trajectories), batch_size)
    ]
    return {
        "padding_fraction_bucketed": round(padding_fraction(trajectories, buckets), 4),
        "padding_fraction_unbucketed": round(padding_fraction(trajectories, plain), 4),
    }


class _Batches(IterableDataset):
    """Every SFT step's batch in order, epoch after epoch, from step ``start`` on."""

    def __init__(self, lengths: list[int], batch_size: int, seed: int, epochs: int, start: int):
        self.lengths, self.batch_size, self.seed = lengths, batch_size, seed
        self.epochs, self.start = epochs, start

    def __len__(self) -> int:  # all steps: a resumed Lightning loop counts on from ``start``
        return len(LengthBuckets(self.lengths, self.batch_size, self.seed)) * self.epochs

    def __iter__(self) -> Iterator[list[int]]:
        buckets = LengthBuckets(self.lengths, self.batch_size, self.seed)
        steps = (b for _ in range(self.epochs) for b in buckets)  # each pass is the next epoch
        return itertools.islice(steps, self.start, None)


class SFTData(L.LightningDataModule):
    """Length-bucketed training batches as one stream of ``epochs`` passes, so that a run resumed
    from a checkpoint after step ``start`` trains exactly the batches the uninterrupted run would."""

    def __init__(
        self,
        train: list[Trajectory],
        val: list[Trajectory],
        batch_size: int,
        seed: int,
        *,
        epochs: int = 1,
        start: int = 0,
    ) -> None:
        super().__init__()
        self.train, self.val = train, val
        self.batch_size, self.seed = batch_size, seed
        self.epochs, self.start = epochs, start

    @property
    def steps_per_epoch(self) -> int:
        return -(-len(self.train) // self.batch_size)

    def train_dataloader(self) -> DataLoader:
        lengths = [len(t.token_ids) for t in self.train]
        batches = _Batches(lengths, self.batch_size, self.seed, self.epochs, self.start)
        return DataLoader(
            batches,
            batch_size=None,
            collate_fn=lambda rows: [self.train[i] for i in rows],
        )

    def val_dataloader(self) -> DataLoader:
        # a list of trajectories is a map-style dataset (DataLoader's stub wants a Dataset)
        return DataLoader(self.val, batch_size=self.batch_size, collate_fn=list)  # type: ignore[arg-type]


def token_groups(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Indices of ``lengths`` in groups whose padded size (rows x longest) is at most
    ``max_tokens``, shortest first; a sequence longer than ``max_tokens`` is a group of its own,
    and ``max_tokens`` 0 puts everything in one group."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    if not max_tokens:
        return [order] if order else []
    groups: list[list[int]] = []
    for i in order:  # ascending: the newcomer is the longest of its group
        if groups and (len(groups[-1]) + 1) * lengths[i] <= max_tokens:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


class SFTModule(L.LightningModule):
    """Next-token NLL on assistant tokens of expert trajectories (prompt and tool responses masked)."""

    def __init__(self, policy: Any, pad_id: int, optim: Any, total_steps: int) -> None:
        super().__init__()
        self.policy = policy
        self.pad_id = pad_id
        self.optim = optim
        self.total_steps = total_steps

    def transfer_batch_to_device(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
        return batch

    def _loss(self, batch: list[Trajectory]) -> tuple[torch.Tensor, int]:
        (scored,) = teacher_forced(self.policy, batch, self.pad_id, device=self.device)
        mask = scored.batch.loss_mask
        return sft_loss(scored.logprobs, mask), int(mask.sum())

    def _micro_batched_loss(self, batch: list[Trajectory]) -> tuple[torch.Tensor, int]:
        """The batch's mean token NLL, computed in micro-batches of at most
        ``optim.micro_batch_tokens`` padded tokens: each micro-batch but the last is backpropagated
        here, weighted by its share of the batch's trained tokens, so the gradients add up to the
        whole batch's; the last one's weighted loss is returned for Lightning to backpropagate,
        carrying the whole batch's value for the log."""
        groups = token_groups([len(t.token_ids) for t in batch], self.optim.micro_batch_tokens)
        if len(groups) == 1:
            return self._loss(batch)
        total = sum(sum(t.loss_mask) for t in batch)
        value = torch.zeros((), device=self.device)
        last = None
        for k, rows in enumerate(groups):
            loss, tokens = self._loss([batch[i] for i in rows])
            weighted = loss * (tokens / max(total, 1))
            value = value + weighted.detach()
            if k < len(groups) - 1:
                self.trainer.strategy.backward(weighted, None)
            else:
                last = weighted
        assert last is not None
        return last + (value - last.detach()), total

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        # Lightning zeroes gradients between training_step and its backward of the returned loss,
        # which would drop the micro-batches backpropagated inside the step: training_step zeroes
        # them itself, before its first micro-batch
        pass

    def training_step(self, batch: list[Trajectory], batch_idx: int) -> torch.Tensor:
        self.policy.train()
        self.policy.zero_grad(set_to_none=True)
        loss, tokens = self._micro_batched_loss(batch)
        self.log("sft/loss", loss, prog_bar=True, batch_size=len(batch))
        self.log("sft/tokens", float(tokens), batch_size=len(batch))
        schedule: Any = self.lr_schedulers()  # the one LambdaLR of configure_optimizers
        self.log("sft/lr", schedule.get_last_lr()[0], batch_size=len(batch))
        return loss

    def validation_step(self, batch: list[Trajectory], batch_idx: int) -> None:
        loss, _ = self._loss(batch)
        self.log("sft/val_loss", loss, prog_bar=True, batch_size=len(batch), on_epoch=True)

    def configure_optimizers(self) -> Any:
        o = self.optim
        params = [p for p in self.policy.parameters() if p.requires_grad]
        # foreach, not fused: Lightning's gradient clipping (automatic optimisation) refuses fused
        # optimisers under mixed precision, where they would unscale gradients themselves
        opt = adamw(params, fused=False, lr=o.lr, weight_decay=o.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lr_multiplier(o.schedule, o.warmup_steps, self.total_steps)
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
