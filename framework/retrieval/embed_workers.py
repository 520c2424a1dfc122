"""Passage encoding in several processes at once: one per ``retriever.encoder.devices`` entry.

Each worker is a ``spawn`` process (a fork would copy a parent that may hold CUDA or OpenMP state)
that loads its own encoder on its device, takes shard numbers from a queue, writes its shards' rows
into the shared partial ``.npy`` (disjoint rows, so no locking), flushes them and only then reports
the shard finished: the parent, the only writer of the record, names a shard there only after that
report. CPU workers split the cores between them (each with ``cores // cpu_workers`` torch threads),
since they would otherwise oversubscribe them. A worker's exception ends the run with its message;
Ctrl-C or SIGTERM in the parent ends the workers; either way the finished shards stay recorded.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from framework.retrieval.encoder import EncoderConfig, resolved_dtype
from framework.retrieval.types import RetrievalError

#: seconds the parent waits for a message before it checks whether the workers are alive
_POLL_S = 0.5
#: seconds a worker has to end after SIGTERM before it is killed
_JOIN_S = 10.0


def available_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_threads(devices: list[str], cores: int) -> int | None:
    """Torch threads for each CPU worker: the cores shared evenly (at least one); None without
    CPU workers (``[cpu, cpu]`` on 2 cores: 1 each; ``[cpu, cuda:0]`` on 8 cores: 8)."""
    cpu_workers = sum(1 for d in devices if d == "cpu")
    return max(1, cores // cpu_workers) if cpu_workers else None


def worker_config(cfg: EncoderConfig, device: str) -> EncoderConfig:
    """A worker's encoder config: its device, no devices of its own, and the dtype resolved for
    ``cfg.device`` (where queries are encoded, and what the fingerprint names), so every worker
    computes in the dtype the embeddings are keyed by."""
    return replace(cfg, device=device, devices=[], dtype=resolved_dtype(cfg))


def _default_factory(cfg: EncoderConfig) -> Any:
    from framework.retrieval.encoder import SentenceEncoder

    return SentenceEncoder(cfg)


def _worker(
    worker: int,
    cfg: EncoderConfig,
    factory: Callable[[EncoderConfig], Any] | None,
    store_path: str,
    partial: str,
    threads: int | None,
    tasks: Any,
    results: Any,
) -> None:
    """One worker process: encode the shards taken from ``tasks`` until a ``None``; report
    ``("rows", worker, n)``, ``("done", worker, shard)`` and, on failure, ``("error", worker, msg)``."""
    # Ctrl-C reaches the whole process group: the parent decides, and ends the workers
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def stop(signum: int, frame: Any) -> None:
        # the parent's SIGTERM: exit through Python so the finalisers release the semaphores
        # (a killed worker leaves a "leaked semaphore" warning), reporting nothing more
        results.cancel_join_thread()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        from framework.retrieval.corpus import CorpusStore
        from framework.retrieval.embed_shards import encode_shard

        if threads is not None:
            import torch

            torch.set_num_threads(threads)
        encoder = (factory or _default_factory)(cfg)
        store = CorpusStore(Path(store_path))
        out = np.load(partial, mmap_mode="r+")
        while (task := tasks.get()) is not None:
            shard, bounds = task
            encode_shard(store, encoder, out, bounds, lambda n: results.put(("rows", worker, n)))
            results.put(("done", worker, shard))
    except Exception as exc:  # any failure is reported to the parent, then ends it
        results.put(("error", worker, f"{type(exc).__name__}: {exc}"))
        results.close()
        results.join_thread()
        sys.exit(1)


def run_workers(
    store_path: Path,
    cfg: EncoderConfig,
    factory: Callable[[EncoderConfig], Any] | None,
    partial: Path,
    shards: list[tuple[int, tuple[int, int]]],
    finished: Callable[[int], None],
    on_rows: Callable[[int], None],
) -> None:
    """Encode ``shards`` (``(number, (start, stop))``) into ``partial`` with one process per
    ``cfg.devices`` entry; ``finished(number)`` after each shard is flushed, ``on_rows(n)`` as rows
    are encoded.

    Raises:
        RetrievalError: a worker raised (its message) or died (its exit code).
    """
    ctx = mp.get_context("spawn")
    tasks, results = ctx.Queue(), ctx.Queue()
    tasks.cancel_join_thread()  # tasks left when the run stops must not hold up this process's exit
    for task in shards:
        tasks.put(task)
    for _ in cfg.devices:
        tasks.put(None)
    threads = cpu_threads(cfg.devices, available_cores())
    shared = (factory, str(store_path), str(partial), threads, tasks, results)
    procs = [
        ctx.Process(
            target=_worker,
            args=(i, worker_config(cfg, d), *shared),
            daemon=True,
            name=f"seekrl-embed-{i}-{d}",
        )
        for i, d in enumerate(cfg.devices)
    ]
    try:
        for p in procs:
            p.start()
        _collect(procs, cfg.devices, results, {n for n, _ in shards}, finished, on_rows)
        for p in procs:  # each has its end-of-queue mark: let it exit on its own, its finalisers
            p.join(
                _JOIN_S
            )  # run (a worker ended mid-exit leaves a semaphore behind, and a warning)
    finally:
        _stop(procs)
        for q in (tasks, results):
            q.close()


def _collect(
    procs: list[Any],
    devices: list[str],
    results: Any,
    remaining: set[int],
    finished: Callable[[int], None],
    on_rows: Callable[[int], None],
) -> None:
    """Read the workers' reports until every shard is finished."""
    suspect = False  # a worker had ended: one more wait for a report it may have sent
    while remaining:
        try:
            kind, worker, value = results.get(timeout=_POLL_S)
        except queue.Empty:  # nothing buffered: a worker that ended without a word died
            ended = any(p.exitcode is not None for p in procs)
            if suspect:
                _check_alive(procs, devices, remaining)
            suspect = ended
            continue
        if kind == "rows":
            on_rows(value)
        elif kind == "done":
            remaining.discard(value)
            finished(value)
        else:
            raise RetrievalError(
                f"[retriever.encoder.devices] the embedding worker on {devices[worker]} failed: "
                f"{value}. The finished shards are kept. Fix: see the error above, then rerun to "
                "encode only the rest."
            )


def _check_alive(procs: list[Any], devices: list[str], remaining: set[int]) -> None:
    """Raise for a worker killed from outside (out of memory, SIGKILL), or for workers that all
    ended with shards left."""
    for i, p in enumerate(procs):
        if p.exitcode not in (None, 0):
            raise RetrievalError(
                f"[retriever.encoder.devices] the embedding worker on {devices[i]} died (exit code "
                f"{p.exitcode}; a negative code is the signal, -9 often the out-of-memory killer) "
                f"with {len(remaining)} shard(s) left. The finished shards are kept. Fix: free "
                "memory or use fewer devices or a smaller batch_size, then rerun."
            )
    if all(p.exitcode == 0 for p in procs):
        raise RetrievalError(
            f"[retriever.encoder.devices] the embedding workers ended with {len(remaining)} "
            "shard(s) unreported. Fix: rerun (the finished shards are kept)."
        )


def _stop(procs: list[Any]) -> None:
    """End the workers still running (SIGTERM, then SIGKILL after :data:`_JOIN_S`)."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        if p.pid is None:  # never started
            continue
        p.join(_JOIN_S)
        if p.is_alive():
            p.kill()
            p.join()
