"""Checkpoints every N steps, at the end and on SIGINT / SIGTERM (after the current step); plain
progress lines for logs that are not a terminal."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import lightning as L

from framework.progress import progress_line
from framework.training.checkpoints import (
    CHECKPOINT_GLOB,
    CheckpointWriteError,
    checkpoint_name,
    newest_checkpoint,
)


def training_step(trainer: L.Trainer, pl_module: L.LightningModule) -> int:
    """Steps trained so far: RL steps (one may take several optimiser steps), else optimiser steps."""
    return int(getattr(pl_module, "rl_step", trainer.global_step))


def end_fit_after_this_step(trainer: L.Trainer) -> None:
    """End ``trainer.fit`` after the current batch, without a validation pass.

    Lightning validates whenever ``should_stop`` is set (its early-stopping convention), whatever
    ``val_check_interval`` says: an interrupted run spent a whole validation pass before it exited,
    and a run with ``val_every_n_steps=0`` and ``val_at_end=false`` validated at its last step all
    the same. A stage validates at its end itself (:func:`framework.rl.recipe.fit`); validation
    stays off for the rest of this fit, so a later ``trainer.validate`` sets
    ``limit_val_batches`` back first.
    """
    trainer.should_stop = True
    trainer.limit_val_batches = 0


class StepCheckpoint(L.Callback):
    """Saves ``checkpoints/step-NNNNNN.ckpt`` and keeps the newest ``keep``.

    A checkpoint is written every ``every_n_steps`` training steps (0: none), after the last step
    (unless ``final`` is false), and after the step during which SIGINT or SIGTERM arrived; then
    training stops. A second Ctrl-C aborts at once. Files are written under a temporary name and
    renamed, so a crash mid-write never leaves a truncated checkpoint behind; a write that fails (a
    full disk) removes its partial file and raises :class:`CheckpointWriteError` naming the
    checkpoint that is kept.

    With ``weights_only`` the periodic and final checkpoints hold the model weights alone (no
    optimiser or scheduler state); the checkpoint of an interruption, or of :meth:`save`
    called with ``full=True`` (a health stop), is always full, since it exists to be resumed.
    """

    def __init__(
        self,
        dirpath: str | Path,
        every_n_steps: int,
        keep: int,
        max_steps: int,
        final: bool = True,
        weights_only: bool = False,
    ) -> None:
        self.final = final  # also after the last step (the SFT stage exports its policy instead)
        self.weights_only = weights_only
        self.dirpath = Path(dirpath)
        self.every_n_steps = every_n_steps
        self.keep = keep
        self.max_steps = max_steps
        self.signal: int | None = None
        self.saved_step: int | None = None
        self.saved_full = False  # whether the checkpoint of saved_step can resume training
        #: a KeyboardInterrupt ended the fit (a second Ctrl-C mid-step, or one before the handlers
        #: were installed): the weights in memory may be half updated, the newest checkpoint's not
        self.aborted = False
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
        if self.signal is not None:
            # SIGTERM again: already stopping. A study killed outright sends one per thread of
            # its that ends (stop_with_parent: the kernel hands the child on thread by thread)
            return
        self.signal = signum
        print(
            f"\nseekrl: got {signal.Signals(signum).name}; finishing the current step, then "
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
        step = training_step(trainer, pl_module)
        due = self.every_n_steps and step % self.every_n_steps == 0
        if due or (self.final and step >= self.max_steps) or self.interrupted:
            self.save(trainer, step, full=self.interrupted)
        if self.interrupted:
            end_fit_after_this_step(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        step = training_step(trainer, pl_module)
        if step > 0 and (self.final or self.interrupted):
            self.save(trainer, step, full=self.interrupted)
        self._restore_handlers()

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self.aborted = self.aborted or isinstance(exception, KeyboardInterrupt)
        self._restore_handlers()

    def save(self, trainer: L.Trainer, step: int, full: bool = False) -> Path:
        """Write the checkpoint of ``step`` (once; again only to make a weights-only one full).
        ``full`` forces optimiser and loop state in, whatever ``weights_only`` says."""
        final = self.dirpath / checkpoint_name(step)
        weights_only = self.weights_only and not full
        if self.saved_step == step and (self.saved_full or weights_only):
            return final
        tmp = final.with_name(final.name + ".tmp")
        if trainer.is_global_zero:
            self.dirpath.mkdir(parents=True, exist_ok=True)
        try:
            # every rank takes part; rank 0 writes
            trainer.save_checkpoint(tmp, weights_only=weights_only)
        except OSError as exc:  # disk full, quota, permissions: the older checkpoints stay
            raise self._write_error(tmp, final, exc) from exc
        if trainer.is_global_zero:
            os.replace(tmp, final)
            for old in sorted(self.dirpath.glob(CHECKPOINT_GLOB))[: -self.keep or None]:
                old.unlink()
        self.saved_step, self.saved_full = step, not weights_only
        return final

    def _write_error(self, tmp: Path, final: Path, exc: OSError) -> CheckpointWriteError:
        """The error for a checkpoint that could not be written, after removing its partial file."""
        tmp.unlink(missing_ok=True)
        newest = newest_checkpoint(self.dirpath)
        kept = f"the newest complete checkpoint is still {newest}" if newest else "none was saved"
        return CheckpointWriteError(
            exc.errno,
            f"[checkpoint] could not write {final} ({exc.strerror or exc}); {kept}. Fix: free "
            "disk space (or lower trainer.keep_checkpoints), then run the same command again: "
            "seekrl-sft resumes by itself, seekrl-train with resume=<run dir>.",
        )


class LogProgress(L.Callback):
    """One plain line per optimiser step (at most every ``every_s`` seconds): position, seconds per
    step, ETA and the step's logged figures. For logs (a file, a pipe, a child process of
    ``seekrl-study``), where a progress bar only appears when the process ends.

    Args:
        label: prefix of every line, e.g. ``sft`` or ``rl``.
        total: the number of steps of the run (Lightning's ``max_steps`` may count passes).
        keys: logged metrics to show, by name.
        every_s: minimum seconds between two lines (the last step is always shown).
    """

    def __init__(
        self, label: str, total: int, keys: tuple[str, ...] = (), every_s: float = 0.0
    ) -> None:
        self.label, self.total, self.keys, self.every_s = label, total, keys, every_s
        self._start = self._last = 0.0
        self._first_step = 0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = self._last = time.perf_counter()
        self._first_step = training_step(trainer, pl_module)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, idx: int
    ) -> None:
        if not trainer.is_global_zero:
            return
        now = time.perf_counter()
        step = training_step(trainer, pl_module)
        if now - self._last < self.every_s and step < self.total:
            return
        self._last = now
        # the rate over the steps of this process (a resumed run starts counting at its checkpoint)
        per_step = (now - self._start) / max(step - self._first_step, 1)
        line = progress_line(self.label, step, self.total, per_step)
        figures = trainer.callback_metrics
        shown = " ".join(f"{k}={float(figures[k]):.3f}" for k in self.keys if k in figures)
        print(f"{line}  {shown}".rstrip(), flush=True)
