"""Cheap looks at a corpus source file: its content digest, reused across launches, and its line count.

Every launch (and every DDP rank) needs the corpus fingerprint, which covers the source file's bytes;
hashing wiki-18 (14 GB) takes minutes. So the full digest is computed once and recorded in the cache
(``<cache>/corpus/sources/<key>.json``, keyed by the file's resolved path) with the file's size,
mtime and a hash of sampled blocks (the first, the last and evenly spaced ones between). A later
launch whose file matches all three reuses the recorded digest after reading only the sampled blocks;
anything else hashes the whole file again and rewrites the record. The digest itself is still that of
the whole content, so two copies of one file share a store.

What the check cannot see: an edit that keeps the size, touches no sampled block and has its mtime
restored by hand (``touch -d``). Delete the record (or ``touch`` the file) after such an edit.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

#: the layout of a source record
RECORD_FORMAT = 1
#: blocks hashed by the cheap check, and their size: 2 MiB read per launch, whatever the file's size
SAMPLE_BLOCKS = 32
SAMPLE_BLOCK_BYTES = 1 << 16
#: files smaller than this are hashed whole (a fraction of a second) and get no record
RECORD_MIN_BYTES = 64 << 20
#: blocks read to estimate a JSONL file's line count, and their size
ESTIMATE_BLOCKS = 16
ESTIMATE_BLOCK_BYTES = 1 << 16

_MEMO: dict[tuple[str, int, int, int, int], str] = {}


def full_digest(path: Path) -> str:
    """blake2b (16 bytes, hex) of the whole file."""
    h = hashlib.blake2b(digest_size=16)
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def block_starts(size: int, blocks: int, block_bytes: int) -> list[int]:
    """Where the sampled blocks of a ``size``-byte file start: the whole file in ``block_bytes``
    pieces when it is no bigger than ``blocks`` of them, else ``blocks`` evenly spaced starts from 0
    to ``size - block_bytes`` (the first and the last block included).

    Raises:
        ValueError: fewer than two blocks, or a block size below one byte.
    """
    if blocks < 2 or block_bytes < 1:
        raise ValueError(f"blocks={blocks}, block_bytes={block_bytes}: need >= 2 and >= 1")
    if size <= blocks * block_bytes:
        return list(range(0, size, block_bytes))
    span = size - block_bytes
    return [i * span // (blocks - 1) for i in range(blocks)]


def sampled_digest(path: Path, size: int) -> str:
    """blake2b of the file's size and its sampled blocks (:func:`block_starts`)."""
    h = hashlib.blake2b(str(size).encode(), digest_size=16)
    with path.open("rb") as fh:
        for start in block_starts(size, SAMPLE_BLOCKS, SAMPLE_BLOCK_BYTES):
            fh.seek(start)
            h.update(fh.read(SAMPLE_BLOCK_BYTES))
    return h.hexdigest()


def record_path(cache_dir: Path, source: Path) -> Path:
    """The record of ``source`` (a resolved path) under the cache ``cache_dir``."""
    key = hashlib.blake2b(str(source).encode(), digest_size=16).hexdigest()
    return Path(cache_dir) / "corpus" / "sources" / f"{key}.json"


def read_record(path: Path, source: Path) -> dict[str, Any] | None:
    """The record at ``path`` when it is a well-formed record of ``source``; None otherwise (missing,
    unreadable, cut short or of another layout: a record is only ever a shortcut)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    types = {"size": int, "mtime_ns": int, "sample": str, "digest": str}
    well_formed = (
        isinstance(record, dict)
        and record.get("format") == RECORD_FORMAT
        and record.get("path") == str(source)
        and all(isinstance(record.get(k), t) for k, t in types.items())
        and len(record["digest"]) == 32
    )
    return record if well_formed else None


def write_record(path: Path, record: dict[str, Any]) -> bool:
    """Write ``record`` to ``path`` atomically; False (and nothing written) where the cache cannot be
    written (read-only, full): the caller just hashes again next time."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(record, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        return False
    return True


def source_digest(path: Path, cache_dir: Path | None) -> str:
    """The full-content digest of ``path``, from this process's memo, else from a matching record
    under ``cache_dir`` (reading only the sampled blocks), else by hashing the whole file (recorded
    for the next launch when the file is at least :data:`RECORD_MIN_BYTES`).

    Args:
        path: the source file.
        cache_dir: the cache root that holds the records; None = keep no record.

    Returns:
        blake2b (16 bytes, hex) of the file's bytes.
    """
    stat = path.stat()  # ctime cannot be set by hand, so an in-place edit always changes the key
    source = path.resolve()
    key = (str(source), stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if key not in _MEMO:
        if cache_dir is None or stat.st_size < RECORD_MIN_BYTES:
            _MEMO[key] = full_digest(path)
        else:
            _MEMO[key] = _recorded_digest(path, source, stat, record_path(cache_dir, source))
    return _MEMO[key]


def _recorded_digest(path: Path, source: Path, stat: os.stat_result, where: Path) -> str:
    """The digest from the record at ``where`` when the file still matches it, else hashed anew and
    recorded (unless the file changed while it was read)."""
    record = read_record(where, source)
    sample = sampled_digest(path, stat.st_size)
    if (
        record is not None
        and record["size"] == stat.st_size
        and record["mtime_ns"] == stat.st_mtime_ns
        and record["sample"] == sample
    ):
        return str(record["digest"])
    digest = full_digest(path)
    after = path.stat()
    if (after.st_size, after.st_mtime_ns) == (stat.st_size, stat.st_mtime_ns):
        fresh = {
            "format": RECORD_FORMAT,
            "path": str(source),
            "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns,
            "sample": sample,
            "digest": digest,
        }
        write_record(where, fresh)
    return digest


def line_stats(chunk: bytes, *, at_start: bool, at_end: bool) -> tuple[int, int]:
    """``(non-blank lines, their bytes with blank ones)`` of the complete lines in ``chunk``: a
    piece read from a file, whose first line is cut unless ``at_start`` and whose last line is cut
    unless it ends in a newline or ``at_end``."""
    if not at_start:
        cut = chunk.find(b"\n")
        chunk = b"" if cut < 0 else chunk[cut + 1 :]
    if not at_end:
        end = chunk.rfind(b"\n")
        chunk = b"" if end < 0 else chunk[: end + 1]
    lines = chunk.splitlines()
    return sum(1 for line in lines if line.strip()), len(chunk)


def estimate_lines(path: Path) -> tuple[int, bool]:
    """The number of non-blank lines of ``path`` (a JSONL corpus: its documents), exact when the
    file is small enough to be read whole, else estimated from :data:`ESTIMATE_BLOCKS` evenly spaced
    blocks: ``size * lines / bytes`` over their complete lines.

    Returns:
        ``(count, exact)``.
    """
    size = path.stat().st_size
    lines = seen = 0
    with path.open("rb") as fh:
        if size <= ESTIMATE_BLOCKS * ESTIMATE_BLOCK_BYTES:
            return line_stats(fh.read(), at_start=True, at_end=True)[0], True
        for start in block_starts(size, ESTIMATE_BLOCKS, ESTIMATE_BLOCK_BYTES):
            fh.seek(start)
            chunk = fh.read(ESTIMATE_BLOCK_BYTES)
            found, nbytes = line_stats(
                chunk, at_start=start == 0, at_end=start + len(chunk) >= size
            )
            lines, seen = lines + found, seen + nbytes
    if seen == 0:  # every line is longer than a block: at most one per block's worth of bytes
        return max(size // ESTIMATE_BLOCK_BYTES, 1), False
    return round(size * lines / seen), False
