"""The JSON a study writes and reads back, typed: a run's archived record
(``training/<arm>/seed<S>.json``, :func:`~framework.study.archive.archive_study`) and its parts, a
run's provenance (:mod:`framework.study.integrity`) and the histograms of
:mod:`framework.study.entity_credit`.

Each is a ``TypedDict``: what is read back is the plain dict ``json`` makes, so a record archived
by an earlier version (a key it predates missing) reads as it did; the keys are ``total=False``
where a record may lack them.
"""

from __future__ import annotations

from typing import Protocol, TypedDict

#: any JSON value (what a saved config or an unread part of a record holds)
JSON = str | int | float | bool | None | list["JSON"] | dict[str, "JSON"]

#: a logged scalar series as archived: ``[[step, value], ...]``
ArchivedSeries = list[list[float]]


class Histogram(TypedDict):
    """Counts of ``γ̂`` over wrong rollouts (:func:`~framework.study.entity_credit.histogram`)."""

    n: int
    zero: int
    interior: list[int]
    full: int
    edges: list[float]
    mean: float | None


class RunHistogram(Histogram):
    """One run's :class:`Histogram` with its steps and whose settings scored them."""

    steps: int
    rule: str


class PooledHistogram(Histogram):
    """Several runs' histograms summed (:func:`~framework.study.entity_credit.pooled`)."""

    runs: int


class Launch(TypedDict, total=False):
    """One launch of a run (:meth:`~framework.study.integrity.TreeState.record` and its start)."""

    started: str
    commit: str | None
    changed: list[str]
    git_error: str


class FileRecord(TypedDict, total=False):
    """A pre-registration's file (:func:`~framework.study.integrity.file_record`), with the
    study's name for it and whether its commit is an ancestor of the launch's."""

    preregistration: str
    sha256: str
    commit: str | None
    committed_at: str | None
    committed: bool
    ancestor: bool | None
    git_error: str


class Provenance(TypedDict, total=False):
    """When and on what a run was made (:func:`~framework.study.integrity.run_provenance`)."""

    train_started: str | None
    train_ended: str | None
    evaluated: str | None
    launches: list[Launch]
    allow_dirty: bool
    data_key: JSON
    preregistration: FileRecord | None


class Method(TypedDict):
    """A component of a run that comes from a paper (:func:`~framework.study.archive.
    run_methods`)."""

    section: str
    name: str
    paper: str
    fidelity: str


class RunRecord(TypedDict, total=False):
    """A run's archived record (``training/<arm>/seed<S>.json``); a record archived before a key
    was kept lacks it."""

    arm: str
    seed: int
    status: str
    seconds: float
    train_seconds: float | None
    eval_seconds: float | None
    steps: int
    peak_gb: float | None
    earlier_launches_peak_gb: float | None
    alarms: list[str]
    stopped_by: dict[str, JSON] | None
    wrong_entity_rates: RunHistogram | None
    methods: list[Method]
    versions: dict[str, JSON]
    config: dict[str, JSON] | None
    curves: dict[str, ArchivedSeries]
    compute: dict[str, ArchivedSeries]
    provenance: Provenance


class ArchivedRuns(Protocol):
    """What reads a run's record back from a study's archive (:class:`~framework.study.archive.
    StudyArchive`); declared here so the integrity checks need not import the archive, which
    imports them."""

    def run(self, arm: str, seed: int) -> RunRecord | None: ...


#: issue 79's learning bar (:mod:`framework.study.learning_bar`)
class Criterion(TypedDict):
    """One line of the bar: what it asks, what was measured, and whether it holds (None: not
    measured yet)."""

    rule: str
    measured: str
    met: bool | None


class SeedRow(TypedDict):
    """One seed of the learning arm against its warm start and the control's same seed."""

    seed: int
    reward_first: float | None
    reward_last: float | None
    control_first: float | None
    control_last: float | None
    gain: float | None
    gain_ci: list[float] | None
    hop_pass1: float | None
    minutes: float | None
    control_minutes: float | None


class LearningBar(TypedDict):
    """The bar's figures (``study.json``'s ``learning_bar``)."""

    arm: str
    control: str
    seeds: list[int]
    hops: int
    rows: list[SeedRow]
    gain: float | None
    gain_ci: list[float] | None
    gain_interval: str
    gain_t_ci: list[float] | None
    gain_sd: float | None
    hop_pass1: float | None
    hop_start: float | None
    criteria: list[Criterion]
    met: bool | None
