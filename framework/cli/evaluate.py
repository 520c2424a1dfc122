"""``seekrl-eval``: evaluate a policy as a search agent, or compare evaluations.

seekrl-eval                                          # the base policy, 64 validation questions, k = 3
seekrl-eval checkpoint=runs/train/<run>              # a trained policy (its policy/ folder)
seekrl-eval checkpoint=runs/train/<run>/checkpoints/step-000004.ckpt
seekrl-eval files=[nq_test.jsonl] questions=0        # these datasets only, all their questions
seekrl-eval files=[search_r1/test.parquet] questions=0   # Search-R1's merged test file: per source
seekrl-eval compare=[runs/eval/a,runs/eval/b] labels=[grpo,e_grpo]
seekrl-eval compare=runs/multirun/<sweep>          # a sweep: its evaluations, or its sweep table

Writes ``report.md`` (with its PNG plots), ``results.json``, ``summary.csv``, ``by_hops.csv``,
``by_source.csv`` (one row per ``data_source`` and their macro average), ``samples.jsonl`` and
TensorBoard logs into the run directory (:func:`framework.eval.run.evaluate`).
"""

from __future__ import annotations

from framework.cli.app import run_app
from framework.eval.run import evaluate


def main() -> None:
    run_app("eval", evaluate)


if __name__ == "__main__":
    main()
