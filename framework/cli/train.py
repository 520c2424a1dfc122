"""``seekrl-train``: group-relative RL of a search agent (E-GRPO by default), end to end.

seekrl-train                                   # demo-sized E-GRPO run on this machine's CPU
seekrl-train algorithm=grpo seed=1             # the GRPO arm of the paper
seekrl-train trainer=gpu scale=paper           # the paper's batch and step counts on one GPU
seekrl-train -m experiment=alpha_sweep         # alpha 0, 0.1, 0.3, 0.5, one job directory each
seekrl-train resume=runs/train/<run>           # continue from the newest checkpoint of a run

It builds or reuses the retrieval index, synthesizes or reuses the data, trains, validates, saves
checkpoints and the final policy, and writes TensorBoard logs under ``<run_dir>/tensorboard``: the
job is :func:`framework.rl.recipe.run`, top to bottom.
"""

from __future__ import annotations

from framework.cli.app import run_app
from framework.interrupt import stop_with_parent
from framework.rl.config import TrainConfig
from framework.rl.plan import dry_run


def train(cfg: TrainConfig) -> float | None:
    """Train; returns ``cfg.optimized_metric`` (for Hydra sweepers), or None when not measured."""
    if cfg.dry_run:  # a dry run builds and trains nothing: it does not import Lightning either
        dry_run(cfg)
        return None
    from framework.rl.recipe import run  # Lightning and torch: seconds, only for a real run

    return run(cfg)


def main() -> None:
    import importlib.util

    import __main__

    stop_with_parent()  # started by a study: stop (checkpointed) when it ends, however it ends

    # Lightning's DDP launcher re-runs `python -m <__main__.__spec__.name> <argv>` for each
    # extra process; point it at this module whichever way the app was started.
    __main__.__spec__ = importlib.util.find_spec("framework.cli.train")
    run_app("train", train)


if __name__ == "__main__":
    main()
