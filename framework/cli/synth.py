"""``seekrl-synth``: synthesize the entity-annotated train / validation / test splits.

seekrl-synth                                         # defaults: 3000 / 300 / 500 questions
seekrl-synth dataset.train_size=500 dataset.hop_weights=[0.5,0.5]
seekrl-synth dataset.answerability.enabled=false     # skip the retrieval check (no index needed)
"""

from __future__ import annotations

import sys
from pathlib import Path

from framework.cli.app import run_app
from framework.data.datasets import SynthConfig, synthesize
from framework.data.leakage import LeakError
from framework.data.synthesis import SynthesisError
from framework.interrupt import stop_on_interrupt
from framework.lightning.trainer import INTERRUPTED
from framework.retrieval.types import RetrievalError

INTERRUPTED_MESSAGE = (
    "[synth] interrupted; no manifest.json was written, so nothing half-done is taken as "
    "finished: the same command synthesizes again (an index it built is kept)."
)


def synth(cfg: SynthConfig) -> Path:
    """Run the synthesis (rebuilding even when output for these settings exists)."""
    try:
        with stop_on_interrupt(INTERRUPTED_MESSAGE, INTERRUPTED):
            return synthesize(cfg.dataset)
    except (SynthesisError, LeakError, RetrievalError) as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(1) from None


def main() -> None:
    run_app("synth", synth)


if __name__ == "__main__":
    main()
