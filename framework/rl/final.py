"""The train job's last stage: the final comparison of its warm start and its trained policy.

Both are evaluated by the evaluation library (:func:`framework.eval.run.evaluate_policy`) on the
same validation questions with the same sampling; :func:`framework.eval.final.final_comparison`
computes the paired block the job prints and saves as ``final`` in ``summary.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from framework.eval.config import eval_config_for
from framework.eval.final import FinalBlock, final_comparison
from framework.eval.paired import load_sample_records
from framework.eval.records import RECORDS
from framework.eval.run import evaluate_policy
from framework.rl.config import TrainConfig
from framework.training.export import merged_policy


class FinalResult(FinalBlock):
    """What :func:`final_evaluation` returns (``summary.json``'s ``final``): the paired block and
    where its policy, evaluations, summary and TensorBoard logs are."""

    where: dict[str, str]


def final_evaluation(
    cfg: TrainConfig, run_dir: Path, trained: tuple[Any, Any] | None = None
) -> FinalResult:
    """Evaluate the warm start and the trained policy of a train run (``cfg``, its
    :class:`~framework.rl.config.TrainConfig`) on the same validation questions with the same
    sampling (``final_eval``), in ``<run_dir>/final_eval/{start,trained}``; returns the paired
    comparison (:func:`framework.eval.final.final_comparison`) with where things are. An
    evaluation finished by an earlier, interrupted attempt is read back, not redone.

    ``trained``: ``(model, tokenizer)`` of the trained policy in memory, evaluated as it trained
    (LoRA adapters merged), not as ``policy/`` holds it: rounded to ``export.dtype``, it would
    differ from the warm start by the rounding too wherever rollouts run in a wider dtype (fp32
    on a CPU without native bf16). None evaluates ``<run_dir>/policy``.
    """
    print("\nseekrl-train: final comparison: the warm start and the trained policy", flush=True)
    records = {}
    for label, checkpoint in (("start", None), ("trained", run_dir)):
        out = run_dir / "final_eval" / label
        if not (out / RECORDS).is_file():
            eval_cfg = eval_config_for(cfg, checkpoint, out, cfg.final_eval.settings())
            loaded = None
            if label == "trained" and trained is not None:
                model = merged_policy(trained[0]).to(eval_cfg.rollout.policy.device).eval()
                loaded = (
                    model,
                    trained[1],
                    f"{run_dir / 'policy'} (the weights it was saved from)",
                )
            evaluate_policy(eval_cfg, loaded)
        records[label] = load_sample_records(out)  # with response digests: same rollouts?
    block = final_comparison(records["start"], records["trained"], n_boot=cfg.final_eval.bootstrap)
    where = {
        "policy": str(run_dir / "policy"),
        "evaluations": str(run_dir / "final_eval"),
        "summary": str(run_dir / "summary.json"),
    }
    if "TensorBoard" in str((cfg.logger or {}).get("_target_", "")):
        where["TensorBoard"] = f"tensorboard --logdir {run_dir / 'tensorboard'}"
    return FinalResult(**block, where=where)
