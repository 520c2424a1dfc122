"""Resident memory of this process: its peak, a stage's peak, and freed heap handed back to the OS.

Linux keeps a process's peak resident set (``VmHWM``, what ``/usr/bin/time -v`` reports). A stage's
own peak comes from :class:`PeakSampler`, which reads the resident set ten times a second and leaves
that high-water mark alone (resetting it, :func:`reset_peak`, would hide earlier stages' peaks from
``/usr/bin/time``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import resource
import sys
from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_bytes(key: str) -> int | None:
    """The ``key`` line of ``/proc/self/status`` in bytes (None where it cannot be read)."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def peak_rss_bytes() -> int:
    """The largest resident set of this process since the last :func:`reset_peak` (or its start)."""
    peak = _status_bytes("VmHWM")
    if peak is not None:
        return peak
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def rss_bytes() -> int:
    """The resident set of this process now (0 where ``/proc`` is missing)."""
    return _status_bytes("VmRSS") or 0


def reset_peak() -> bool:
    """Start a new peak at the current resident set; False where the OS cannot (not Linux)."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        lib = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return lib if lib is not None and hasattr(lib, "malloc_trim") else None


def release_freed() -> None:
    """Free a finished stage's objects and hand the heap's free pages back to the OS.

    First a full garbage collection: a stage's Lightning trainer and module refer to each other, so
    the model, gradients and optimiser state they hold are freed only when the cycle collector runs,
    which large tensors do not prompt. Then glibc's ``malloc_trim`` (nothing elsewhere): glibc keeps freed blocks of a
    few megabytes in the heap, where torch's per-layer tensors land.
    """
    gc.collect()
    lib = _libc()
    if lib is not None:
        lib.malloc_trim(0)


class PeakSampler:
    """The largest resident set seen while it runs: a daemon thread reads it every ``every_s``
    seconds. Unlike :func:`reset_peak`, it leaves the kernel's high-water mark alone, so
    ``/usr/bin/time -v`` still reports the whole process's peak."""

    def __init__(self, every_s: float = 0.1) -> None:
        import threading

        self.every_s = every_s
        self.peak = rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.peak = max(self.peak, rss_bytes())

    def stop(self) -> int:
        """Stop sampling; the peak in bytes (one last reading included)."""
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())
        return self.peak
