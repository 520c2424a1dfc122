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


def train(
    tmp_path, callback: StepCheckpoint, max_steps: int, ckpt_path=None
) -> tuple[L.Trainer, Line]:
    """``max_steps`` steps of :class:`Line` with ``callback``; every batch the same, so a resumed
    run sees what the uninterrupted one saw at each step."""
    torch.manual_seed(0)
    trainer = L.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
        default_root_dir=str(tmp_path),
    )
    module = Line()
    trainer.fit(module, DataLoader([torch.ones(1, 1)] * 8, batch_size=None), ckpt_path=ckpt_path)
    return trainer, module


def fit(tmp_path, ckpt_path=None) -> tuple[L.Trainer, StepCheckpoint, Line]:
    callback = StepCheckpoint(tmp_path / "checkpoints", every_n_steps=2, keep=1, max_steps=6)
    trainer, module = train(tmp_path, callback, 6, ckpt_path)
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


def run(tmp_path, **callback_args) -> tuple[StepCheckpoint, L.Trainer]:
    callback = StepCheckpoint(tmp_path / "checkpoints", keep=5, max_steps=4, **callback_args)
    return callback, train(tmp_path, callback, 4)[0]


def saved(tmp_path) -> list[str]:
    folder = tmp_path / "checkpoints"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_no_periodic_and_no_final_checkpoint_writes_nothing(tmp_path):
    run(tmp_path, every_n_steps=0, final=False)
    assert saved(tmp_path) == []


def test_every_n_steps_zero_writes_only_the_final_checkpoint(tmp_path):
    run(tmp_path, every_n_steps=0)
    assert saved(tmp_path) == ["step-000004.ckpt"]


def test_weights_only_checkpoints_hold_no_optimiser_state_and_cannot_resume(tmp_path):
    from framework.training.checkpoints import holds_training_state, weights_only_error

    callback, trainer = run(tmp_path / "w", every_n_steps=2, weights_only=True)
    run(tmp_path / "f", every_n_steps=2)
    assert (
        saved(tmp_path / "w") == saved(tmp_path / "f") == ["step-000002.ckpt", "step-000004.ckpt"]
    )
    light = tmp_path / "w" / "checkpoints" / "step-000004.ckpt"
    full = tmp_path / "f" / "checkpoints" / "step-000004.ckpt"
    assert not holds_training_state(light) and holds_training_state(full)
    state = torch.load(light, weights_only=True)
    assert set(state["state_dict"]) == {"layer.weight", "layer.bias"}  # what evaluation reads
    assert "optimizer_states" not in state and "lr_schedulers" not in state
    assert light.stat().st_size < full.stat().st_size
    assert "Fix: resume from a full checkpoint" in weights_only_error(light)
    # a save that must resume (an interruption, a health stop) rewrites the same step in full
    assert not callback.saved_full
    callback.save(trainer, 4, full=True)
    assert callback.saved_full and holds_training_state(light)


def test_sigterm_again_is_not_announced_again_and_a_second_ctrl_c_still_aborts(tmp_path, capsys):
    # a study killed outright: its child gets one SIGTERM per thread of the study that ends
    import signal

    callback = StepCheckpoint(tmp_path, every_n_steps=0, keep=1, max_steps=1)
    for _ in range(3):
        callback._on_signal(signal.SIGTERM, None)
    assert callback.interrupted and callback.signal == signal.SIGTERM
    assert capsys.readouterr().err.count("got SIGTERM; finishing the current step") == 1
    with pytest.raises(KeyboardInterrupt):
        callback._on_signal(signal.SIGINT, None)
