"""``seekrl-serve``: compose and validate the serve config (the body lands in a later release)."""

from __future__ import annotations

from framework.cli.app import run_app
from framework.cli.pending import report_pending
from framework.config.schema import ServeConfig


def serve(cfg: ServeConfig) -> None:
    report_pending("serve", cfg, "the retrieval server")


def main() -> None:
    run_app("serve", serve)


if __name__ == "__main__":
    main()
