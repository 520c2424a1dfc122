"""``seekrl-sft``: cold-start SFT on expert search trajectories synthesized from the question chains.

seekrl-sft                                   # 600 expert trajectories, 2 epochs, SmolLM2-135M
seekrl-sft expert.questions=200 optim.epochs=3 lora.enabled=true
seekrl-train warm_start.path=runs/sft/<run>   # RL from the result (or warm_start.sft=true: both)

Writes ``expert/`` (trajectories and the report of what was kept and dropped), ``policy/`` (the
fine-tuned policy, a Hugging Face checkpoint the train app starts from), TensorBoard logs and
``summary.json`` with the format-valid rate and accuracy before and after on held-out questions.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from framework.cli.app import run_app
from framework.data.schema import DatasetError
from framework.retrieval.types import RetrievalError
from framework.rollout.policy import PolicyError
from framework.sft.config import SFTConfig
from framework.sft.stage import print_summary, run_sft


def sft(cfg: SFTConfig) -> dict[str, Any]:
    """Run the SFT stage and print its summary; returns the summary."""
    try:
        summary = run_sft(cfg)
    except (DatasetError, RetrievalError, PolicyError) as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    print_summary(summary, Path(cfg.run_dir))
    return summary


def main() -> None:
    run_app("sft", sft)


if __name__ == "__main__":
    main()
