"""Per-question, per-sample evaluation records: the archive every published number regenerates from.

``seekrl-eval`` writes ``records.jsonl.gz`` beside ``samples.jsonl``: one compact line per rollout
with what the statistics need and nothing they do not (no think text), so a whole study's records
take a few hundred kB and can be committed with its report. :func:`read_records` reads one back and
checks its fields; ``seekrl-study report_only=true`` builds every table from these files alone.

Fields (:data:`RECORD_FIELDS`): the question (``dataset``, ``question_id``, ``answer_key`` — the
normalised answer that clusters questions sharing it — and ``hops``), the sample index, the
outcome (``correct``, ``em``, ``f1``, ``status``), tool use (``tool_calls``, ``turns``,
``response_tokens``) and the ground-truth entities the rollout's reasoning matched, by kind:
``matched_anchor`` (the entity the question names), ``matched_bridges`` of ``bridges`` (hidden
entities between anchor and answer: the only ones that show E-GRPO's mechanism), and
``matched_answer``; ``match_rate`` is the reward's γ over all entities.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

RECORDS = "records.jsonl.gz"
RECORD_FIELDS = (
    "dataset",
    "question_id",
    "answer_key",
    "hops",
    "sample",
    "correct",
    "em",
    "f1",
    "status",
    "tool_calls",
    "turns",
    "response_tokens",
    "entities",
    "matched_anchor",
    "matched_bridges",
    "bridges",
    "matched_answer",
    "match_rate",
)
#: fields a record must have (older sample rows may lack the rest, which read as None)
REQUIRED = ("dataset", "question_id", "sample", "correct")


class RecordsError(ValueError):
    """An archive that cannot be read as evaluation records (the message says where and why)."""


def entity_kinds(flags: Sequence[bool]) -> dict[str, int | None]:
    """Matched entities by kind from per-entity flags of a chain (anchor first, answer last)."""
    if not flags:
        return dict.fromkeys(("matched_anchor", "matched_bridges", "bridges", "matched_answer"))
    return {
        "matched_anchor": int(flags[0]) if len(flags) > 1 else None,
        "matched_bridges": sum(flags[1:-1]),
        "bridges": max(0, len(flags) - 2),
        "matched_answer": int(flags[-1]),
    }


def to_record(row: Mapping[str, Any]) -> dict[str, Any]:
    """The record of one sample row of ``seekrl-eval`` (fields it lacks are None)."""
    return {f: row.get(f) for f in RECORD_FIELDS}


def write_records(path: Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write the records of ``rows`` to ``path`` (gzip, one JSON object a line), atomically and
    byte-for-byte reproducibly (no timestamp or file name in the gzip header)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz:
        for row in rows:
            gz.write((json.dumps(to_record(row), sort_keys=True) + "\n").encode())
    os.replace(tmp, path)
    return path


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records in ``path``.

    Raises:
        RecordsError: the file is missing, not gzip, has a line that is not a JSON object, or a
            record without a required field.
    """
    if not path.is_file():
        raise RecordsError(
            f"[records] got {str(path)!r}; expected a {RECORDS} archive. Fix: evaluate the policy "
            "again (seekrl-eval writes it), or point at the study directory that holds it."
        )
    out = []
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as err:
                    raise RecordsError(
                        f"[records] got malformed JSON on line {lineno} of {path} ({err.msg}); "
                        "expected one JSON object a line. Fix: restore the archive from git or "
                        "evaluate again."
                    ) from err
                missing = [f for f in REQUIRED if not isinstance(rec, dict) or f not in rec]
                if missing:
                    raise RecordsError(
                        f"[records] got line {lineno} of {path} without {missing}; expected the "
                        f"fields {list(RECORD_FIELDS)}. Fix: rewrite it with write_records."
                    )
                out.append(rec)
    except (OSError, EOFError) as err:
        raise RecordsError(
            f"[records] got {path} that is not a readable gzip file ({err}); expected a "
            f"{RECORDS} archive. Fix: restore it from git or evaluate again."
        ) from err
    return out
