"""Checkpoints every N steps, at the end and on SIGINT / SIGTERM (after the current step)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import lightning as L

from framework.training.checkpoints import CHECKPOINT_GLOB, checkpoint_name


class StepCheckpoint(L.Callback):
    """Saves ``checkpoints/step-NNNNNN.ckpt`` and keeps the newest ``keep``.

    A checkpoint is written every ``every_n_steps`` training steps (0: only at the end), after the
    last step, and after the step during which SIGINT or SIGTERM arrived; then training stops. A
    second Ctrl-C aborts at once. Files are written under a temporary name and renamed, so a crash
    mid-write never leaves a truncated checkpoint behind.
    """

    def __init__(self, dirpath: str | Path, every_n_steps: int, keep: int, max_steps: int) -> None:
        self.dirpath = Path(dirpath)
        self.every_n_steps = every_n_steps
        self.keep = keep
        self.max_steps = max_steps
        self.signal: int | None = None
        self.saved_step: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def interrupted(self) -> bool:
        return self.signal is not None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.getsignal(sig)
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # second Ctrl-C: abort now
        self.signal = signum
        print(
            f"\nseekrl-train: got {signal.Signals(signum).name}; finishing the current step, then "
            "saving a checkpoint (Ctrl-C again aborts without saving).",
            file=sys.stderr,
            flush=True,
        )

    def _restore_handlers(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any
    ) -> None:
        step = pl_module.rl_step
        due = self.every_n_steps and step % self.every_n_steps == 0
        if due or step >= self.max_steps or self.interrupted:
            self.save(trainer, step)
        if self.interrupted:
            trainer.should_stop = True

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if pl_module.rl_step > 0 and self.saved_step != pl_module.rl_step:
            self.save(trainer, pl_module.rl_step)
        self._restore_handlers()

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self._restore_handlers()

    def save(self, trainer: L.Trainer, step: int) -> Path:
        if self.saved_step == step:
            return self.dirpath / checkpoint_name(step)
        final = self.dirpath / checkpoint_name(step)
        tmp = final.with_name(final.name + ".tmp")
        if trainer.is_global_zero:
            self.dirpath.mkdir(parents=True, exist_ok=True)
        trainer.save_checkpoint(tmp)  # every rank takes part; rank 0 writes
        if trainer.is_global_zero:
            os.replace(tmp, final)
            for old in sorted(self.dirpath.glob(CHECKPOINT_GLOB))[: -self.keep or None]:
                old.unlink()
        self.saved_step = step
        return final
