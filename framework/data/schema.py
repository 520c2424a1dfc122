"""The QA dataset schema and its files: JSONL and parquet rows in Search-R1's layout.

A question is a :class:`QAItem`. On disk it is a row in the layout of Search-R1's
``scripts/data_process/nq_search.py``::

    id, question, golden_answers    the source columns, kept as they are
    data_source                     "nq", "hotpotqa", "synth", ...
    prompt                          [{"role": "user", "content": <the plain question>}]
    ability                         "fact-reasoning"
    reward_model                    {"style": "rule", "ground_truth": {"target": [answers]}}
    extra_info                      {"split", "index", "question", "hops", "chain", "entities",
                                     ...QAItem.extra}

so our files load in tools that expect that layout, and the files users convert with Search-R1's
scripts (NQ, TriviaQA, PopQA, HotpotQA, 2Wiki, MuSiQue, Bamboogle) load here. Our ``prompt`` holds the
plain question (the rollout engine adds its own instructions); when a foreign row has no ``question``
it is taken from ``extra_info.question``, else from the last user message of ``prompt``. Search-R1's
``prompt`` is its instruction followed by ``Question: <question>\\n`` (``make_prefix``): the question
is then the text after the last :data:`QUESTION_MARKER`, and :func:`read_dataset` logs one warning
per file saying so; a prompt with instruction tags (``<answer>``, ``<search>``...) and no marker is
refused, so an instruction never becomes a question unnoticed (:meth:`QAItem.from_row`). A
``prompt`` that is more than the question as one user message (Search-R1's) is kept as it is
(:attr:`QAItem.prompt`, written back unchanged): ``agent.prompt=dataset`` gives it to the model.

``entities`` lists, per ground-truth entity, its surface form followed by its aliases; the E-GRPO
reward needs them and :func:`require_entities` says so before training starts.

Error messages follow ``[dataset] <file> row <n>: got X; expected Y. Fix: Z.``. Rows are numbered
from 0 (the ``extra_info.index`` convention); JSONL messages add the 1-based line number. Files are
written to a temporary name and renamed, so an interrupted write never leaves half a file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ABILITY = "fact-reasoning"
COLUMNS = (
    "id",
    "question",
    "golden_answers",
    "data_source",
    "prompt",
    "ability",
    "reward_model",
    "extra_info",
)
"""The columns of a written row: Search-R1's names (ours live inside ``extra_info``)."""
RESERVED_EXTRA = ("split", "index", "question", "hops", "chain", "entities")
"""``extra_info`` keys this module fills itself; ``QAItem.extra`` may not use them."""
JSONL_SUFFIXES = (".jsonl", ".json")
PARQUET_SUFFIXES = (".parquet",)
ENTITY_FIX = (
    "use the synthesized dataset (dataset=synth), add extra_info.entities "
    '([["surface form", "alias", ...], ...]) to every row, or choose reward=outcome'
)

QUESTION_MARKER = "Question: "
"""What precedes the question at the end of Search-R1's instruction prompt (``make_prefix`` in its
``scripts/data_process/nq_search.py`` and ``qa_search_test_merge.py``)."""
_TAG = re.compile(r"</?[A-Za-z_][\w-]*>")

PathLike = str | os.PathLike
log = logging.getLogger(__name__)


class DatasetError(ValueError):
    """A dataset file or row that cannot be used, saying where it is and what to do about it.

    Attributes:
        source: the file (or other origin) the problem is in, when known.
        row: 0-based row number, when the problem is in one row.
    """

    def __init__(self, message: str, *, source: str | None = None, row: int | None = None):
        super().__init__(message)
        self.source = source
        self.row = row


class _Bad(Exception):
    """A value problem found before we know where it is; the caller adds the location."""

    def __init__(self, got: str, expected: str, fix: str) -> None:
        super().__init__(got)
        self.got, self.expected, self.fix = got, expected, fix

    def message(self, where: str) -> str:
        return _message(where, self.got, self.expected, self.fix)


def _message(where: str, got: str, expected: str, fix: str) -> str:
    return f"[dataset] {where}: got {got}; expected {expected}. Fix: {fix.rstrip('.')}."


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _kind(value: Any) -> str:
    return f"{_short(value)} ({type(value).__name__})"


def _plain(value: Any) -> Any:
    """``value`` with numpy arrays / scalars (pandas-read parquet) and tuples as plain Python."""
    if isinstance(value, str):
        return str(value)  # numpy.str_ -> str
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return value
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars
    if callable(tolist):
        return _plain(tolist())
    return value


# --- field normalizers: plain values in, canonical values out, _Bad on anything malformed ---------


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise _Bad(f"{name} {_kind(value)}", "text", f"write {name} as a string")
    if not value.strip():
        raise _Bad(f"an empty {name}", "non-blank text", f"fill in {name} or drop the row")
    return value


def _answers(value: Any, name: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise _Bad(f"{name} {_kind(value)}", "a list of answer strings", f"make {name} a list")
    for answer in value:
        if not isinstance(answer, str):
            raise _Bad(
                f"answer {_kind(answer)} in {name}",
                "every answer a string",
                'write each answer as a string (e.g. "1969", not 1969)',
            )
    out = tuple(a for a in value if a.strip())
    if not out:
        raise _Bad(
            f"no answers ({name} is {_short(value)})",
            "at least one non-blank answer string",
            f"add the gold answer(s) to {name} or drop the question",
        )
    return out


def _entities(value: Any, name: str) -> tuple[tuple[str, ...], ...] | None:
    if value is None:
        return None
    shape = "a list of entities, each a non-empty list of strings: surface form, then aliases"
    fix = f'write {name} as [["Paris", "City of Light"], ["France"]] (a list of lists)'
    if not isinstance(value, (list, tuple)):
        raise _Bad(f"{name} {_kind(value)}", shape, fix)
    out = []
    for i, entity in enumerate(value):
        if not isinstance(entity, (list, tuple)) or not entity:
            raise _Bad(f"{name}[{i}] {_kind(entity)}", shape, fix)
        if not all(isinstance(form, str) for form in entity):
            raise _Bad(f"{name}[{i}] {_short(entity)} with a non-string form", shape, fix)
        if not entity[0].strip():
            raise _Bad(f"{name}[{i}] {_short(entity)} with a blank surface form", shape, fix)
        out.append((entity[0], *(alias for alias in entity[1:] if alias.strip())))
    return tuple(out)


def _hops(value: Any, name: str) -> int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None  # pandas reads a nullable int column as floats with NaN
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _Bad(
            f"{name} {_kind(value)}",
            "a positive integer (how many documents the question chains) or null",
            f"set {name} to 1, 2, ... or leave it out",
        )
    return value


def _chain(value: Any, name: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(doc, str) and doc.strip() for doc in value
    ):
        raise _Bad(
            f"{name} {_kind(value)}",
            "a list of document ids (anchor first) or null",
            f"write {name} as a list of strings or leave it out",
        )
    return tuple(value)


def _chat(value: Any, name: str) -> tuple[tuple[str, str], ...] | None:
    if value is None:
        return None
    bad = _Bad(
        f"{name} {_kind(value)}",
        "(role, content) pairs of text, or None",
        f"give {name} as [(role, content), ...]",
    )
    if not isinstance(value, (list, tuple)) or not value:
        raise bad
    pairs = []
    for message in value:
        pair = message
        if isinstance(message, Mapping):
            pair = (message.get("role"), message.get("content"))
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise bad
        if not all(isinstance(x, str) for x in pair):
            raise bad
        pairs.append((str(pair[0]), str(pair[1])))
    return tuple(pairs)


def _kept_prompt(prompt: Any, question: str) -> tuple[tuple[str, str], ...] | None:
    """A row's chat ``prompt`` as ``(role, content)`` pairs, kept for ``agent.prompt=dataset``;
    None when it is only the question as one user message (our own rows), or is not a list of
    text messages (its question has been read already; the prompt is then not used)."""
    if not isinstance(prompt, list) or not prompt:
        return None
    pairs = [(m.get("role"), m.get("content")) for m in prompt if isinstance(m, dict)]
    if len(pairs) != len(prompt) or not all(
        isinstance(r, str) and isinstance(c, str) for r, c in pairs
    ):
        return None
    if pairs == [("user", question)]:
        return None
    return tuple((str(r), str(c)) for r, c in pairs)


def _extra(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _Bad(f"{name} {_kind(value)}", "a dict", f"make {name} a dict")
    clash = [k for k in value if k in RESERVED_EXTRA]
    if clash:
        raise _Bad(
            f"{name} keys {clash}",
            f"keys other than {list(RESERVED_EXTRA)} (those are QAItem fields)",
            "rename those keys or set the matching QAItem fields",
        )
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise _Bad(f"{name} keys {bad}", "string keys", "use string keys")
    return {k: _plain(v) for k, v in value.items() if v is not None}


# --- the item --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QAItem:
    """One question with its gold answers and, when known, its entities and reasoning chain.

    Attributes:
        id: unique id within the dataset.
        question: the question text (no instructions).
        golden_answers: accepted answers (non-empty; a list or string given here becomes a tuple).
        entities: per ground-truth entity its surface form then aliases; ``None`` when the dataset
            has none (E-GRPO needs them).
        hops: how many documents the question chains, ``None`` when unknown.
        chain: ids of the source documents, anchor first, ``None`` when unknown.
        data_source: dataset name (``nq``, ``hotpotqa``, ``synth``, ...).
        extra: further ``extra_info`` entries worth keeping (``answerable``, ``template``, ...);
            entries whose value is ``None`` are dropped, so JSONL and parquet read back alike.
        prompt: the row's ``prompt`` column as ``(role, content)`` pairs, when it is more than the
            question as one user message (Search-R1's instruction and question); ``None``
            otherwise (``agent.prompt=dataset`` reads :meth:`messages`).

    Raises:
        DatasetError: a malformed field.
    """

    id: str
    question: str
    golden_answers: tuple[str, ...]
    entities: tuple[tuple[str, ...], ...] | None
    hops: int | None
    chain: tuple[str, ...] | None
    data_source: str
    extra: dict[str, Any] = field(default_factory=dict, hash=False)
    prompt: tuple[tuple[str, str], ...] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        try:
            values = {
                "id": _text(self.id, "id"),
                "question": _text(self.question, "question"),
                "golden_answers": _answers(_plain(self.golden_answers), "golden_answers"),
                "entities": _entities(_plain(self.entities), "entities"),
                "hops": _hops(_plain(self.hops), "hops"),
                "chain": _chain(_plain(self.chain), "chain"),
                "data_source": _text(self.data_source, "data_source"),
                "extra": _extra(self.extra, "extra"),
                "prompt": _chat(self.prompt, "prompt"),
            }
        except _Bad as bad:
            raise DatasetError(bad.message(f"QAItem {self.id!r}")) from None
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def to_row(self, split: str, index: int) -> dict[str, Any]:
        """The Search-R1-compatible row (plain lists, ``None`` for absent hops/chain/entities)."""
        golden = list(self.golden_answers)
        return {
            "id": self.id,
            "question": self.question,
            "golden_answers": golden,
            "data_source": self.data_source,
            "prompt": self.messages(),
            "ability": ABILITY,
            "reward_model": {"style": "rule", "ground_truth": {"target": list(golden)}},
            "extra_info": {
                "split": split,
                "index": index,
                "question": self.question,
                "hops": self.hops,
                "chain": None if self.chain is None else list(self.chain),
                "entities": None if self.entities is None else [list(e) for e in self.entities],
                **_plain(self.extra),
            },
        }

    def messages(self) -> list[dict[str, str]]:
        """The question's chat prompt as the dataset gives it: its ``prompt`` column (Search-R1's
        instruction and question as one user message), else the question as one user message."""
        if self.prompt is None:
            return [{"role": "user", "content": self.question}]
        return [{"role": role, "content": content} for role, content in self.prompt]

    @classmethod
    def from_row(
        cls,
        row: Any,
        *,
        source: PathLike,
        index: int,
        line: int | None = None,
        cut_rows: list[int] | None = None,
    ) -> QAItem:
        """Read one of our rows or a Search-R1 row.

        The question is ``question``, else ``extra_info.question``, else taken from the last user
        message of ``prompt``, where an instruction must never become the question (the rollout
        would wrap it in its own instructions; issue 76): a message holding ``Question: `` (Search-R1's
        instruction, then ``Question: <question>\\n``) gives the text after the last marker, with a
        logged warning; a message holding a tag (``<answer>``, ``<search>``, ...: an
        instruction's, not a question's) and no marker is refused; any other message is the
        question itself (our own files' ``prompt``).

        Args:
            row: the row as a dict (numpy arrays from a pandas-read parquet are accepted).
            source: the file it came from, for messages (and the ``data_source`` fallback).
            index: its 0-based row number (and the ``id`` fallback ``<data_source>-<index>``).
            line: its 1-based line number in a JSONL file, for messages.
            cut_rows: where a row whose question was cut from its instruction prompt (no
                ``question`` column, a ``Question: `` marker) notes its ``index``, for the
                caller to warn once for a file (:func:`read_dataset`); None: this call logs the
                warning itself.

        Raises:
            DatasetError: a malformed row, naming ``source`` and the row; a row without a
                ``question`` whose prompt is an instruction with no ``Question: `` marker.
        """
        source = str(source)
        where = f"{source} row {index}" + ("" if line is None else f" (line {line})")
        try:
            item, cut = cls._from_row(row, source, index)
        except _Bad as bad:
            raise DatasetError(bad.message(where), source=source, row=index) from None
        if cut and cut_rows is not None:
            cut_rows.append(index)
        elif cut:
            warn_cut_questions(source, [index], item.question, 1)
        return item

    @classmethod
    def _from_row(cls, row: Any, source: str, index: int) -> tuple[QAItem, bool]:
        if not isinstance(row, Mapping):
            raise _Bad(
                f"a row of type {type(row).__name__} ({_short(row)})",
                "an object (dict) with question and golden_answers",
                "write one JSON object per row",
            )
        row = _plain(row)
        info = row.get("extra_info")
        info = {} if info is None else info
        if not isinstance(info, dict):
            raise _Bad(f"extra_info {_kind(info)}", "a dict or null", "make extra_info a dict")

        data_source = row.get("data_source")
        if data_source is None:
            data_source = Path(source).stem or "unknown"
        data_source = _text(data_source, "data_source")

        row_id = row.get("id")
        if isinstance(row_id, int) and not isinstance(row_id, bool):
            row_id = str(row_id)
        if row_id is None or (isinstance(row_id, str) and not row_id.strip()):
            row_id = f"{data_source}-{index}"
        row_id = _text(row_id, "id")

        def pick(key: str) -> tuple[Any, str]:  # extra_info first, then a top-level column
            if info.get(key) is not None:
                return info[key], f"extra_info.{key}"
            return row.get(key), key

        question, cut = _question_of(row, info)
        item = cls(
            id=row_id,
            question=question,
            golden_answers=_answers(*_answers_of(row)),
            entities=_entities(*pick("entities")),
            hops=_hops(*pick("hops")),
            chain=_chain(*pick("chain")),
            data_source=data_source,
            extra={k: v for k, v in info.items() if k not in RESERVED_EXTRA and v is not None},
            prompt=_kept_prompt(row.get("prompt"), question),
        )
        return item, cut


#: the QAItem fields given to components as columns, and the column each becomes: every field of
#: the dataset schema under its own name (``id`` as ``question_id``), but ``entities`` (a column only
#: when every question has them), ``extra`` (its entries are columns of their own) and ``prompt``
#: (the rollout's, with agent.prompt=dataset)
ITEM_COLUMNS = {
    f.name: {"id": "question_id"}.get(f.name, f.name)
    for f in fields(QAItem)
    if f.name not in ("entities", "extra", "prompt")
}


def dataset_columns(rows: Sequence[QAItem]) -> dict[str, list[Any]]:
    """Every dataset column of ``rows`` (one question per rollout), as rewards and advantage
    estimators receive them (as TRL's reward functions do).

    Columns: ``question``, ``question_id``, ``hops``, ``golden_answers``, ``chain`` and
    ``data_source`` always (``hops`` and ``chain`` may hold ``None``); ``entities`` when every
    question has them; and each entry of ``QAItem.extra`` that every question has, under its own
    name (an entry named like one of the columns above is left out: the field wins).
    """
    columns: dict[str, list[Any]] = {
        column: [_column_value(getattr(r, name)) for r in rows]
        for name, column in ITEM_COLUMNS.items()
    }
    if all(r.entities for r in rows):
        columns["entities"] = [_column_value(r.entities) for r in rows]
    shared = set.intersection(*(set(r.extra) for r in rows)) if rows else set()
    for key in sorted(shared - set(columns) - {"entities"}):
        columns[key] = [r.extra[key] for r in rows]
    return columns


def _column_value(value: Any) -> Any:
    """Tuples (as QAItem stores sequences) as lists, nested."""
    return [_column_value(v) for v in value] if isinstance(value, tuple) else value


def _question_of(row: dict[str, Any], info: dict[str, Any]) -> tuple[str, bool]:
    """``question``, else ``extra_info.question``, else the question in the last user message of
    ``prompt`` (:meth:`QAItem.from_row`); and whether it was cut from an instruction."""
    blank = False
    for name, value in (
        ("question", row.get("question")),
        ("extra_info.question", info.get("question")),
    ):
        if value is None:
            continue
        if not isinstance(value, str):
            raise _Bad(f"{name} {_kind(value)}", "text", f"write {name} as a string")
        if value.strip():
            return value, False
        blank = True
    prompt = _prompt_text(row.get("prompt"))
    if prompt is not None and prompt.strip():
        return _question_in_prompt(prompt)
    got = "an empty question" if blank or prompt is not None else "no question"
    raise _Bad(
        f"{got} (no 'question', extra_info.question or user prompt)",
        "text",
        "add a non-blank 'question' column (or a user message in 'prompt') or drop the row",
    )


def _question_in_prompt(text: str) -> tuple[str, bool]:
    """The question in the user message ``text`` of a row without a ``question`` column, and
    whether it was cut out of an instruction.

    The choice (issue 76): an instruction must never become the question, which the rollout would
    then wrap in its own instructions. So:

    * ``text`` holding :data:`QUESTION_MARKER` (Search-R1's prompt, its instruction then
      ``Question: <question>\\n``): the text after the last marker, stripped; cut (the reader warns).
    * ``text`` holding a tag (``<answer>``, ``<search>``, ``<think>``...: an instruction's, which a
      question does not hold) and no marker: refused, there is no telling where the question is.
    * anything else: ``text`` itself, a plain question (our own files' ``prompt``).

    Example: ``"Answer the given question. ... <answer> Beijing </answer>. Question: Who wrote
    Hamlet?\\n"`` gives ``("Who wrote Hamlet?", True)``.

    Raises:
        _Bad: an instruction without the marker, or nothing after the marker (the caller adds the
            file and row).
    """
    _, marker, tail = text.rpartition(QUESTION_MARKER)
    if marker:
        if not tail.strip():
            raise _Bad(
                f"a prompt ending in {QUESTION_MARKER!r} with no question after it "
                f"({_short(text)})",
                "the question after the marker",
                "add a 'question' column, or drop the row",
            )
        return tail.strip(), True
    if _TAG.search(text):
        raise _Bad(
            f"no 'question' column and a prompt that reads as an instruction ({_short(text)})",
            f"the plain question in a 'question' column (or extra_info.question), or a prompt "
            f"ending in {QUESTION_MARKER!r}<question> as Search-R1's does",
            "add a 'question' column with the bare question (Search-R1's data scripts keep "
            "theirs: export again without dropping it)",
        )
    return text, False


def warn_cut_questions(source: str, rows: Sequence[int], example: str, total: int) -> None:
    """Log that the questions of ``rows`` (0-based, of ``total`` rows) in ``source`` were cut from
    their instruction prompts (:meth:`QAItem.from_row`); ``example`` is the first of them."""
    if not rows:
        return
    log.warning(
        "[dataset] %s: %d of %d rows have no 'question' column; took each question from the text "
        "after the last %r of its prompt (Search-R1's instruction prefix), e.g. row %d: %r. "
        "Fix: add a 'question' column with the bare question to silence this.",
        source,
        len(rows),
        total,
        QUESTION_MARKER,
        rows[0],
        example,
    )


def _prompt_text(prompt: Any) -> str | None:
    """The content of the last user message of a chat ``prompt`` (a plain string counts too)."""
    if prompt is None or isinstance(prompt, str):
        return prompt
    bad = _Bad(
        f"prompt {_kind(prompt)}",
        'a list of {"role", "content"} messages',
        'write prompt as [{"role": "user", "content": "<question>"}]',
    )
    if not isinstance(prompt, list):
        raise bad
    for message in reversed(prompt):
        if not isinstance(message, dict):
            raise bad
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, list):  # OpenAI content parts
            content = "".join(
                p.get("text") or ""
                for p in content
                if isinstance(p, dict) and p.get("type") == "text"
            )
        if not isinstance(content, str):
            raise bad
        return content
    return None


def _answers_of(row: dict[str, Any]) -> tuple[Any, str]:
    """The raw answers and where they came from: ``golden_answers``, else the reward target."""
    if row.get("golden_answers") is not None:
        return row["golden_answers"], "golden_answers"
    reward_model = row.get("reward_model")
    if reward_model is not None and not isinstance(reward_model, dict):
        raise _Bad(
            f"reward_model {_kind(reward_model)}",
            '{"style": "rule", "ground_truth": {"target": [answers]}}',
            "make reward_model a dict or add a golden_answers column",
        )
    truth = (reward_model or {}).get("ground_truth")
    if isinstance(truth, dict) and truth.get("target") is not None:
        return truth["target"], "reward_model.ground_truth.target"
    if truth is not None and not isinstance(truth, dict):
        return truth, "reward_model.ground_truth"
    raise _Bad(
        "no answers (no 'golden_answers' or reward_model.ground_truth.target)",
        "a list of answer strings",
        "add a golden_answers column or drop the row",
    )


# --- writing -----------------------------------------------------------------------------------------


def _rows(items: Iterable[QAItem], path: Path, split: str) -> list[dict[str, Any]]:
    items = list(items)
    if not isinstance(split, str) or not split.strip() or any(c in split for c in "/\\"):
        raise DatasetError(
            _message(str(path), f"split {split!r}", "a name like train, val or test", "pass one")
        )
    if not items:
        raise DatasetError(
            _message(
                str(path),
                "0 questions to write",
                "at least one (an empty file cannot be read back)",
                "check the step that produced this split",
            ),
            source=str(path),
        )
    for i, item in enumerate(items):
        if not isinstance(item, QAItem):
            raise DatasetError(
                _message(f"{path} row {i}", _kind(item), "a QAItem", "build QAItem objects"),
                source=str(path),
                row=i,
            )
    return [item.to_row(split, i) for i, item in enumerate(items)]


def _atomic(path: PathLike, write: Callable[[Path], None]) -> Path:
    """Run ``write`` on a temporary file beside ``path``, then rename it to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return path


def write_jsonl(items: Iterable[QAItem], path: PathLike, split: str) -> Path:
    """Write ``items`` as JSON lines (UTF-8, one row per line), atomically.

    Raises:
        DatasetError: no items, a bad split name, or an ``extra`` value that is not JSON.
    """
    rows = _rows(items, Path(path), split)

    def write(tmp: Path) -> None:
        with tmp.open("w", encoding="utf-8", newline="\n") as fh:
            for i, row in enumerate(rows):
                try:
                    text = json.dumps(row, ensure_ascii=False, allow_nan=False)
                except (TypeError, ValueError) as exc:
                    raise DatasetError(
                        _message(
                            f"{path} row {i} (id {row['id']!r})",
                            f"extra_info that is not plain JSON ({exc})",
                            "strings, numbers, booleans, lists and dicts",
                            "convert that QAItem.extra value",
                        ),
                        source=str(path),
                        row=i,
                    ) from None
                fh.write(text + "\n")

    return _atomic(path, write)


_PROMPT_TYPE = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
_REWARD_TYPE = pa.struct(
    [
        ("style", pa.string()),
        ("ground_truth", pa.struct([("target", pa.list_(pa.string()))])),
    ]
)
_INFO_FIELDS = [
    pa.field("split", pa.string()),
    pa.field("index", pa.int64()),
    pa.field("question", pa.string()),
    pa.field("hops", pa.int64()),
    pa.field("chain", pa.list_(pa.string())),
    pa.field("entities", pa.list_(pa.list_(pa.string()))),
]


def parquet_schema(rows: Sequence[dict[str, Any]], path: PathLike = "<rows>") -> pa.Schema:
    """The arrow schema of ``rows``: fixed types for ours, one inferred type per ``extra`` key.

    Raises:
        DatasetError: an ``extra`` key whose values have different types in different rows.
    """
    extra_keys = dict.fromkeys(k for r in rows for k in r["extra_info"] if k not in RESERVED_EXTRA)
    extra_fields = []
    for key in extra_keys:
        values = [r["extra_info"].get(key) for r in rows]
        try:
            typ = pa.array(values).type
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            kinds = sorted({type(v).__name__ for v in values if v is not None})
            raise DatasetError(
                _message(
                    str(path),
                    f"extra_info.{key} values of types {kinds} across rows",
                    "one type per key (parquet columns are typed)",
                    f"give QAItem.extra[{key!r}] one type in every item, or write JSONL only",
                ),
                source=str(path),
            ) from None
        extra_fields.append(pa.field(key, pa.string() if pa.types.is_null(typ) else typ))
    return pa.schema(
        [
            pa.field("id", pa.string()),
            pa.field("question", pa.string()),
            pa.field("golden_answers", pa.list_(pa.string())),
            pa.field("data_source", pa.string()),
            pa.field("prompt", _PROMPT_TYPE),
            pa.field("ability", pa.string()),
            pa.field("reward_model", _REWARD_TYPE),
            pa.field("extra_info", pa.struct(_INFO_FIELDS + extra_fields)),
        ]
    )


def write_parquet(items: Iterable[QAItem], path: PathLike, split: str) -> Path:
    """Write ``items`` as a parquet table in Search-R1's layout, atomically.

    Raises:
        DatasetError: no items, a bad split name, or ``extra`` values parquet cannot hold.
    """
    return write_parquet_rows(_rows(items, Path(path), split), path)


def write_parquet_rows(rows: Sequence[dict[str, Any]], path: PathLike) -> Path:
    """Write rows made by :meth:`QAItem.to_row` (possibly with another ``prompt``) as parquet,
    atomically.

    Raises:
        DatasetError: ``extra`` values parquet cannot hold.
    """
    schema = parquet_schema(rows, path)
    try:
        table = pa.Table.from_pylist(list(rows), schema=schema)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise DatasetError(
            _message(
                str(path),
                f"rows arrow cannot convert ({type(exc).__name__}: {_short(str(exc), 200)})",
                "plain extra values (strings, numbers, booleans, lists of them)",
                "simplify QAItem.extra, or write JSONL only",
            ),
            source=str(path),
        ) from None
    return _atomic(path, lambda tmp: pq.write_table(table, tmp))


def write_split(items: Iterable[QAItem], directory: PathLike, split: str) -> tuple[Path, Path]:
    """Write ``<directory>/<split>.jsonl`` and ``<directory>/<split>.parquet`` (each atomically).

    Returns:
        The JSONL and parquet paths.
    """
    items = list(items)
    directory = Path(directory)
    return (
        write_jsonl(items, directory / f"{split}.jsonl", split),
        write_parquet(items, directory / f"{split}.parquet", split),
    )


# --- reading -----------------------------------------------------------------------------------------


def read_dataset(path: PathLike) -> list[QAItem]:
    """The questions of a ``.jsonl`` / ``.json`` (JSON lines, or one JSON array) or ``.parquet`` file.

    Rows without a ``question`` whose question was cut from Search-R1's instruction prompt
    (:meth:`QAItem.from_row`) are reported in one logged warning for the file.

    Raises:
        DatasetError: a missing file, an unknown suffix, an unreadable file, a line that is not
            JSON, a malformed row (an instruction prompt without ``Question: `` and no
            ``question`` column among them), or no rows at all; naming the file and line / row.
    """
    source = str(path)
    path = Path(path)
    suffix = path.suffix.lower()
    cut: list[int] = []
    if not path.exists():
        raise DatasetError(
            _message(
                source,
                "no such file",
                "an existing dataset file",
                "check the path (splits are written as <split>.jsonl and <split>.parquet)",
            ),
            source=source,
        )
    if suffix in PARQUET_SUFFIXES:
        items = [
            QAItem.from_row(row, source=source, index=i, cut_rows=cut)
            for i, row in enumerate(_parquet_rows(path, source))
        ]
    elif suffix in JSONL_SUFFIXES:
        try:
            items = _read_json(path, source, cut)
        except OSError as exc:
            raise DatasetError(
                _message(
                    source, f"an unreadable file ({exc})", "a readable file", "check the path"
                ),
                source=source,
            ) from None
    else:
        raise DatasetError(
            _message(
                source,
                f"suffix {suffix or '(none)'!r}",
                f"one of {list(JSONL_SUFFIXES + PARQUET_SUFFIXES)}",
                "convert the file to JSONL or parquet (Search-R1's scripts write parquet) "
                "or rename it",
            ),
            source=source,
        )
    if not items:
        raise DatasetError(
            _message(
                source,
                "0 rows",
                "at least one question",
                "point at a non-empty dataset, or rebuild it",
            ),
            source=source,
        )
    if cut:
        warn_cut_questions(source, cut, items[cut[0]].question, len(items))
    return items


def _parquet_rows(path: Path, source: str) -> Iterable[dict[str, Any]]:
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(
            _message(
                source,
                f"a file pyarrow cannot read ({type(exc).__name__}: {_short(str(exc), 200)})",
                "a parquet table",
                "rewrite the file (it may be truncated or not parquet at all)",
            ),
            source=source,
        ) from None
    for batch in table.to_batches():  # one batch of Python objects at a time
        yield from batch.to_pylist()


def _read_json(path: Path, source: str, cut: list[int]) -> list[QAItem]:
    with path.open("rb") as fh:
        head = fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    if path.suffix.lower() == ".json" and head.startswith(b"["):
        try:
            rows = json.loads(path.read_text(encoding="utf-8-sig"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DatasetError(
                _message(
                    source,
                    f"text that is not JSON ({type(exc).__name__}: {exc})",
                    "a JSON array of row objects, or one JSON object per line",
                    "repair the file",
                ),
                source=source,
            ) from None
        return [
            QAItem.from_row(row, source=source, index=i, cut_rows=cut) for i, row in enumerate(rows)
        ]

    items: list[QAItem] = []
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            where = f"{source} row {len(items)} (line {lineno})"
            try:
                text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise DatasetError(
                    _message(
                        where,
                        _short(raw),
                        "UTF-8 text",
                        f"re-save the file as UTF-8 ({exc.reason})",
                    ),
                    source=source,
                    row=len(items),
                ) from None
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as exc:
                raise DatasetError(
                    _message(
                        where,
                        _short(text.rstrip("\n")),
                        "one JSON object per line",
                        f"repair or drop that line (JSONDecodeError: {exc.msg} at column {exc.colno})",
                    ),
                    source=source,
                    row=len(items),
                ) from None
            items.append(
                QAItem.from_row(row, source=source, index=len(items), line=lineno, cut_rows=cut)
            )
    return items


def require_entities(
    items: Sequence[QAItem],
    path: PathLike,
    why: str = "reward=e_grpo needs ground-truth entities",
) -> None:
    """Check that every item has ground-truth entities.

    Raises:
        DatasetError: naming the file, the first row without entities, how many lack them, and
            what to do.
    """
    items = list(items)
    lacking = [i for i, item in enumerate(items) if not item.entities]
    if not lacking:
        return
    first = items[lacking[0]]
    state = "null" if first.entities is None else "an empty list"
    raise DatasetError(
        _message(
            f"{path} row {lacking[0]} (id {first.id!r})",
            f"no entities (entities is {state}); {len(lacking)} of {len(items)} questions lack them",
            f"ground-truth entities on every question because {why}",
            ENTITY_FIX,
        ),
        source=str(path),
        row=lacking[0],
    )
