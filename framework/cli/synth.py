"""``seekrl-synth``: synthesize the entity-annotated train / validation / test splits.

seekrl-synth                                         # defaults: 3000 / 300 / 500 questions
seekrl-synth dataset.train_size=500 dataset.hop_weights=[0.5,0.5]
seekrl-synth dataset.answerability.enabled=false     # skip the retrieval check (no index needed)
seekrl-synth export_search_r1=data/search_r1         # also as Search-R1's parquet files (cache reused)
"""

from __future__ import annotations

import sys
from pathlib import Path

from framework.cli.app import run_app
from framework.data.datasets import SynthConfig, synthesize
from framework.data.leakage import LeakError
from framework.data.schema import DatasetError
from framework.data.search_r1 import export_search_r1
from framework.data.synthesis import SynthesisError
from framework.interrupt import stop_on_interrupt
from framework.lightning.trainer import INTERRUPTED
from framework.retrieval.types import RetrievalError

INTERRUPTED_MESSAGE = (
    "[synth] interrupted; no manifest.json was written, so nothing half-done is taken as "
    "finished: the same command synthesizes again (an index it built is kept)."
)


def synth(cfg: SynthConfig) -> Path:
    """Run the synthesis (rebuilding even when output for these settings exists), or, with
    ``export_search_r1``, export the splits for these settings in Search-R1's layout (synthesized
    first unless cached)."""
    try:
        with stop_on_interrupt(INTERRUPTED_MESSAGE, INTERRUPTED):
            if cfg.export_search_r1 is not None:
                return export_search_r1(cfg.dataset, cfg.export_search_r1)
            return synthesize(cfg.dataset)
    except (SynthesisError, LeakError, RetrievalError, DatasetError) as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(1) from None


def main() -> None:
    run_app("synth", synth)


if __name__ == "__main__":
    main()
