"""seekrl's questions as Search-R1's training files: its instruction prompt in ``prompt``.

Search-R1 (Jin et al., arXiv 2503.09516, github.com/PeterGriffinJin/Search-R1, Apache-2.0) trains
on parquet files that its ``scripts/data_process/*.py`` write: the FlashRAG columns (``id``,
``question``, ``golden_answers``) plus ``data_source``, ``prompt`` (one user message: its instruction
followed by the question), ``ability``, ``reward_model`` (``{"style": "rule", "ground_truth":
{"target": answers}}``) and ``extra_info`` (``split``, ``index``). :func:`export_search_r1` writes
``seekrl-synth``'s splits that way, so Search-R1 (or verl, SkyRL, ... reading its layout) trains on
them as they are, and seekrl's own loader reads them back: it takes the ``question`` column, never
the prompt, and finds the entity annotations (``entities``, ``hops``, ``chain``, ``clues``,
``mentions``, ``template``, ``answerable``) in ``extra_info``.

The only difference from seekrl's own parquet files (:func:`framework.data.schema.write_split`) is
the prompt, which there holds the plain question. The instruction is the ``search_r1`` protocol's
(:func:`framework.rollout.search_r1.prompt_text`, reproduced from Search-R1's ``make_prefix``), so a
seekrl run with ``agent.protocol=search_r1`` on an exported file sees the prompt the file holds.
Search-R1's scripts also append ``?`` to a question without one; the export leaves the question as
written (seekrl-synth's imperative "Name the ... refers to." would read ``to.?``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from framework.data.datasets import SynthDatasetConfig, synth_ready, synthesize
from framework.data.schema import DatasetError, QAItem, read_dataset, write_parquet_rows
from framework.data.synthesis import SPLITS
from framework.rollout.search_r1 import prompt_text


def write_search_r1_split(items: Sequence[QAItem], path: str | os.PathLike, split: str) -> Path:
    """Write ``items`` as one Search-R1 parquet file: seekrl's row (:meth:`QAItem.to_row`) with
    Search-R1's instruction prompt.

    Raises:
        DatasetError: no items, or ``extra`` values parquet cannot hold.
    """
    if not items:
        raise DatasetError(
            f"[export] {path}: got 0 {split} questions; expected at least one. "
            "Fix: synthesize a non-empty split (dataset.<split>_size > 0)."
        )
    rows = []
    for index, item in enumerate(items):
        row = item.to_row(split, index)
        row["prompt"] = [{"role": "user", "content": prompt_text(item.question)}]
        rows.append(row)
    return write_parquet_rows(rows, path)


def export_splits(
    splits: Mapping[str, Sequence[QAItem]], directory: str | os.PathLike
) -> dict[str, Path]:
    """Write ``<directory>/<split>.parquet`` in Search-R1's layout for every split given."""
    folder = Path(directory).expanduser()
    return {
        split: write_search_r1_split(items, folder / f"{split}.parquet", split)
        for split, items in splits.items()
    }


def export_search_r1(
    cfg: SynthDatasetConfig, directory: str | os.PathLike, *, log: Callable[[str], object] = print
) -> Path:
    """Export the synthesized train / validation / test splits of ``cfg`` in Search-R1's layout.

    The splits for these settings are synthesized first unless they already are (then they are
    exported as they are, so the files hold the questions a seekrl run on ``cfg`` trains on).

    Returns:
        ``directory``, holding ``train.parquet``, ``validation.parquet`` and ``test.parquet``.

    Raises:
        SynthesisError: as :func:`~framework.data.datasets.synthesize`.
        DatasetError: an empty split.
    """
    if not synth_ready(cfg):
        synthesize(cfg, log=log)
    source = cfg.directory()
    splits = {split: read_dataset(source / f"{split}.jsonl") for split in SPLITS}
    paths = export_splits(splits, directory)
    folder = Path(directory).expanduser()
    sizes = ", ".join(f"{split} {len(items)}" for split, items in splits.items())
    log(
        f"exported {sizes} questions from {source} to {folder} in Search-R1's layout "
        f"({', '.join(p.name for p in paths.values())})"
    )
    return folder


__all__ = [
    "export_search_r1",
    "export_splits",
    "write_search_r1_split",
]
