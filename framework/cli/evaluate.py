"""``seekrl-eval``: compose and validate the eval config (the body lands in a later release)."""

from __future__ import annotations

from framework.cli.app import run_app
from framework.cli.pending import report_pending
from framework.config.schema import EvalConfig


def evaluate(cfg: EvalConfig) -> None:
    report_pending("eval", cfg, "evaluation of a policy")


def main() -> None:
    run_app("eval", evaluate)


if __name__ == "__main__":
    main()
