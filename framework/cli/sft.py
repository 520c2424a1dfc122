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
from framework.sft.config import SFTConfig


def print_summary(summary: dict[str, Any], run_dir: Path) -> None:
    """What the SFT stage kept and trained, the before/after check, and where the results are."""
    e = summary["expert"]
    print(
        f"\nseekrl-sft: {e['kept']} of {e['requested']} expert trajectories kept "
        f"(dropped: {e['dropped'] or 'none'}); report {run_dir / 'expert' / 'report.md'}"
    )
    print(
        f"  trained {summary['optimizer_steps']} steps in {summary['train_seconds']} s; "
        f"final { ({k: round(v, 4) for k, v in summary['final'].items()}) }"
    )
    for when in ("before", "after"):
        m = summary[when]
        if m:
            print(
                f"  {when:<6} on {m['questions']} validation questions: format valid "
                f"{m['format_valid']:.2f}, accuracy {m['accuracy']:.2f}, tool calls {m['tool_calls']:.2f}"
            )
    print(f"  policy: {summary['policy']}  (seekrl-train warm_start.path={run_dir})")
    print(f"  TensorBoard: tensorboard --logdir {run_dir / 'tensorboard'}")


def sft(cfg: SFTConfig) -> dict[str, Any]:
    """Run the SFT stage and print its summary; returns the summary."""
    from framework.data.schema import DatasetError
    from framework.retrieval.types import RetrievalError
    from framework.rollout.policy import PolicyError
    from framework.sft.stage import run_sft

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
