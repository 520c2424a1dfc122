"""A publishable study's integrity: the tree its runs were made on, their commits and times, and the
order of its pre-registration and its first run.

A study is *publishable* (:func:`publishable`) when what it writes is meant to be committed and
read as a result: it publishes a page (``publish``), keeps its archive where it is committed
(``archive_to``), or evaluates on the test split (a confirmatory study, pre-registered).
``seekrl-study`` refuses to start such a study, before anything is built or trained
(:func:`framework.study.checks.check_integrity`), and before each later run of it:

* on an uncommitted tree (:func:`tree_state`): a tracked file of the code's checkout changed, or a
  file git does not ignore added under ``framework/`` or ``conf/`` (which the runs load: Hydra
  lists ``conf/``'s groups from their files). The study's own folders (``out_dir``,
  ``archive_to``, the ``publish`` page and its records, its ``parts``' archives) are written while
  it runs and do not count; nor does an untracked file elsewhere (notes, a scratch script);
* on a commit other than the one the table's existing runs were made on (:func:`record_commits`):
  one table, one commit;
* with a pre-registration that is not committed as it is, that changed since the study froze it,
  or whose commit is not an ancestor of the checkout's.

``allow_dirty=true`` lets it run anyway: each run's record then says what it ran on, and the report
marks the runs concerned (:func:`integrity_lines`). Git missing, or code that is not a checkout, is
said so and refused the same way.

Each run's record in the archive (``training/<arm>/seed<S>.json``) holds its ``provenance``
(:func:`run_provenance`): when it began and ended training and when its evaluation finished (UTC,
ISO 8601), every launch's commit and uncommitted changes, whether ``allow_dirty`` was set, the
questions' data key (:func:`framework.study.basis.study_basis`'s ``data`` and
:func:`~framework.study.basis.content_basis`'s ``questions_sha256``) and the pre-registration's
record (its file's sha256, the commit that last changed it and when). The report reads them
(:func:`integrity`): archives from before these records have none, and their reports are as they
were.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TypedDict, cast

from framework.study.layout import published_records, read_json_object
from framework.study.schema import StudyConfig
from framework.study.types import JSON, ArchivedRuns, FileRecord, Launch, Provenance, RunRecord

#: in a run directory: the study's record of the run's launches (see :func:`run_provenance`)
PROVENANCE = "provenance.json"
#: in an evaluation directory: when the study finished that evaluation
EVAL_TIME = "evaluated.json"
#: folders of the checkout whose untracked files the runs load (the code, and the config groups
#: Hydra lists from their files): an untracked file there changes what a run does
LOADED_DIRS = ("framework", "conf")
#: uncommitted changes named per run in a refusal or the report (the rest are counted)
SHOWN = 6


def now() -> str:
    """The time now, UTC, ISO 8601 to the second (``2026-01-31T12:00:00Z``)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def utc(when: str) -> str:
    """An ISO 8601 time with any offset (git's ``%cI``) as :func:`now` writes it."""
    return datetime.fromisoformat(when).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _time(when: str) -> datetime:
    return datetime.fromisoformat(when.replace("Z", "+00:00"))


def code_checkout() -> Path:
    """Where the framework's code is: the checkout whose commit the runs are made on (the train
    processes record the same one, ``versions.json``)."""
    return Path(__file__).resolve().parent


def _git(where: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-C", str(where), *args], capture_output=True, text=True, timeout=60
    )


@dataclass(frozen=True)
class TreeState:
    """What git says of a checkout: its commit and its uncommitted changes (``"M path"``, as
    ``git status --porcelain`` writes them), or why it cannot say (``error``)."""

    repo: str
    commit: str | None = None
    changed: tuple[str, ...] = ()
    error: str = ""

    @property
    def clean(self) -> bool:
        return not self.error and not self.changed

    def record(self) -> Launch:
        """The launch record of a run made on this tree (:data:`PROVENANCE`)."""
        out: Launch = {"commit": self.commit, "changed": list(self.changed)}
        if self.error:
            out["git_error"] = self.error
        return out


def _inside(top: Path, path: Path) -> str | None:
    """``path`` relative to the checkout ``top`` (POSIX), or None when it lies outside."""
    try:
        rel = path.expanduser().resolve().relative_to(top.resolve()).as_posix()
    except ValueError:
        return None
    return None if rel == "." else rel


def tree_state(repo: Path, exclude: Sequence[Path] = ()) -> TreeState:
    """The commit and the uncommitted changes of the git checkout that holds ``repo``: every changed
    tracked file, and every file git does not ignore added under :data:`LOADED_DIRS`; changes
    under ``exclude`` (the study's own folders) are left out."""
    try:
        top = _git(repo, "rev-parse", "--show-toplevel")
    except FileNotFoundError:
        return TreeState(str(repo), error="git is not installed here (no git on PATH)")
    except (OSError, subprocess.SubprocessError) as err:
        return TreeState(str(repo), error=f"git failed ({err})")
    if top.returncode != 0:
        why = top.stderr.strip().splitlines()[-1:] or ["git rev-parse failed"]
        return TreeState(str(repo), error=f"{repo} is not in a git checkout ({why[0]})")
    root = Path(top.stdout.strip())
    head = _git(root, "rev-parse", "--verify", "HEAD")
    if head.returncode != 0:
        return TreeState(str(root), error=f"the checkout {root} has no commit yet")
    status = _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all")
    if status.returncode != 0:
        return TreeState(str(root), head.stdout.strip(), error=f"git status failed in {root}")
    skip = [rel for rel in (_inside(root, Path(p)) for p in exclude) if rel is not None]
    loaded = tuple(f"{d}/" for d in LOADED_DIRS)
    changed = []
    entries = iter(status.stdout.split("\0"))
    for entry in entries:
        if len(entry) < 4:
            continue
        code, path = entry[:2], entry[3:]
        if code[0] in "RC":
            next(entries, None)  # -z writes a rename's (or copy's) source after it
        if any(path == s or path.startswith(f"{s}/") for s in skip):
            continue
        if code == "??" and not path.startswith(loaded):
            continue
        changed.append(f"{code.strip()} {path}")
    return TreeState(str(root), head.stdout.strip(), tuple(changed))


def is_ancestor(repo: Path, older: str, newer: str) -> bool | None:
    """``git merge-base --is-ancestor older newer`` in ``repo``: True when ``older`` is ``newer``
    or an ancestor of it, False when not, None when git cannot say (a commit it does not have)."""
    try:
        done = _git(repo, "merge-base", "--is-ancestor", older, newer)
    except (OSError, subprocess.SubprocessError):
        return None
    return {0: True, 1: False}.get(done.returncode)


def file_record(path: Path) -> FileRecord:
    """A pre-registration's file as its record: its ``sha256``, the ``commit`` that last changed it
    and when (``committed_at``, UTC), and whether it is ``committed`` as it is (tracked, unchanged
    since); ``git_error`` when git cannot say."""
    out: FileRecord = {
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "commit": None,
        "committed_at": None,
        "committed": False,
    }
    where = path.resolve().parent
    try:
        log = _git(where, "log", "-1", "--format=%H %cI", "--", path.name)
        status = _git(where, "status", "--porcelain=v1", "--untracked-files=all", "--", path.name)
    except (OSError, subprocess.SubprocessError) as err:
        return {**out, "git_error": f"git is not available ({err})"}
    if log.returncode != 0:
        return {**out, "git_error": f"{path} is not in a git checkout"}
    if log.stdout.strip():
        commit, when = log.stdout.split()
        out["commit"], out["committed_at"] = commit, utc(when)
        out["committed"] = status.returncode == 0 and not status.stdout.strip()
    return out


def publishable(cfg: StudyConfig) -> list[str]:
    """What makes the study publishable (module docstring), as its settings; [] when nothing."""
    why = []
    if getattr(cfg, "publish", ""):
        why.append(f"publish={cfg.publish}")
    if getattr(cfg, "archive_to", ""):
        why.append(f"archive_to={cfg.archive_to}")
    if cfg.eval.split == "test":
        why.append("eval.split=test")
    return why


def study_folders(cfg: StudyConfig) -> list[Path]:
    """The folders the study writes its records to while it runs (and its parts' records): a
    change there is the study's own, not the code's."""
    out = [cfg.directory()]
    if cfg.archive_to:
        out.append(Path(cfg.archive_to))
    if cfg.publish:
        out += [Path(cfg.publish), published_records(cfg.publish)]
    out += [Path(p) for p in getattr(cfg, "parts", None) or []]
    return out


# -- what a run was made on -------------------------------------------------------------------------
def record_launch(
    run: Path, launch: Launch, study: Mapping[str, object], *, resumed: bool = False
) -> None:
    """Add one launch of the run in ``run`` (its start, :meth:`TreeState.record`) to its
    :data:`PROVENANCE`, with what the study stands on (``study``: ``allow_dirty``, ``data_key``,
    ``preregistration``). A launch that does not go on from a checkpoint (``resumed``) trains the
    run from its start: the launches before it made nothing the run keeps, and are dropped."""
    path = run / PROVENANCE
    saved: dict[str, object] = {**(read_json_object(path) or {})} if resumed else {}
    saved |= dict(study)
    earlier = saved.get("launches", [])
    saved["launches"] = [
        *(earlier if isinstance(earlier, list) else []),
        {"started": now(), **launch},
    ]
    saved.pop("trained", None)  # trained again (a retry), or on from a checkpoint
    _write(path, saved)


def record_trained(run: Path) -> None:
    """The run in ``run`` finished training now."""
    path = run / PROVENANCE
    saved = read_json_object(path)
    if saved is not None:
        _write(path, {**saved, "trained": now()})


def record_evaluated(out: Path) -> None:
    """The evaluation in ``out`` finished now."""
    _write(out / EVAL_TIME, {"finished": now()})


def run_provenance(run: Path, evals: Path) -> Provenance | None:
    """The provenance of the run in ``run`` (evaluated in ``evals``) for its archived record:
    ``train_started`` (its first launch), ``train_ended``, ``evaluated``, its ``launches`` (each
    one's start, commit and uncommitted changes), ``allow_dirty``, ``data_key`` and
    ``preregistration``; None for a run the study did not record (made before these records)."""
    read = read_json_object(run / PROVENANCE)
    if read is None:
        return None
    saved = cast(_Saved, read)
    launches = saved.get("launches") or []
    evaluated = cast(
        dict[str, str], read_json_object(evals / EVAL_TIME) or {}
    )  # record_evaluated's
    return {
        "train_started": launches[0].get("started") if launches else None,
        "train_ended": saved.get("trained"),
        "evaluated": evaluated.get("finished"),
        "launches": launches,
        "allow_dirty": bool(saved.get("allow_dirty")),
        "data_key": saved.get("data_key"),
        "preregistration": saved.get("preregistration"),
    }


class _Saved(Provenance, total=False):
    """A run directory's :data:`PROVENANCE` as :func:`record_launch` writes it (``trained``: when
    it finished training)."""

    trained: str


def _launch_commit(launch: Launch) -> str:
    commit = str(launch.get("commit") or "unknown")
    return commit + ("-dirty" if launch.get("changed") else "")


def record_commits(record: RunRecord) -> list[str]:
    """The commits a run's record (archived, or a run directory's) says it was made on: each
    launch's (``-dirty`` when its tree had uncommitted changes; ``unknown`` when git could not
    say), else the one its train process recorded (``versions.git_commit``); [] when none."""
    # a run directory's record is its provenance itself
    prov = record.get("provenance") or cast(Provenance, record)
    launches = prov.get("launches") or []
    if launches:
        return list(dict.fromkeys(_launch_commit(launch) for launch in launches))
    commit = (record.get("versions") or {}).get("git_commit")
    return [str(commit)] if commit else []


def same_commit(commit: str, head: str | None) -> bool:
    """Whether a recorded ``commit`` (full or abbreviated) is the clean checkout at ``head``."""
    if not head or commit.endswith("-dirty") or commit == "unknown" or len(commit) < 7:
        return False
    return head.startswith(commit) or commit.startswith(head)


def short(commit: str) -> str:
    """A commit as the report shows it: 12 hex digits, ``-dirty`` kept."""
    dirty = commit.endswith("-dirty")
    bare = commit.removesuffix("-dirty")
    return (bare if bare == "unknown" else bare[:12]) + ("-dirty" if dirty else "")


# -- the report's reading ---------------------------------------------------------------------------
class IntegrityRow(TypedDict):
    """One run's provenance in the report (:func:`integrity`)."""

    arm: str
    seed: int
    recorded: bool
    commits: list[str]
    changed: list[str]
    git_error: str
    allow_dirty: bool
    train_started: str | None
    train_ended: str | None
    evaluated: str | None
    data_key: JSON


class FirstRun(TypedDict):
    """The run that began training first."""

    run: str
    train_started: str | None
    commit: str | None


class PreregistrationOrder(TypedDict):
    """Whether the pre-registration precedes the first run (:func:`preregistration_order`)."""

    preregistration: str | None
    sha256: str | None
    commit: str | None
    committed_at: str | None
    ancestor: bool | None
    precedes: bool
    problems: list[str]


class _Integrity(TypedDict):
    runs: list[IntegrityRow]
    commits: list[str]
    mixed: bool
    dirty: list[str]
    unknown: list[str]
    first_run: FirstRun | None


class Integrity(_Integrity, total=False):
    """What the runs' records say of the study's integrity (:func:`integrity`)."""

    preregistration: PreregistrationOrder


def integrity(archive: ArchivedRuns, runs: Sequence[tuple[str, int]]) -> Integrity | None:
    """What the archived records of ``runs`` say of the study's integrity: per run its commits,
    uncommitted changes and times; the commits of the table (``mixed`` when more than one), the
    runs made on a dirty tree or an unknown commit, the first run (by its training start) and the
    pre-registration's order against it (:func:`preregistration_order`). None when no record has
    a provenance (an archive from before they were kept: its report stays as it was)."""
    records = {(arm, seed): r for arm, seed in runs if (r := archive.run(arm, seed)) is not None}
    if not any(r.get("provenance") for r in records.values()):
        return None
    rows: list[IntegrityRow] = []
    for (arm, seed), r in records.items():
        prov: Provenance = r.get("provenance") or {}
        launches = prov.get("launches") or []
        commits = record_commits(r)
        rows.append(
            {
                "arm": arm,
                "seed": seed,
                "recorded": bool(prov),
                "commits": [short(c) for c in commits],
                "changed": list(dict.fromkeys(c for ln in launches for c in ln.get("changed", []))),
                "git_error": next((ln["git_error"] for ln in launches if ln.get("git_error")), ""),
                "allow_dirty": bool(prov.get("allow_dirty")),
                "train_started": prov.get("train_started"),
                "train_ended": prov.get("train_ended"),
                "evaluated": prov.get("evaluated"),
                "data_key": prov.get("data_key"),
            }
        )
    bare = sorted({c.removesuffix("-dirty") for row in rows for c in row["commits"]})
    started = [row for row in rows if row["train_started"]]
    first = min(started, key=lambda row: _time(row["train_started"] or "")) if started else None
    out: Integrity = {
        "runs": rows,
        "commits": bare,
        "mixed": len(bare) > 1,
        "dirty": [_label(r) for r in rows if any(c.endswith("-dirty") for c in r["commits"])],
        "unknown": [_label(r) for r in rows if _unknown(r)],
        "first_run": None,
    }
    if first is not None:
        out["first_run"] = {
            "run": _label(first),
            "train_started": first["train_started"],
            "commit": first["commits"][0] if first["commits"] else None,
        }
    prereg = preregistration_order(records, out["first_run"])
    if prereg is not None:
        out["preregistration"] = prereg
    return out


def _label(row: IntegrityRow) -> str:
    return f"`{row['arm']}` seed {row['seed']}"


def _unknown(row: IntegrityRow) -> bool:
    return not row["commits"] or any(c.startswith("unknown") for c in row["commits"])


def preregistration_order(
    records: Mapping[tuple[str, int], RunRecord], first: FirstRun | None
) -> PreregistrationOrder | None:
    """Whether the pre-registration the runs' records name precedes the first run: it was
    committed as it is when the runs began, its commit's time is before the first run's training
    start, its commit is an ancestor of each launch's (``git merge-base --is-ancestor``, checked
    at the launch), and its file is the same for every run. ``precedes`` with the ``problems``
    found; None when no record names a pre-registration."""
    preregs = [
        p
        for r in records.values()
        if isinstance(p := (r.get("provenance") or {}).get("preregistration"), dict)
    ]
    if not preregs:
        return None
    p = preregs[0]
    problems = []
    if len({q.get("sha256") for q in preregs}) > 1:
        problems.append("its file changed while the runs were made (several sha256)")
    if not all(q.get("committed") for q in preregs):
        problems.append("it was not committed as it is when a run began")
    if any(q.get("ancestor") is False for q in preregs):
        problems.append("its commit is not an ancestor of a run's commit")
    when = p.get("committed_at")
    if first is None:
        problems.append("no run records when it began training")
    elif when is None:
        problems.append("its commit is not recorded")
    elif _time(when) > _time(first["train_started"] or ""):
        problems.append(
            f"it was committed at {when}, after the first run ({first['run']}) began training at "
            f"{first['train_started']}"
        )
    return {
        "preregistration": p.get("preregistration"),
        "sha256": p.get("sha256"),
        "commit": p.get("commit"),
        "committed_at": when,
        "ancestor": all(q.get("ancestor") for q in preregs)
        if all(q.get("ancestor") is not None for q in preregs)
        else None,
        "precedes": not problems,
        "problems": problems,
    }


def _changes(changed: Sequence[str]) -> str:
    shown = ", ".join(f"`{c}`" for c in changed[:SHOWN])
    more = f" and {len(changed) - SHOWN} more" if len(changed) > SHOWN else ""
    return f"{len(changed)} uncommitted change{'s' if len(changed) != 1 else ''}: {shown}{more}"


def integrity_lines(info: Integrity | None) -> list[str]:
    """The report's lines on :func:`integrity`: the commit every run was made on, or, marked, the
    commits mixed in the table (each run under its commit), the runs made on an uncommitted tree
    (each with its changes) or on an unknown commit, and the pre-registration's order against the
    first run. [] for an archive without provenance records."""
    if not info:
        return []
    rows = info["runs"]
    lines = []
    allowed = " (`allow_dirty=true`)" if any(r["allow_dirty"] for r in rows) else ""
    if info["mixed"]:
        by: dict[str, list[str]] = {}
        for r in rows:
            for c in r["commits"] or ["unknown"]:
                by.setdefault(c.removesuffix("-dirty"), []).append(_label(r))
        lines.append(
            f"**Commits mixed in this table{allowed}:** its runs were made on {len(by)} commits: "
            + "; ".join(f"`{c}`: {', '.join(labels)}" for c, labels in by.items())
            + ". A difference between runs of different commits may come from the code, not the "
            "method."
        )
    dirty = [r for r in rows if any(c.endswith("-dirty") for c in r["commits"])]
    if dirty:
        lines.append(
            f"**Made on an uncommitted tree{allowed}:** "
            + "; ".join(
                f"{_label(r)} (on `{r['commits'][-1].removesuffix('-dirty')}`, "
                + (_changes(r["changed"]) if r["changed"] else "changes not recorded")
                + ")"
                for r in dirty
            )
            + ". The code these runs were made with is no commit's."
        )
    unknown = [r for r in rows if _unknown(r)]
    if unknown:
        lines.append(
            f"**Commit unknown{allowed}:** "
            + "; ".join(
                f"{_label(r)}" + (f" ({r['git_error']})" if r["git_error"] else "") for r in unknown
            )
            + "."
        )
    first = info.get("first_run")
    if not lines:
        span = (
            f"; the first run, {first['run']}, began training at {first['train_started']}"
            if first
            else ""
        )
        lines.append(
            f"Provenance: every run ({len(rows)}) was made on commit `{info['commits'][0]}`, with "
            "no uncommitted change to the code"
            + span
            + " (each run's commit, times and data key: `study.json`, `integrity`)."
        )
    p = info.get("preregistration")
    if p:
        what = (
            f"`{p['preregistration']}` (sha256 `{str(p['sha256'])[:12]}`, committed in "
            f"`{short(str(p['commit'] or 'unknown'))}` at {p['committed_at'] or 'an unknown time'})"
        )
        if p["precedes"] and first:
            how = "; its commit is an ancestor of every run's" if p["ancestor"] else ""
            lines.append(
                f"Pre-registration: {what} precedes the first run ({first['run']}, training from "
                f"{first['train_started']}){how}."
            )
        else:
            lines.append(
                f"**Pre-registration not shown to precede the first run:** {what}: "
                + "; ".join(p["problems"])
                + "."
            )
    return [*lines, ""]


def _write(path: Path, data: Mapping[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
