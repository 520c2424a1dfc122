"""SIGTERM handled like Ctrl-C in the stages without a checkpoint callback (index build, synthesis)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Inside the block SIGTERM raises KeyboardInterrupt, as Ctrl-C does.

    The stage's own cleanup then runs (temporary files removed, completed work kept) instead of
    the process ending wherever it was. The previous handler comes back on exit. Outside the main
    thread, where Python cannot install handlers, it changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
