"""The refusals that keep a publishable study honest, made before anything is built or trained
and again before each run: the test split only with a committed pre-registration, frozen at the
first launch, and every run of a table made on one commit from a committed tree
(:mod:`framework.study.integrity` says what git and the records say).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from framework.study import integrity as study_integrity
from framework.study.archive import StudyArchive, study_settings
from framework.study.integrity import (
    PROVENANCE,
    SHOWN,
    TreeState,
    file_record,
    is_ancestor,
    publishable,
    record_commits,
    same_commit,
    short,
    study_folders,
    tree_state,
)
from framework.study.layout import ARCHIVE, run_dir_of
from framework.study.runs import state_on_disk, train_finished
from framework.study.schema import StudyConfig
from framework.study.types import JSON, FileRecord

PREREGISTRATION = "preregistration.json"


def check_preregistration(root: Path, cfg: StudyConfig, record: bool = True) -> None:
    """A study on the test split must name its committed pre-registration, and is frozen: its
    first launch records the pre-registration, the git commit and the study's settings (not when
    ``record`` is False, as in a dry run), and a later launch with other settings is refused
    (choices are made on validation, before).

    Raises:
        SystemExit: status 2 when the pre-registration file is missing, or the settings changed.
    """
    if cfg.eval.split != "test":
        return
    from framework.lightning.run_info import git_commit

    doc = Path(cfg.preregistration.split("#", 1)[0])
    if not doc.is_file():
        print(
            f"[preregistration] got {cfg.preregistration!r}, which names no file here; expected "
            "the committed pre-registration of this study (docs/study.md#<section>). Fix: write "
            "and commit it first, then pass its path.",
            file=sys.stderr,
        )
        raise SystemExit(2)
    settings = study_settings(cfg)
    path = root / PREREGISTRATION
    if not path.is_file():
        if record:
            frozen = {
                "preregistration": cfg.preregistration,
                "git_commit": git_commit(),
                "settings": settings,
                # its file as it was: sha256, the commit that last changed it and when
                "file": file_record(doc),
            }
            path.write_text(json.dumps(frozen, indent=2, sort_keys=True) + "\n")
        return
    frozen = json.loads(path.read_text())["settings"]
    changed = [
        f"{k}: pre-registered {frozen.get(k)!r}, now {v!r}"
        for k, v in settings.items()
        if frozen.get(k) != v
    ]
    if changed:
        print(
            f"[study] got settings that differ from those {root} was pre-registered with:\n  "
            + "\n  ".join(changed)
            + "\nexpected the frozen settings of a test-split study. Fix: run it as "
            "pre-registered; a changed design is a new study (new pre-registration, new out_dir).",
            file=sys.stderr,
        )
        raise SystemExit(2)


def left_to_make(
    root: Path, jobs: Sequence[tuple[str, int]], kept_runs: set[tuple[str, int]]
) -> list[tuple[str, int]]:
    """The (arm, seed) jobs not yet trained and evaluated, here or in the kept archive."""
    return [
        (arm, seed)
        for arm, seed in jobs
        if (arm, seed) not in kept_runs
        and not (
            train_finished(run_dir_of(root, arm, seed))
            and (root / "eval" / arm / f"seed{seed}" / "results.json").is_file()
        )
    ]


def existing_commits(
    root: Path, kept: Path | None, jobs: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], list[str]]:
    """The commits the study's existing runs of ``jobs`` were made on, by (arm, seed): from their
    run directories (the study's record of each launch, else the train process's
    ``versions.json``; not a run with nothing to go on from, which trains from its start), the
    study's archive and the kept archive (``archive_to``)."""
    archives = [StudyArchive(root / ARCHIVE)]
    if kept is not None:
        archives.append(StudyArchive(kept))
    out: dict[tuple[str, int], list[str]] = {}
    for arm, seed in jobs:
        run = run_dir_of(root, arm, seed)
        found: list[str] = []
        if state_on_disk(root, arm, seed).status != "pending":
            for name in (PROVENANCE, "versions.json"):
                try:
                    saved = json.loads((run / name).read_text())
                except (OSError, json.JSONDecodeError):
                    continue
                found += record_commits(saved if name == PROVENANCE else {"versions": saved})
                break
        for archive in archives:
            found += record_commits(archive.run(arm, seed) or {})
        if found:
            out[(arm, seed)] = list(dict.fromkeys(found))
    return out


def integrity_problems(
    cfg: StudyConfig,
    root: Path,
    kept: Path | None,
    jobs: Sequence[tuple[str, int]],
    tree: TreeState,
) -> list[str]:
    """Why the publishable study ``cfg`` may not go on from the checkout ``tree``
    (a :class:`~framework.study.integrity.TreeState`), one line each: git cannot say, the tree
    has uncommitted changes, runs of the table were made on another commit, or its
    pre-registration is not committed as it is, changed, or is not an ancestor of the checkout."""
    what = f"a publishable study ({', '.join(publishable(cfg))})"
    out = []
    if tree.error:
        out.append(
            f"[allow_dirty] got false, and git cannot say what this study's runs are made on: "
            f"{tree.error}; expected a git checkout of the code for {what}, whose records name "
            "their commit. Fix: run it from a git checkout, with git installed, or pass "
            "allow_dirty=true (the report then marks its runs' commit unknown)."
        )
    elif tree.changed:
        shown = ", ".join(tree.changed[:SHOWN])
        more = f" and {len(tree.changed) - SHOWN} more" if len(tree.changed) > SHOWN else ""
        out.append(
            f"[allow_dirty] got false, with {len(tree.changed)} uncommitted change(s) in "
            f"{tree.repo}: {shown}{more}; expected a clean checkout for {what} (its own folders "
            "do not count, nor untracked files outside framework/ and conf/). Fix: commit or "
            "stash the changes first, or pass allow_dirty=true (the report then marks each run "
            "made on this tree)."
        )
    if tree.commit:
        others = {
            job: bad
            for job, commits in existing_commits(root, kept, jobs).items()
            if (bad := [c for c in commits if not same_commit(c, tree.commit)])
        }
        if others:
            listed = "; ".join(
                f"{arm} seed {seed}: {', '.join(short(c) for c in commits)}"
                for (arm, seed), commits in list(others.items())[:SHOWN]
            )
            more = f"; and {len(others) - SHOWN} more" if len(others) > SHOWN else ""
            afresh = "out_dir and archive_to" + (" and publish" if cfg.publish else "")
            out.append(
                f"[allow_dirty] got false, with {len(others)} run(s) of this table made on "
                f"another commit (or tree) than this checkout's {short(tree.commit)} "
                f"({listed}{more}); expected every run of {what} made on one commit. Fix: go on "
                f"from the commit those runs were made on, start the table afresh (a new "
                f"{afresh}), or pass allow_dirty=true (the report then names each run's commit)."
            )
    return out + preregistration_problems(cfg, root, tree)


def preregistration_problems(cfg: StudyConfig, root: Path, tree: TreeState) -> list[str]:
    """A test-split study's pre-registration that does not precede its runs: its file not
    committed as it is, changed since the study froze it (:func:`check_preregistration`), or its
    commit not an ancestor of the checkout's. [] for any other study, and for a file that is
    missing (:func:`check_preregistration` refuses that)."""
    doc = Path(cfg.preregistration.split("#", 1)[0])
    if cfg.eval.split != "test" or not cfg.preregistration or not doc.is_file():
        return []
    now = file_record(doc)
    path = root / PREREGISTRATION
    frozen = (json.loads(path.read_text()).get("file") if path.is_file() else None) or {}
    out = []
    if not now["committed"]:
        why = now.get("git_error") or "untracked, or changed since its last commit"
        out.append(
            f"[preregistration] got {cfg.preregistration!r}, whose file is not committed as it is "
            f"({why}); expected a pre-registration committed before the study runs. Fix: commit "
            f"it first (git add {doc} && git commit), or pass allow_dirty=true (the report then "
            "says it is not shown to precede the runs)."
        )
    if frozen.get("sha256") and frozen["sha256"] != now["sha256"]:
        out.append(
            f"[preregistration] got {cfg.preregistration!r}, whose file changed since {root} was "
            f"pre-registered (sha256 {frozen['sha256'][:12]} then, {now['sha256'][:12]} now); "
            "expected the file the study froze. Fix: restore it"
            + (f" (git show {short(frozen['commit'])}:<its path>)" if frozen.get("commit") else "")
            + "; a changed design is a new study (a new pre-registration and out_dir)."
        )
    base = frozen.get("commit") or now["commit"]
    if base and tree.commit and is_ancestor(Path(tree.repo), base, tree.commit) is False:
        out.append(
            f"[preregistration] got {cfg.preregistration!r}, committed in {short(base)}, which is "
            f"not an ancestor of this checkout's commit {short(tree.commit)}; expected runs made "
            "on a commit that contains their pre-registration. Fix: run from a checkout that "
            f"does (git merge-base --is-ancestor {short(base)} HEAD), or pass allow_dirty=true."
        )
    return out


def check_integrity(
    cfg: StudyConfig,
    root: Path,
    kept: Path | None,
    jobs: Sequence[tuple[str, int]],
    kept_runs: set[tuple[str, int]] | None = None,
    *,
    quiet: bool = False,
) -> TreeState:
    """Refuse to start (or go on with) a publishable study on an uncommitted tree, on a commit
    other than its table's existing runs', or with a pre-registration that does not precede its
    runs (:func:`integrity_problems`; :mod:`framework.study.integrity`), unless
    ``allow_dirty``: then say so (unless ``quiet``) and go on; the runs' records say what they
    were made on and the report marks them. A study with nothing left to make is not refused (it
    only reports). Returns the tree (:class:`~framework.study.integrity.TreeState`), for the
    runs' records.

    Raises:
        SystemExit: status 2, with one line per problem, before anything is built or trained.
    """
    # the module's code_checkout, looked up at call time (tests point it at a temporary checkout)
    tree = tree_state(study_integrity.code_checkout(), study_folders(cfg))
    if not publishable(cfg):
        return tree
    start_done = (root / "eval" / "start" / "results.json").is_file() or (
        kept is not None and (kept / "eval" / "start.jsonl.gz").is_file()
    )
    if start_done and not left_to_make(root, jobs, kept_runs or set()):
        return tree
    problems = integrity_problems(cfg, root, kept, jobs, tree)
    if not problems:
        return tree
    if cfg.allow_dirty:
        if not quiet:
            print(
                "seekrl-study: allow_dirty=true: going on, and the report marks the runs made "
                "so, although\n  " + "\n  ".join(problems),
                flush=True,
            )
        return tree
    print("\n".join(problems), file=sys.stderr)
    raise SystemExit(2)


def launch_context(
    cfg: StudyConfig, root: Path, tree: TreeState, data_key: dict[str, JSON]
) -> dict[str, object]:
    """What every run's provenance record of this invocation carries besides its launch:
    ``allow_dirty``, the questions' ``data_key`` and, for a study with one, the pre-registration
    (its file as it is now, :func:`~framework.study.integrity.file_record`, and whether its
    commit is an ancestor of the checkout's: ``ancestor``, None when git cannot say)."""
    prereg: FileRecord | None = None
    doc = Path(cfg.preregistration.split("#", 1)[0])
    if cfg.preregistration and doc.is_file():
        prereg = {"preregistration": cfg.preregistration, **file_record(doc)}
        base, head = prereg.get("commit"), tree.commit
        prereg["ancestor"] = is_ancestor(Path(tree.repo), base, head) if base and head else None
    return {"allow_dirty": cfg.allow_dirty, "data_key": data_key, "preregistration": prereg}
