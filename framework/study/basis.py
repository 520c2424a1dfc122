"""What every run and evaluation of a study stands on, and the refusals when it changed: the
questions and the warm start (:func:`study_basis`, by content :func:`content_basis`), the kept
archive's and the published page's basis, and each run's config against its arm's now.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from framework.config.inert import config_leaves
from framework.study.archive import StudyArchive
from framework.study.layout import ARCHIVE, BASIS, published_records, run_dir_of
from framework.study.schema import StudyConfig
from framework.study.types import JSON

if TYPE_CHECKING:
    from framework.training.precision import PrecisionChoice


def study_basis(train_cfg: Any) -> dict[str, Any]:
    """The questions (their data key) and the warm start every run begins from: when either changes
    (new synthesis code, other files, another SFT), finished runs and evaluations no longer pair."""
    from framework.data.datasets import data_key
    from framework.sft.warm_start import warm_start_sft

    ws = train_cfg.warm_start
    if ws.path is not None:
        start = str(ws.path)
    elif ws.sft:
        start = str(warm_start_sft(train_cfg)[1])
    else:
        start = f"{train_cfg.rollout.policy.source}:{train_cfg.rollout.policy.path}"
    return {"data": data_key(train_cfg.dataset), "warm_start": start}


def content_basis(train_cfg: Any, eval_split: str) -> dict[str, Any]:
    """What :func:`study_basis` names, by content: a digest of the training and evaluation
    questions and one of the warm start's weights. A config key stays the same on another machine
    whose index, synthesis or SFT came out differently (other floating-point kernels, say); these
    do not, so a study resumed elsewhere (``archive_to``) goes on only from the same questions and
    the same warm start. ``train_cfg`` has the warm start in place (:func:`warm_start`)."""
    import hashlib

    from framework.registry import DATASETS

    load = DATASETS.bind(train_cfg.dataset)
    questions = hashlib.sha256()
    for split in dict.fromkeys(("train", eval_split)):
        for item in load(split):
            fields = asdict(item)
            if fields.get("prompt") is None:  # digests from before QAItem.prompt stay the same
                fields.pop("prompt", None)
            questions.update(json.dumps(fields, sort_keys=True, default=str).encode())
            questions.update(b"\n")
    policy = train_cfg.rollout.policy
    weights = hashlib.sha256()
    folder = Path(str(policy.path)).expanduser()
    files = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin"))
    for f in files:
        weights.update(f.name.encode())
        with f.open("rb") as fh:
            while chunk := fh.read(1 << 24):
                weights.update(chunk)
    return {
        "questions_sha256": questions.hexdigest(),
        "warm_start_sha256": weights.hexdigest() if files else f"{policy.source}:{policy.path}",
    }


def basis_changes(found: dict[str, Any], basis: dict[str, Any]) -> list[str]:
    """How ``basis`` differs from the ``found`` record, on the keys both have (a key the record
    predates is no difference: it is recorded from now on)."""
    return [
        f"{k}: recorded {found[k]!r}, now {v!r}"
        for k, v in basis.items()
        if k in found and found[k] != v
    ]


def check_basis(root: Path, basis: dict[str, Any], record: bool = True) -> None:
    """Record the basis of a new study (or keys of it the record lacks; not when ``record`` is
    False, as in a dry run); refuse to go on with a study made on another one.

    Raises:
        SystemExit: status 2, naming what changed, when ``root`` was made on another basis (or
            holds evaluations from before the basis was recorded).
    """
    path = root / BASIS
    if path.is_file():
        found = json.loads(path.read_text())
    elif (root / "eval" / "start" / "results.json").is_file():
        found = dict.fromkeys(basis, "not recorded")
    else:
        if record:
            path.write_text(json.dumps(basis, indent=2) + "\n")
        return
    changed = basis_changes(found, basis)
    if changed:
        print(
            f"[out_dir] got {root}, whose runs and evaluations were made on another basis:\n  "
            + "\n  ".join(changed)
            + "\nexpected the same questions and warm start. Fix: pass a new out_dir=..., or "
            "delete that directory to start the study over (its results stay valid for the basis "
            "they were made on).",
            file=sys.stderr,
        )
        raise SystemExit(2)
    if record and path.is_file() and not basis.keys() <= found.keys():
        path.write_text(json.dumps({**found, **basis}, indent=2) + "\n")


def check_kept_archive(
    kept: Path,
    cfg: StudyConfig,
    basis: dict[str, Any],
    precision: PrecisionChoice | None = None,
) -> None:
    """Refuse to resume from the archive in ``kept`` (``archive_to``) when it was made on another
    basis (:func:`study_basis`, :func:`content_basis`) or with other eval settings: its records
    would not pair with new ones. Nothing to check when it holds no archive yet.

    ``precision`` (a :class:`~framework.training.precision.PrecisionChoice`, what this machine runs)
    explains a refusal whose cause is the machine: where the archived runs trained in another
    precision, the message says so (:func:`precision_mismatch`).

    Raises:
        SystemExit: status 2, naming each difference.
    """
    archive = StudyArchive(kept)
    if not archive.exists():
        return
    found = json.loads((kept / BASIS).read_text()) if (kept / BASIS).is_file() else None
    if found is None:
        changed = [f"{kept / BASIS}: missing (an archive from before the basis was kept)"]
    else:
        changed = basis_changes(found, basis)
    now = asdict(cfg.eval)
    changed += [
        f"eval.{k}: recorded {v!r}, now {now.get(k)!r}"
        for k, v in cast(dict[str, JSON], archive.config().get("eval", {})).items()
        if now.get(k) != v
    ]
    if changed:
        cause = precision_mismatch(archive, precision) if precision is not None else None
        print(
            f"[archive_to] got {kept}, whose records were made on another basis or with other "
            "eval settings:\n  "
            + "\n  ".join(changed + ([cause[0]] if cause else []))
            + "\nexpected the questions, warm start and evaluation the records were made with. "
            "Fix: "
            + (cause[1] + " Or pass" if cause else "pass")
            + " archive_to=<a new folder> (or archive_to='' to keep no copy"
            + ("; a screen then needs publish=<another page> too" if cfg.publish else "")
            + "), or run where the index, questions and warm start come out the same."
            + (parts_hint(cfg) if cause else ""),
            file=sys.stderr,
        )
        raise SystemExit(2)


def parts_hint(cfg: StudyConfig) -> str:
    """For a refusal the machine causes: the parts of the screen (``parts``), each run on a basis
    of its own (another precision), which may go on here where the screen cannot; '' for none."""
    runs = []
    for folder in cfg.parts:
        archive = StudyArchive(Path(folder))
        name = archive.config().get("name") if archive.exists() else None
        runs.append(
            f"seekrl-study study={name} (records: {folder})"
            if name
            else f"the study whose archive_to is {folder}"
        )
    if not runs:
        return ""
    return (
        " Or go on with this screen's parts, each on a basis of its own: " + "; ".join(runs) + "."
    )


def check_record_folders(
    cfg: StudyConfig, kept: Path | None, basis: dict[str, Any], precision: PrecisionChoice
) -> None:
    """The study's checks of the folders its records come from (``archive_to``) and go to
    (``publish``) against ``basis``: :func:`check_kept_archive`, :func:`check_publish_target`."""
    if kept is not None:
        check_kept_archive(kept, cfg, basis, precision)
    check_publish_target(cfg, kept, basis, precision)


def check_publish_target(
    cfg: StudyConfig,
    kept: Path | None,
    basis: dict[str, Any],
    precision: PrecisionChoice | None = None,
) -> None:
    """Refuse a screen whose page (``publish``) would replace records made on another basis.

    Publishing copies the study's archive over the folder beside the page
    (:func:`framework.study.report.publish_screen`): a screen started afresh elsewhere (a new
    ``out_dir`` and ``archive_to``, say on a machine of another precision) with the shipped
    ``publish`` would overwrite the committed screen's records after its first evaluation. Where
    that folder is the one the study resumes from (``archive_to``), :func:`check_kept_archive`
    decides instead.

    Raises:
        SystemExit: status 2, naming each difference, with the fix.
    """
    if not (cfg.screen and cfg.publish):
        return
    records = published_records(cfg.publish) / ARCHIVE
    if kept is not None and records.resolve() == kept.resolve():
        return
    if not (records / BASIS).is_file():
        return
    changed = basis_changes(json.loads((records / BASIS).read_text()), basis)
    if not changed:
        return
    cause = precision_mismatch(StudyArchive(records), precision) if precision is not None else None
    print(
        f"[publish] got {cfg.publish}, whose records ({records}) were made on another basis:\n  "
        + "\n  ".join(changed + ([cause[0]] if cause else []))
        + "\nexpected a page whose records this study may replace: publishing copies this "
        "study's archive over them. Fix: pass publish=<another page> (or publish='' to write "
        "none), or resume those records with archive_to="
        + str(records)
        + " where the questions and warm start come out the same.",
        file=sys.stderr,
    )
    raise SystemExit(2)


def precision_mismatch(archive: StudyArchive, here: PrecisionChoice) -> tuple[str, str] | None:
    """Whether the archived runs trained in a precision other than ``here`` (this machine's
    :class:`~framework.training.precision.PrecisionChoice`): then the machine is the cause of a
    changed basis, since ``auto`` settings (trainer precision, the encoders' dtype) follow the CPU's
    bf16 support and the index, the questions' answerability check and the warm start's cache key
    follow them. Returns the difference and its fix, or None (no run records say, or they agree).
    """
    recorded: dict[str, str] = {}
    for arm, seed in archive.runs(list(cast(dict[str, JSON], archive.config().get("arms", {})))):
        versions = (archive.run(arm, seed) or {}).get("versions") or {}
        if versions.get("precision"):
            recorded.setdefault(str(versions["precision"]), str(versions.get("cpu", "?")))
    if not recorded or here.precision in recorded:
        return None
    was = "; ".join(f"{p} (on {cpu})" for p, cpu in recorded.items())
    return (
        f"precision: the archived runs trained in {was}, this machine runs {here.precision} "
        f"({here.reason})",
        "resume on a machine that runs the archived runs' precision (for bf16-mixed, a CPU with "
        "native bf16: avx512_bf16 or amx_bf16); forcing it here would run bf16 emulated, many "
        "times slower (tools/bench/precision.py measures by how much).",
    )


#: config keys a run's saved config.yaml may differ in without being another run: where it lives,
#: what it resumed from, and the policy the warm start put in place (the basis pins the warm start);
#: where it logged (an archived run was made in another study directory)
RUN_LOCAL_KEYS = ("run_dir", "resume", "rollout.policy.", "logger.save_dir")

#: fields added after runs were made whose default trains differently from what runs did before:
#: the value such a run behaved as, so that resuming or reusing it under the new default is a
#: difference and not a field "added since" (docs/rl.md, "Over-budget rollouts")
BEHAVED_AS_BEFORE: dict[str, Any] = {"optim.over_budget": "drop"}


def config_drift(run: Path | dict[str, Any] | None, arm_cfg: Any) -> list[str]:
    """How the config ``run`` was trained (or began) with differs from its arm's config now.

    Compares the leaves of ``<run>/config.yaml`` (or of ``run`` itself when it is the saved config
    as a dict: an archived run's) with those of ``arm_cfg`` that both have, leaving out
    :data:`RUN_LOCAL_KEYS`; a key only one side has (a field the framework added since) is not a
    difference, unless it is in :data:`BEHAVED_AS_BEFORE`: a run saved without it is compared as
    having the value it behaved as. ``[]`` when the run has no saved config yet.
    """
    from omegaconf import OmegaConf

    if isinstance(run, dict):
        old = config_leaves(run)
    elif run is None or not (run / "config.yaml").is_file():
        return []
    else:
        old = config_leaves(OmegaConf.to_container(OmegaConf.load(run / "config.yaml")))
    new = config_leaves(OmegaConf.to_container(OmegaConf.structured(arm_cfg)))
    old = {**{k: v for k, v in BEHAVED_AS_BEFORE.items() if k in new}, **old}
    return [
        f"{key}: {old[key]!r} -> {new[key]!r}"
        for key in sorted(old.keys() & new.keys())
        if old[key] != new[key] and not any(key.startswith(k) for k in RUN_LOCAL_KEYS)
    ]


def check_runs_match_arms(root: Path, drift: dict[tuple[str, int], list[str]]) -> None:
    """Refuse to reuse or resume runs whose config is no longer their arm's.

    Raises:
        SystemExit: status 2, listing every such run and what changed.
    """
    stale = {job: lines for job, lines in drift.items() if lines}
    if not stale:
        return
    lines = []
    for (arm, seed), changed in stale.items():
        lines.append(f"{arm} seed {seed} ({run_dir_of(root, arm, seed)}):")
        lines += [f"    {c}" for c in changed[:12]]
        if len(changed) > 12:
            lines.append(f"    ... and {len(changed) - 12} more")
    print(
        f"[arms] got runs in {root} made with another config than their arm's now (an edited "
        "experiment or arm, or a changed default):\n  "
        + "\n  ".join(lines)
        + "\nexpected each finished or interrupted run to match its arm. Fix: give the changed "
        "arm a new name (+arms.<new>=[...]), pass a new out_dir=..., or delete those run "
        "directories to train them again.",
        file=sys.stderr,
    )
    raise SystemExit(2)
