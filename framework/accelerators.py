"""Keep libraries that bring an accelerator runtime of their own off the GPU the policy trains on.

``bm25s`` imports JAX when it is installed and runs a ``jax.lax.top_k`` at import time. On a machine
whose JAX has CUDA, that first call reserves 75% of the GPU (JAX's default preallocation) before the
policy is even loaded, and the first update runs out of memory. The BM25 backend needs no GPU: its
top-k over one score row is microseconds on the CPU. So every import of such a library goes through
:func:`import_cpu_only`, which pins JAX to the CPU first.

A user who wants JAX on the GPU in the same process sets ``JAX_PLATFORMS`` themselves; it is then
left alone (and so is ``XLA_PYTHON_CLIENT_PREALLOCATE``, where set).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from types import ModuleType

#: what the guard sets, where the user has not: JAX on the CPU, and no preallocation should a user
#: put it back on the GPU through its config
JAX_CPU_ENV = {"JAX_PLATFORMS": "cpu", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def keep_jax_on_cpu() -> bool:
    """Pin JAX to the CPU unless the user chose its platforms (``JAX_PLATFORMS`` set).

    Works before JAX is imported (through the environment, which JAX reads at import) and after
    it is imported but before its first computation (through ``jax.config``). Returns whether JAX is
    pinned to the CPU by this call or an earlier one.
    """
    if "JAX_PLATFORMS" in os.environ and os.environ["JAX_PLATFORMS"] != "cpu":
        return False  # the user's own choice
    for key, value in JAX_CPU_ENV.items():
        os.environ.setdefault(key, value)
    jax = sys.modules.get("jax")
    if jax is not None:  # imported earlier, by someone else: its config decides until first use
        # (a JAX without the option, or with its backends already started: nothing more to do)
        with contextlib.suppress(Exception):
            jax.config.update("jax_platforms", "cpu")
    return True


def import_cpu_only(name: str) -> ModuleType:
    """Import ``name`` (a module that may pull in JAX) with JAX pinned to the CPU first."""
    keep_jax_on_cpu()
    return importlib.import_module(name)
