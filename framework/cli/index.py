"""``seekrl-index``: compose and validate the index config (the body lands in a later release)."""

from __future__ import annotations

from framework.cli.app import run_app
from framework.cli.pending import report_pending
from framework.config.schema import IndexConfig


def index(cfg: IndexConfig) -> None:
    report_pending("index", cfg, "building a retrieval index")


def main() -> None:
    run_app("index", index)


if __name__ == "__main__":
    main()
