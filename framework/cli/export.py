"""``seekrl-export``: a train run's step checkpoint as a Hugging Face folder.

seekrl-export checkpoint=runs/train/<run>                      # its newest checkpoint, in bf16
seekrl-export checkpoint=runs/train/<run>/checkpoints/step-000004.ckpt out=/models/agent
seekrl-export checkpoint=runs/train/<run> export.dtype=float32  # the training precision

Writes ``<run>/export/step-NNNNNN`` by default (``out=`` elsewhere): the run's model with the
checkpoint's weights (LoRA adapters merged) in ``export.dtype``, its tokenizer and
``seekrl_export.json`` (the step and the checkpoint). It loads with
``AutoModelForCausalLM.from_pretrained``, vLLM, and ``rollout.policy.source=path
rollout.policy.path=<folder>`` (:func:`framework.training.export.export_checkpoint`).
"""

from __future__ import annotations

import sys

from framework.cli.app import run_app
from framework.rollout.policy import PolicyError
from framework.training.export import ExportAppConfig, ExportError, ExportRecord, export_checkpoint


def export(cfg: ExportAppConfig) -> ExportRecord:
    """Export the checkpoint and say where it went; returns what was written."""
    try:
        record = export_checkpoint(cfg)
    except (ExportError, PolicyError) as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    print(
        f"seekrl-export: the policy of step {record['step']} ({record['dtype']}) from "
        f"{record['source']} is in {record['path']}\n"
        f"  use it with rollout.policy.source=path rollout.policy.path={record['path']}"
    )
    return record


def main() -> None:
    run_app("export", export)


if __name__ == "__main__":
    main()
