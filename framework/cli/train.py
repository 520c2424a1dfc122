"""``seekrl-train``: compose and validate the training config, then train.

The training loop arrives with the Lightning training issue; until then the app validates the
config, binds every selected component through its registry and prints what it would run.
"""

from __future__ import annotations

import sys
from typing import Any

from framework.cli.app import run_app
from framework.config.schema import TrainConfig

COMPONENT_SECTIONS = (
    "reward",
    "advantage",
    "loss",
    "kl",
    "sampler",
    "dataset",
    "rollout",
    "retriever",
)


def load_training_data(cfg: TrainConfig) -> dict[str, Any]:
    """The train and validation splits (synthesized first if needed), checked against the reward.

    Raises:
        DatasetError: a malformed or empty split, or one without entities for an entity reward.
    """
    from framework.data.schema import require_entities
    from framework.registry import DATASETS

    load = DATASETS.bind(cfg.dataset)
    splits = {"train": load("train")}
    if (
        getattr(cfg.dataset, "validation", "") is not None
    ):  # user files may have no validation split
        splits["validation"] = load("validation")
    if getattr(type(cfg.reward), "needs_entities", False):
        for split, items in splits.items():
            why = f"reward={cfg.reward.name} needs ground-truth entities"
            require_entities(items, _source(cfg.dataset, split), why=why)
    return splits


def _source(dataset: Any, split: str) -> str:
    """The file a split was read from, for messages."""
    if hasattr(dataset, "directory"):  # synthesized data
        return str(dataset.directory() / f"{split}.jsonl")
    return str(getattr(dataset, split, None) or f"dataset={dataset.name} ({split})")


def train(cfg: TrainConfig) -> Any:
    """Bind the configured components, load the data and report (training is not wired yet)."""
    from framework.cli.components import describe, render
    from framework.data.schema import DatasetError
    from framework.registry import ALL

    print(f"seekrl-train: configuration valid (algorithm={cfg.algorithm}, seed={cfg.seed})")
    for section in COMPONENT_SECTIONS:
        component = getattr(cfg, section)
        entry = ALL[section].get(component.name)
        ALL[section].bind(component)  # fails here, not mid-run, if a target cannot take its config
        values = {k: v for k, v in vars(component).items() if k != "name"}
        print(f"  {section:<10} {component.name:<22} [{entry.source}] {values}")
    try:
        splits = load_training_data(cfg)
    except DatasetError as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    sizes = ", ".join(f"{k} {len(v)}" for k, v in splits.items())
    print(f"  data       {sizes} questions")
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
