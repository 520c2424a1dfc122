"""SIGTERM handled like Ctrl-C in the stages without a checkpoint callback (index build, synthesis),
and a run started by a study stopped when the study ends (:func:`stop_with_parent`)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Inside the block SIGTERM raises KeyboardInterrupt, as Ctrl-C does (once; later ones are
    ignored while the stage stops).

    The stage's own cleanup then runs (temporary files removed, completed work kept) instead of
    the process ending wherever it was. The previous handler comes back on exit. Outside the main
    thread, where Python cannot install handlers, it changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = False

    def raise_interrupt(signum: int, frame: Any) -> None:
        # once: a study killed outright sends one SIGTERM per thread of its that ends
        # (stop_with_parent), and a second KeyboardInterrupt would cut the stage's cleanup short
        nonlocal raised
        if not raised:
            raised = True
            raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def stop_on_interrupt(message: str, status: int) -> Iterator[None]:
    """Inside the block SIGTERM is Ctrl-C (:func:`sigterm_as_interrupt`), and either ends the
    process with ``message`` on stderr and exit status ``status``, once the stage has cleaned up."""
    try:
        with sigterm_as_interrupt():
            yield
    except KeyboardInterrupt:
        print(message, file=sys.stderr)
        raise SystemExit(status) from None


#: set by a study in its train children's environment: the study's process id (see
#: :func:`stop_with_parent`)
STOP_WITH_ENV = "SEEKRL_STOP_WITH_PID"

#: prctl(2) option: the signal the kernel sends this process when its parent ends
_PR_SET_PDEATHSIG = 1


def stop_with_parent(parent: int | None = None) -> bool:
    """Have the kernel send this process SIGTERM when its parent ``parent`` ends, however it ends.

    A study's SFT, evaluation and train children checkpoint and stop on SIGTERM (as when the
    study forwards one); a study ended by SIGKILL (the OOM killer, a session's end) forwards
    nothing, and its child went on alone for as long as it took (a warm start for 38 minutes, beside
    the next run that used its cache folder). ``parent`` ``None`` reads the study's process id from
    ``SEEKRL_STOP_WITH_PID`` and removes it, so this process's own children do not read it. A
    parent that ended before the request counts as ended. Linux only (``prctl``); elsewhere, and
    without a parent to watch, it does nothing.

    Returns:
        Whether the request is in place.

    Raises:
        SystemExit: ``SEEKRL_STOP_WITH_PID`` is not a process id.
    """
    if parent is None:
        value = os.environ.pop(STOP_WITH_ENV, None)
        if value is None:
            return False
        if not value.isdigit():
            raise SystemExit(
                f"[env {STOP_WITH_ENV}] got {value!r}; expected a process id. Fix: unset it "
                "(seekrl-study sets it for the train runs it starts)."
            )
        parent = int(value)
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:  # it ended before the request: the kernel will not tell
        os.kill(os.getpid(), signal.SIGTERM)
    return True
