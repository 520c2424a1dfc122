"""docs/algorithms.md, the methods page, is what tools/algorithms_table.py writes from the
registries: one row per built-in method, each with a formula and a unit-test file."""

from __future__ import annotations

from typing import Any

import pytest

from framework import DISTRIBUTION
from framework.registry import ALL, load_components
from tests.unit.registry.test_registry_table import REPO, load_tool


def _tool() -> Any:
    return load_tool("algorithms_table")


@pytest.mark.slow
def test_the_page_is_what_the_tool_writes():
    tool = _tool()
    assert (REPO / "docs" / "algorithms.md").read_text() == tool.render(), (
        "docs/algorithms.md is out of date. Fix: python3 tools/algorithms_table.py"
    )


@pytest.mark.slow
def test_every_builtin_method_has_a_row_a_formula_and_a_test_file():
    tool = _tool()
    load_components(plugins=False)
    rows = {(r["kind"], r["name"]): r for r in tool.rows()}
    for kind in tool.KINDS:
        for entry in ALL[kind]:
            if entry.source != DISTRIBUTION:
                continue
            if kind == "health_monitor" and not entry.config_cls.paper:
                assert (kind, entry.name) not in rows  # a health check, not a method
                continue
            row = rows[(kind, entry.name)]
            assert row["formula"] != "-", (kind, entry.name)
            assert row["tests"] != "-", f"{kind}={entry.name} is named by no unit test"


def test_formula_and_paper_extraction():
    tool = _tool()
    doc = """X (Li et al. 2025, arXiv 2501.01234, eq. 3).

    Per token::

        loss_t = -a | b
        w_t = 1

    More text."""
    assert tool.paper(doc) == "[2501.01234](https://arxiv.org/abs/2501.01234)"
    assert tool.formula(doc) == "``loss_t = -a \\| b; w_t = 1``"
    assert tool.first_sentence("GRPO: ``A = r - m``; Dr. GRPO without the std. Later.") == (
        "GRPO: ``A = r - m``; Dr. GRPO without the std."
    )
    assert tool.paper("no link here") == "-"


@pytest.mark.slow
def test_every_bundle_matches_its_papers_update_settings_or_says_why():
    """Each conf/algorithm bundle, composed, against its paper's aggregation, policy epochs and
    mini-batches (tools/algorithms_table.py ``PAPER_UPDATES``): a recovered value it departs from
    needs a reason, and a bundle without an entry fails."""
    tool = _tool()
    bundles = sorted(p.stem for p in (REPO / "conf" / "algorithm").glob("*.yaml"))
    missing = [b for b in bundles if b not in tool.PAPER_UPDATES]
    assert not missing, f"bundles without a PAPER_UPDATES entry: {missing}"
    for name in bundles:
        ours = tool.bundle_settings(name)
        *paper, source, why = tool.PAPER_UPDATES[name]
        departs = [
            (field, got, want)
            for field, got, want in zip(("agg", "epochs", "mini-batches"), ours, paper, strict=True)
            if want is not None and got != want
        ]
        assert source, name
        assert not departs or why, f"{name} departs from its paper without a reason: {departs}"


def test_the_bundles_that_follow_their_authors_code_take_its_aggregation():
    """LLDS and HAPO average over tokens as their authors' code does (issue 74); E-GRPO and its
    GRPO arm take the sequence mean of token means, one on-policy update per batch."""
    tool = _tool()
    assert tool.bundle_settings("llds")[0] == "token_mean"
    assert tool.bundle_settings("hapo")[0] == "token_mean"
    assert tool.bundle_settings("e_grpo") == ("seq_mean_token_mean", 1, 1)
    assert tool.bundle_settings("grpo") == ("seq_mean_token_mean", 1, 1)
