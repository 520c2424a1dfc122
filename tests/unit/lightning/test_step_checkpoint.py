"""StepCheckpoint with a real Lightning trainer on a two-weight model: a disk that fills up while a
checkpoint is written keeps the previous checkpoint as the newest complete one, says so, and the
run resumes from it once there is space."""

from __future__ import annotations

import errno

import lightning as L
import lightning.fabric.plugins.io.torch_io as torch_io
import pytest
import torch
from torch.utils.data import DataLoader

from framework.lightning.callbacks import StepCheckpoint
from framework.training.checkpoints import CheckpointWriteError, newest_checkpoint


class Line(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return ((self.layer(batch) - 2 * batch) ** 2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(tmp_path, ckpt_path=None) -> tuple[L.Trainer, StepCheckpoint, Line]:
    torch.manual_seed(0)
    # every batch the same, so a resumed run sees what the uninterrupted one saw at each step
    data = DataLoader([torch.ones(1, 1)] * 8, batch_size=None)
    callback = StepCheckpoint(tmp_path / "checkpoints", every_n_steps=2, keep=1, max_steps=6)
    trainer = L.Trainer(
        max_steps=6,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
        default_root_dir=str(tmp_path),
    )
    module = Line()
    trainer.fit(module, data, ckpt_path=ckpt_path)
    return trainer, callback, module


@pytest.mark.filterwarnings("ignore:.*resuming from a checkpoint that ended before the epoch")
def test_disk_full_mid_checkpoint_keeps_the_previous_one_and_the_run_resumes(tmp_path, monkeypatch):
    save = torch_io._atomic_save

    def disk_full_at_step_4(checkpoint, path):
        if str(path).endswith("step-000004.ckpt.tmp"):
            with open(path, "wb") as fh:  # half the file made it to disk, then the disk was full
                fh.write(b"\x80" * 512)
            raise OSError(errno.ENOSPC, "No space left on device")
        save(checkpoint, path)

    monkeypatch.setattr(torch_io, "_atomic_save", disk_full_at_step_4)
    with pytest.raises(CheckpointWriteError) as info:
        fit(tmp_path)
    folder = tmp_path / "checkpoints"
    assert info.value.errno == errno.ENOSPC
    message = str(info.value)
    assert f"could not write {folder / 'step-000004.ckpt'} (No space left on device)" in message
    assert f"the newest complete checkpoint is still {folder / 'step-000002.ckpt'}" in message
    assert "Fix: free disk space" in message
    assert sorted(p.name for p in folder.iterdir()) == ["step-000002.ckpt"]  # no partial file
    kept = torch.load(folder / "step-000002.ckpt", weights_only=False)
    assert kept["global_step"] == 2

    monkeypatch.setattr(torch_io, "_atomic_save", save)  # space freed: resume from step 2
    trainer, callback, resumed = fit(tmp_path, ckpt_path=str(newest_checkpoint(folder)))
    assert trainer.global_step == 6 and callback.saved_step == 6
    assert sorted(p.name for p in folder.iterdir()) == ["step-000006.ckpt"]
    _, _, reference = fit(tmp_path / "reference")  # nothing was lost: same weights as no fault
    for got, want in zip(resumed.parameters(), reference.parameters(), strict=True):
        assert torch.equal(got, want)
    torch.manual_seed(0)
    assert not torch.equal(resumed.layer.weight, Line().layer.weight)  # and it did train
