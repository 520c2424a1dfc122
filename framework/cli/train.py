"""``seekrl-train``: compose and validate the training config, then train.

The training loop arrives with the Lightning training issue; until then the app validates the
config, binds every selected component through its registry and prints what it would run.
"""

from __future__ import annotations

from typing import Any

from framework.cli.app import run_app
from framework.config.schema import TrainConfig

COMPONENT_SECTIONS = ("reward", "advantage", "loss", "kl", "sampler")


def train(cfg: TrainConfig) -> Any:
    """Bind the configured components and report them (training itself is not wired yet)."""
    from framework.cli.components import describe, render
    from framework.registry import ALL

    print(f"seekrl-train: configuration valid (algorithm={cfg.algorithm}, seed={cfg.seed})")
    for section in COMPONENT_SECTIONS:
        component = getattr(cfg, section)
        entry = ALL[section].get(component.name)
        ALL[section].bind(component)  # fails here, not mid-run, if a target cannot take its config
        values = {k: v for k, v in vars(component).items() if k != "name"}
        print(f"  {section:<10} {component.name:<22} [{entry.source}] {values}")
    print()
    print(render(describe()))
    print(
        "\nseekrl-train: the training loop is not part of this version yet; "
        "this run validated the config and the components only."
    )
    return None


def main() -> None:
    run_app("train", train)


if __name__ == "__main__":
    main()
