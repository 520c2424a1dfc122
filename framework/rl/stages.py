"""The train job's stages before the warm start: the retrieval index and the questions.

Light (no Lightning, no model): the dry run (:func:`framework.rl.plan.dry_run`) checks the data
with :func:`load_training_data` too.
"""

from __future__ import annotations

from framework.data.schema import QAItem, require_entities
from framework.registry import DATASETS, RETRIEVERS
from framework.rl.config import TrainConfig
from framework.types import ComponentConfig


def build_index(cfg: TrainConfig) -> None:
    """Build (or find cached) the retriever's index now, as a stage of its own; a remote
    retriever has nothing to build."""
    retriever = RETRIEVERS.bind(cfg.retriever)()
    retriever.close()


def load_training_data(cfg: TrainConfig) -> dict[str, list[QAItem]]:
    """The train and validation splits (synthesized first if needed), checked against the reward.

    Raises:
        DatasetError: a malformed or empty split, or one without entities for an entity reward.
    """
    load = DATASETS.bind(cfg.dataset)
    splits = {"train": load("train")}
    if getattr(cfg.dataset, "validation", "") is not None:  # user files may have no validation
        splits["validation"] = load("validation")
    if getattr(type(cfg.reward), "needs_entities", False):
        for split, items in splits.items():
            why = f"reward={cfg.reward.name} needs ground-truth entities"
            require_entities(items, _source(cfg.dataset, split), why=why)
    return splits


def _source(dataset: ComponentConfig, split: str) -> str:
    """The file a split was read from, for messages."""
    if hasattr(dataset, "directory"):  # synthesized data
        return str(dataset.directory() / f"{split}.jsonl")
    return str(getattr(dataset, split, None) or f"dataset={dataset.name} ({split})")
