"""``seekrl-synth``: compose and validate the synth config (the body lands in a later release)."""

from __future__ import annotations

from framework.cli.app import run_app
from framework.cli.pending import report_pending
from framework.config.schema import SynthConfig


def synth(cfg: SynthConfig) -> None:
    report_pending("synth", cfg, "question synthesis")


def main() -> None:
    run_app("synth", synth)


if __name__ == "__main__":
    main()
