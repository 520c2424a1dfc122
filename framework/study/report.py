"""The study's report: per-arm tables, paired differences, entity analysis, curves, provenance.

Everything is computed from the study's archive (:mod:`framework.study.archive`): the
per-question, per-sample records of every evaluation, the runs' curves and versions, and the
study's config. :func:`write_study` first brings the archive up to date from the study directory,
then writes ``study.md``, ``study.json`` and ``curves/*.png`` from the archive alone, so a committed
archive regenerates the published report exactly.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from framework.eval.curves import curve_table, plot_arms
from framework.study.archive import CURVE_TAGS, StudyArchive, archive_study
from framework.study.entity_credit import pooled
from framework.study.integrity import integrity, integrity_lines
from framework.study.layout import published_records
from framework.study.learning_bar import learning_bar
from framework.study.render import study_markdown
from framework.study.runs import RunState
from framework.study.schema import StudyConfig, all_seeds, arm_seeds
from framework.study.screen import row_machines, screen_parts, screen_rows
from framework.study.screen_render import parts_markdown, screen_markdown
from framework.study.summary import StudySummary, summarize_study


def write_study(root: Path, cfg: StudyConfig, states: Sequence[RunState]) -> StudySummary:
    """Archive the study in ``root`` (:func:`archive_study`), then write its report from the
    archive alone (:func:`write_report`)."""
    archive_study(root, cfg, states)
    return write_report(root, cfg)


def write_subset_report(root: Path, cfg: StudyConfig, seeds: Sequence[int]) -> StudySummary:
    """The report over ``seeds`` only, a subset of the study's (a sensitivity analysis, e.g. the
    seeds no exploration used), from ``<root>/archive`` beside the main report:
    ``study_seeds_<s>_<s>.md``, ``.json`` and ``curves_seeds_<s>_<s>/``; the main report and
    the archive stay as they are.

    Raises:
        ValueError: a seed the study does not have, or none.
    """
    extra = [s for s in seeds if s not in all_seeds(cfg)]
    if not seeds or extra:
        raise ValueError(
            f"[only_seeds] got {list(seeds)}; expected some of the study's seeds "
            f"{list(cfg.seeds)}. Fix: pass only_seeds=[...] from those."
        )
    tag = "_seeds_" + "_".join(str(s) for s in seeds)
    subset = replace(cfg, seeds=[s for s in seeds if s in cfg.seeds], only_seeds=[])
    if getattr(cfg, "baseline_seeds", None):  # a replicated baseline: its seeds of the subset
        subset = replace(subset, baseline_seeds=[s for s in cfg.baseline_seeds if s in seeds])
    return write_report(root, subset, publish=False, suffix=tag, subset_of=list(cfg.seeds))


def write_report(
    root: Path,
    cfg: StudyConfig,
    *,
    publish: bool = True,
    suffix: str = "",
    subset_of: Sequence[int] = (),
) -> StudySummary:
    """``study.md``, ``study.json`` and ``curves/`` in ``root`` (each name with ``suffix``), from
    ``<root>/archive`` only; a screen with ``cfg.publish`` also publishes
    (:func:`publish_screen`) unless ``publish`` is off. ``subset_of``: the study's seeds, when
    ``cfg.seeds`` is a subset of them (:func:`write_subset_report`)."""
    archive = StudyArchive(root / "archive")
    arms, seeds = list(cfg.arms), all_seeds(cfg)  # with a replicated baseline's further seeds
    summary = summarize_study(archive, arms, seeds, cfg.baseline, cfg.bootstrap, cfg.min_effect)
    runs = {arm: [archive.curves(arm, s) for s in seeds] for arm in arms}
    runs = {a: [c for c in r if c] for a, r in runs.items()}
    runs = {a: r for a, r in runs.items() if r}
    plots = plot_arms(
        runs, list(CURVE_TAGS), root / f"curves{suffix}", title_prefix=f"{cfg.name}: "
    )
    summary["curves"] = curve_table(runs, list(CURVE_TAGS))
    rates = {
        arm: h
        for arm in arms
        if (h := pooled([(archive.run(arm, s) or {}).get("wrong_entity_rates") for s in seeds]))
        is not None
    }
    if rates:  # archives from before the histogram was kept have none (their reports unchanged)
        summary["wrong_entity_rates"] = rates
    summary["runs"] = [
        {
            "arm": arm,
            "seed": seed,
            "status": run["status"],
            "seconds": run["seconds"],
            "train_seconds": run["train_seconds"],
            "dir": f"runs/{arm}/seed{seed}",
            "versions": run["versions"],
        }
        for arm, seed in archive.runs(arms)
        if (run := archive.run(arm, seed)) is not None
    ]
    # the runs' commits, trees, times and pre-registration (archives without them: no key)
    provenance = integrity(archive, archive.runs(arms))
    if provenance is not None:
        summary["integrity"] = provenance
    bar = getattr(cfg, "learning_bar", None)  # a config from before the bar has none
    if bar is not None and bar.arm:  # does the learning arm learn here (issue 79)?
        summary["learning_bar"] = learning_bar(archive, summary, bar, arm_seeds(cfg, bar.arm))
    table = ""
    if getattr(cfg, "screen", False):
        summary["screen"] = screen_rows(summary, archive, arms, cfg.baseline, cfg=cfg)
        parts = screen_parts(cfg)
        in_parts = {r["arm"]: p["name"] for p in parts for r in p["rows"]}
        table = screen_markdown(cfg, summary["screen"], in_parts=in_parts)
        if parts:
            summary["screen_parts"] = [
                {"name": p["name"], "archive": p["archive"], "rows": p["rows"]} for p in parts
            ]
            table += parts_markdown(parts, row_machines(summary["screen"]))
        if marks := integrity_lines(provenance):  # on the page too, above the table
            table = "\n".join(marks) + "\n" + table
    (root / f"study{suffix}.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    text = study_markdown(cfg, summary, plots, root, screen_table=table)
    if subset_of:
        head, rest = text.split("\n", 1)
        text = (
            f"{head} (seeds {list(seeds)} only)\n\n**A sensitivity analysis that decides nothing:** "
            f"every figure below pools seeds {list(seeds)} of the study's {list(subset_of)}; the "
            "study's own report (`study.md`) pools them all. `seekrl-study report_only=true "
            f"only_seeds=[{','.join(str(x) for x in seeds)}]` regenerates this page from "
            "`archive/`.\n" + rest
        )
    (root / f"study{suffix}.md").write_text(text)
    if getattr(cfg, "screen", False) and cfg.publish and publish:
        publish_screen(root, cfg, table)
    return summary


def publish_screen(root: Path, cfg: StudyConfig, table: str) -> Path:
    """Writes the screening ``table`` to ``cfg.publish`` (``docs/benchmarks/screen.md``) with the
    records it comes from beside it: ``root``'s archive copied to the folder of the same name
    (``docs/benchmarks/screen/archive``) and the study's report written there from that copy, so
    that what the page shows is committed with it and regenerates from it. Reporting from that
    folder itself (``report_only=true out_dir=docs/benchmarks/screen``) rewrites the page only.
    Returns the records folder."""
    target = Path(cfg.publish)
    records = published_records(target)
    if records.resolve() != root.resolve():
        if (records / "archive").exists():
            shutil.rmtree(records / "archive")  # a run that left the screen drops out of it too
        shutil.copytree(root / "archive", records / "archive")
        write_report(records, cfg, publish=False)
    target.parent.mkdir(parents=True, exist_ok=True)
    head = (
        f"# {cfg.name}: the screening table\n\nWritten by `seekrl-study` from the records in "
        f"`{records}/archive` (their full report: `{records}/study.md`; the training curves: "
        f"`{records}/curves/`); "
        f"`seekrl-study study={cfg.name} out_dir={records} report_only=true` regenerates both "
        "from them.\n\n"
    )
    target.write_text(head + table)
    return records
