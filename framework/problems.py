"""Configuration problems and the error that reports all of them at once.

Every line has the form ``[section.field] got X; expected Y. Fix: Z.`` so a user can act on each
without reading code.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a configuration value.

    Args:
        path: dotted location, e.g. ``loss.clip_low``.
        got: the offending value (rendered with ``repr``).
        expected: what would be valid, as a phrase.
        fix: what the user should do, as an imperative sentence.
    """

    path: str
    got: Any
    expected: str
    fix: str

    def __str__(self) -> str:
        fix = self.fix.rstrip(".")
        return f"[{self.path}] got {self.got!r}; expected {self.expected}. Fix: {fix}."

    def under(self, prefix: str) -> Problem:
        """The same problem located below ``prefix`` (``field`` becomes ``prefix.field``)."""
        path = f"{prefix}.{self.path}" if prefix and self.path else (prefix or self.path)
        fix = self.fix
        if self.path and prefix:  # "set clip_low ..." becomes "set loss.clip_low ..."
            fix = re.sub(rf"(?<![\w.]){re.escape(self.path)}(?![\w])", path, fix)
        return Problem(path, self.got, self.expected, fix)


class ConfigError(ValueError):
    """Raised with every problem found in a configuration, one per line."""

    def __init__(self, problems: Iterable[Problem], header: str = "invalid configuration") -> None:
        self.problems = list(problems)
        lines = [
            f"{header} ({len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}):"
        ]
        lines += [f"  {p}" for p in self.problems]
        super().__init__("\n".join(lines))


def check(ok: bool, path: str, got: Any, expected: str, fix: str) -> list[Problem]:
    """Return ``[Problem(...)]`` when ``ok`` is false, else ``[]`` (for terse validators)."""
    return [] if ok else [Problem(path, got, expected, fix)]


def check_range(
    value: float,
    path: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
    fix: str | None = None,
) -> list[Problem]:
    """Problems for a number outside ``[low, high]`` (bounds optional, inclusivity configurable)."""
    ok = True
    if low is not None:
        ok &= value >= low if low_inclusive else value > low
    if high is not None:
        ok &= value <= high if high_inclusive else value < high
    if ok:
        return []
    lo = "" if low is None else ("[" if low_inclusive else "(") + f"{low}"
    hi = "" if high is None else f"{high}" + ("]" if high_inclusive else ")")
    if low is not None and high is not None:
        expected = f"a number in {lo}, {hi}"
    elif low is not None:
        expected = f"a number {'>=' if low_inclusive else '>'} {low}"
    else:
        expected = f"a number {'<=' if high_inclusive else '<'} {high}"
    return [Problem(path, value, expected, fix or f"set {path} inside that range")]


def check_folder(value: str | None, path: str, marker: str, kind: str, fix: str) -> list[Problem]:
    """Problems for a ``value`` that is not a folder holding the file ``marker`` (``~`` expanded);
    ``kind`` names the folder wanted (``"a tokenizer folder"``)."""
    ok = value is not None and (Path(value).expanduser() / marker).is_file()
    return check(ok, path, value, f"{kind} (with {marker})", fix)


def check_choice(value: Any, path: str, choices: Iterable[Any]) -> list[Problem]:
    """Problems for a value that is not one of ``choices``."""
    options = list(choices)
    if value in options:
        return []
    return [Problem(path, value, f"one of {options}", f"set {path} to one of {options}")]


def table_entry(table: Mapping[str, T], key: object, where: str) -> T:
    """The entry of ``table`` named ``key``; ``where`` is the config path named in the error.

    Raises:
        ValueError: ``key`` is not one of the table's names.
    """
    found = table.get(key) if isinstance(key, str) else None
    if found is None:
        raise ValueError(f"[{where}] got {key!r}; expected one of {list(table)}. Fix: pick one.")
    return found
