"""Every study published under docs/benchmarks with its archive regenerates its report exactly:
the command `seekrl-study report_only=true out_dir=docs/benchmarks/<study>` rebuilds study.md and
study.json from the committed records alone, and `only_seeds=[...]` each published seed-subset
page (study_seeds_<s>_<s>.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
#: a study is published with its report beside its archive; a kept archive still filling
#: (``archive_to``: a long study's records committed as they arrive) has no report yet
PUBLISHED = sorted(
    p.parent
    for p in (ROOT / "docs" / "benchmarks").glob("*/archive")
    if (p.parent / "study.md").is_file()
)


def test_at_least_one_study_is_published_with_its_archive():
    assert PUBLISHED, "no docs/benchmarks/<study>/archive: publish a study with its records"


@pytest.mark.parametrize("study_dir", PUBLISHED, ids=[p.name for p in PUBLISHED])
@pytest.mark.slow
def test_a_published_study_regenerates_from_its_archive(study_dir, tmp_path, capsys):
    from framework.cli.app import run_app
    from framework.study.runner import study

    out = tmp_path / study_dir.name
    shutil.copytree(study_dir / "archive", out / "archive")
    run_app(
        "study", study, argv=[f"out_dir={out}", "report_only=true", f"hydra.run.dir={tmp_path}/h"]
    )
    assert "reporting from the archive" in capsys.readouterr().out
    for name in ("study.md", "study.json"):
        assert (out / name).read_text() == (study_dir / name).read_text(), name
    # a published seed subset (a sensitivity analysis: study_seeds_1_2.md) regenerates too
    for page in sorted(study_dir.glob("study_seeds_*.md")):
        seeds = page.stem.removeprefix("study_seeds_").replace("_", ",")
        run_app(
            "study",
            study,
            argv=[
                f"out_dir={out}",
                "report_only=true",
                f"only_seeds=[{seeds}]",
                f"hydra.run.dir={tmp_path}/h",
            ],
        )
        for name in (page.name, page.with_suffix(".json").name):
            assert (out / name).read_text() == (study_dir / name).read_text(), name
