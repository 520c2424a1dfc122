"""The small string vocabularies a plugin may extend, and the one way to extend them.

Beside the registries (components with configs), a few choices are named entries of plain tables,
read by the code that dispatches them, by config validation (``check_choice`` against the live
table) and by the docs: aggregation modes (``AGG_MODES``, :mod:`framework.algorithms.stats.aggregation`),
answer metrics (``ANSWER_METRICS``, :mod:`framework.rewards.text`), agent tools (``TOOLS``,
:mod:`framework.rollout.tools`), anchor-state keys (``STATE_KEYS``,
:mod:`framework.algorithms.advantages.steps`) and the reward extras a weighted sum adds up
(``SUMMED_EXTRAS``, :mod:`framework.rewards.composite`). A plugin module adds to one at import, which happens
before any config is validated::

    from framework.registry.tables import add_entry
    from framework.rewards.text import ANSWER_METRICS, AnswerMetric

    add_entry(ANSWER_METRICS, "first_word", AnswerMetric(first_word), table="ANSWER_METRICS")

after which ``reward.metric=first_word`` validates and scores like a built-in metric.
"""

from __future__ import annotations

from typing import TypeVar

from framework.registry.core import DuplicateComponentError

T = TypeVar("T")


def add_entry(vocabulary: dict[str, T], name: str, entry: T, *, table: str) -> T:
    """Add ``name`` -> ``entry`` to ``vocabulary`` (one of the tables above, named ``table`` in
    messages) and return ``entry``.

    Raises:
        DuplicateComponentError: ``name`` is already an entry (built-in or another plugin's).
        TypeError: ``name`` is not a non-empty string.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"[{table}] got entry name {name!r}; expected a non-empty string")
    if name in vocabulary:
        raise DuplicateComponentError(
            f"[{table}] got a second entry named {name!r}; expected a new name (taken: "
            f"{sorted(vocabulary)}). Fix: rename the entry your plugin adds."
        )
    vocabulary[name] = entry
    return entry
