"""Per-question, per-sample evaluation records: the archive every published number regenerates from.

``seekrl-eval`` writes ``records.jsonl.gz`` beside ``samples.jsonl``: one compact line per rollout
with what the statistics need and nothing they do not (no think text), so a whole study's records
take a few hundred kB and can be committed with its report. :func:`load_records` reads one back as
typed :class:`EvalRecord` objects, the one record of a rollout from the harness to the statistics
(:func:`read_records`, as the JSON objects of its lines); ``seekrl-study report_only=true`` builds
every table from these files alone.

Fields (:data:`RECORD_FIELDS`): the question (``dataset``, ``question_id``, ``data_source`` (the
row's source in a merged file such as Search-R1's 7-source test set; None in archives from before
it was kept), ``answer_key`` — the normalised answer that clusters questions sharing it — and
``hops``), the sample index, the outcome (``correct``, ``em``, ``f1``, ``status``), tool use
(``tool_calls``, ``turns``, ``response_tokens``) and the ground-truth entities the rollout's reasoning matched, by kind:
``matched_anchor`` (the entity the question names), ``matched_bridges`` of ``bridges`` (hidden
entities between anchor and answer: the only ones that show E-GRPO's mechanism), and
``matched_answer``; ``match_rate`` is the reward's γ over all entities.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import cast

RECORDS = "records.jsonl.gz"
RECORD_FIELDS = (
    "dataset",
    "question_id",
    "data_source",
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


@dataclass(frozen=True, kw_only=True)
class EvalRecord:
    """One rollout of one question in an evaluation: what
    :func:`~framework.eval.harness.rollout_records` judged, a line of ``samples.jsonl``, of which
    the archive keeps :data:`RECORD_FIELDS`.

    Built once, by the harness (:func:`~framework.eval.harness.question_rows`); the statistics and
    the report read its attributes. Only ``dataset``, ``question_id``, ``sample`` and ``correct``
    are always there: a record read back from an archive (:func:`load_records`) has None for the
    fields the archive does not keep (``end_reason``, ``answer``, ``golden_answers``, ``queries``,
    ``matched``, ``think_text``, ``response_digest``, ``match_rate_norm``) and for any an older
    archive lacks; a record the harness built has every field, None only where said below.

    Attributes:
        dataset: the dataset's name (``synth/validation``); questions pair within it.
        question_id: the question's id, unique within its dataset.
        data_source: the question's ``data_source`` (``nq``, ``hotpotqa``: the source a merged
            file's row came from, :attr:`~framework.data.schema.QAItem.data_source`); None in
            records from before it was kept (:func:`source_of` falls back to ``dataset``).
        answer_key: the normalised answer; questions sharing it form one cluster
            (:func:`~framework.eval.paired.cluster_bootstrap`).
        hops: the question's hop count; None when the dataset does not say.
        sample: the rollout's index among its question's ``k`` samples, 0-based.
        status: how the rollout ended (one of :data:`~framework.types.STATUSES`).
        end_reason: why the agent loop stopped (the trajectory's ``end_reason``).
        answer: the final answer; None when the rollout gave none (status not ``ok``).
        golden_answers: the question's gold answers.
        correct: the judge's verdict.
        em: whether the answer exactly matches a gold answer after normalisation.
        f1: token F1 of the answer against the gold answers (0.0 without an answer).
        tool_calls: search calls the rollout made.
        queries: search queries it sent (a call may send several).
        turns: assistant turns.
        response_tokens: tokens after the prompt (generated and tool responses).
        entities: ground-truth entities of the question; None for a question without them (then
            every entity field below is None too).
        matched: how many of them the reasoning matched.
        match_rate: ``matched / entities``, the entity reward's γ.
        matched_anchor: 1 if the entity the question names matched, else 0; None for a chain of
            one entity.
        matched_bridges: hidden entities between anchor and answer that matched.
        bridges: hidden entities between anchor and answer (``entities - 2``, at least 0).
        matched_answer: 1 if the answer entity matched, else 0.
        think_text: the rollout's reasoning text (not archived: the bulk of a row).
        response_digest: 16 hex digits of every token after the prompt; equal digests are the same
            rollout, token for token.
        match_rate_norm: ``match_rate`` over the best rate among the question's samples (0.0
            when that is 0); None without entities.
    """

    dataset: str
    question_id: str
    data_source: str | None = None
    answer_key: str | None = None
    hops: int | None = None
    sample: int
    status: str | None = None
    end_reason: str | None = None
    answer: str | None = None
    golden_answers: tuple[str, ...] | None = None
    correct: bool
    em: bool | None = None
    f1: float | None = None
    tool_calls: int | None = None
    queries: int | None = None
    turns: int | None = None
    response_tokens: int | None = None
    entities: int | None = None
    matched: int | None = None
    match_rate: float | None = None
    matched_anchor: int | None = None
    matched_bridges: int | None = None
    bridges: int | None = None
    matched_answer: int | None = None
    think_text: str | None = None
    response_digest: str | None = None
    match_rate_norm: float | None = None

    def to_row(self) -> dict[str, object]:
        """The ``samples.jsonl`` line of this record: every field, in declaration order (the
        order ``seekrl-eval`` has always written), ``golden_answers`` as a list."""
        row: dict[str, object] = {f: getattr(self, f) for f in ROW_FIELDS}
        if self.golden_answers is not None:
            row["golden_answers"] = list(self.golden_answers)
        return row

    def archived(self) -> dict[str, object]:
        """The archive's line of this record: :data:`RECORD_FIELDS` only (no think text)."""
        return {f: getattr(self, f) for f in RECORD_FIELDS}

    @classmethod
    def from_row(cls, row: Mapping[str, object], where: str = "[records]") -> EvalRecord:
        """The record of one dict row (a ``samples.jsonl`` or archive line, a journal's row);
        fields it lacks are None, fields it has beyond :data:`ROW_FIELDS` are left out.

        Raises:
            RecordsError: a required field is missing or a field has a value of the wrong type
                (the message starts with ``where``, e.g. ``[records] <file>:<line>``).
        """
        missing = [f for f in REQUIRED if f not in row]
        if missing:
            raise RecordsError(
                f"{where} got a row without {missing}; expected the fields {list(RECORD_FIELDS)}."
                " Fix: rewrite it with write_records."
            )
        values: dict[str, object] = {}
        for name in ROW_FIELDS:
            value = row.get(name)
            if value is None:
                continue
            kinds = _KINDS[name]
            ok = isinstance(value, kinds) and not (bool not in kinds and isinstance(value, bool))
            if name == "golden_answers":
                ok = isinstance(value, list | tuple) and all(isinstance(g, str) for g in value)
                value = tuple(value) if ok else value  # type: ignore[arg-type]
            if not ok:
                expected = " or ".join(k.__name__ for k in kinds)
                raise RecordsError(
                    f"{where} got {name}={value!r}; expected {expected} or null. Fix: rewrite "
                    "the line with write_records (or evaluate again)."
                )
            values[name] = value
        return cls(**values)  # type: ignore[arg-type]  # each value checked against _KINDS


#: every field of an :class:`EvalRecord`, in the order of a ``samples.jsonl`` line
ROW_FIELDS = tuple(f.name for f in fields(EvalRecord))
#: the JSON types each field may have (besides null); an int stands for a float (``0`` for 0.0)
_KINDS: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(
        ("dataset", "question_id", "data_source", "answer_key", "status", "end_reason", "answer"),
        (str,),
    ),
    **dict.fromkeys(("think_text", "response_digest"), (str,)),
    **dict.fromkeys(
        ("hops", "sample", "tool_calls", "queries", "turns", "response_tokens", "entities"), (int,)
    ),
    **dict.fromkeys(
        ("matched", "matched_anchor", "matched_bridges", "bridges", "matched_answer"), (int,)
    ),
    **dict.fromkeys(("correct", "em"), (bool,)),
    **dict.fromkeys(("f1", "match_rate", "match_rate_norm"), (float, int)),
    "golden_answers": (list,),
}


def source_of(record: EvalRecord) -> str:
    """The source a record's question came from: its ``data_source``, else (a record from before
    it was kept) its ``dataset``."""
    return record.data_source if record.data_source is not None else record.dataset


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


#: a line of ``samples.jsonl`` as ``json`` reads it: what an evaluation from before the archive
#: existed left (:func:`~framework.eval.paired.load_samples`), archived field for field
SampleRow = Mapping[str, object]


def write_records(path: Path, records: Iterable[EvalRecord] | Iterable[SampleRow]) -> Path:
    """Write the archive lines of ``records`` (:meth:`EvalRecord.archived`; of a sample row, its
    :data:`RECORD_FIELDS`, None where it lacks one) to ``path`` (gzip, one JSON object a line),
    atomically and byte-for-byte reproducibly (no timestamp or file name in the gzip header)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz:
        for r in records:
            line = (
                r.archived() if isinstance(r, EvalRecord) else {f: r.get(f) for f in RECORD_FIELDS}
            )
            gz.write((json.dumps(line, sort_keys=True) + "\n").encode())
    os.replace(tmp, path)
    return path


def load_records(path: Path) -> list[EvalRecord]:
    """The records in ``path``, typed.

    Raises:
        RecordsError: as :func:`read_records`, and for a field whose value has the wrong type
            (``[records] <file>:<line> got correct='yes'; expected bool or null. Fix: ...``).
    """
    return [EvalRecord.from_row(rec, f"[records] {path}:{n}") for n, rec in _lines(path)]


def read_records(path: Path) -> list[dict[str, object]]:
    """The lines of the archive ``path`` as ``json`` reads them (the on-disk format, field for
    field); the statistics take :func:`load_records`'s typed records.

    Raises:
        RecordsError: the file is missing, not gzip, has a line that is not a JSON object, or a
            record without a required field.
    """
    return [rec for _, rec in _lines(path)]


def json_lines(
    lines: Iterable[str], malformed: Callable[[int, json.JSONDecodeError], Exception]
) -> Iterator[tuple[int, object]]:
    """``(line number, JSON value)`` of each non-blank line of ``lines`` (from 1); a line that is
    not JSON raises ``malformed(line number, error)``."""
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            raise malformed(lineno, err) from err
        yield lineno, value


def _lines(path: Path) -> list[tuple[int, dict[str, object]]]:
    """``(line number, JSON object)`` of each non-blank line of the archive ``path``, checked for
    the required fields (errors as :func:`read_records` says)."""
    if not path.is_file():
        raise RecordsError(
            f"[records] got {str(path)!r}; expected a {RECORDS} archive. Fix: evaluate the policy "
            "again (seekrl-eval writes it), or point at the study directory that holds it."
        )

    def malformed(lineno: int, err: json.JSONDecodeError) -> RecordsError:
        return RecordsError(
            f"[records] got malformed JSON on line {lineno} of {path} ({err.msg}); expected one "
            "JSON object a line. Fix: restore the archive from git or evaluate again."
        )

    out: list[tuple[int, dict[str, object]]] = []
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for lineno, rec in json_lines(fh, malformed):
                missing = [f for f in REQUIRED if not isinstance(rec, dict) or f not in rec]
                if missing:
                    raise RecordsError(
                        f"[records] got line {lineno} of {path} without {missing}; expected the "
                        f"fields {list(RECORD_FIELDS)}. Fix: rewrite it with write_records."
                    )
                out.append((lineno, cast(dict[str, object], rec)))  # an object: checked above
    except (OSError, EOFError) as err:
        raise RecordsError(
            f"[records] got {path} that is not a readable gzip file ({err}); expected a "
            f"{RECORDS} archive. Fix: restore it from git or evaluate again."
        ) from err
    return out
