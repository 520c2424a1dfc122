"""``seekrl-train``: group-relative RL of a search agent (E-GRPO by default), end to end.

seekrl-train                                   # demo-sized E-GRPO run on this machine's CPU
seekrl-train algorithm=grpo seed=1             # the GRPO arm of the paper
seekrl-train trainer=gpu scale=paper           # the paper's batch and step counts on one GPU
seekrl-train -m experiment=alpha_sweep         # alpha 0, 0.1, 0.3, 0.5, one job directory each
seekrl-train resume=runs/train/<run>           # continue from the newest checkpoint of a run

It builds or reuses the retrieval index, synthesizes or reuses the data, trains, validates, saves
checkpoints and the final policy, and writes TensorBoard logs under ``<run_dir>/tensorboard``.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from framework.cli.app import run_app
from framework.config.schema import TrainConfig

#: distributions whose versions are saved with every run
VERSIONED = (
    "seekrl",
    "torch",
    "lightning",
    "transformers",
    "hydra-core",
    "faiss-cpu",
    "sentence-transformers",
    "bm25s",
    "peft",
    "vllm",
)

#: exit status after SIGINT / SIGTERM once the checkpoint is saved (128 + SIGINT, as shells do)
INTERRUPTED = 130


def load_training_data(cfg: TrainConfig) -> dict[str, Any]:
    """The train and validation splits (synthesized first if needed), checked against the reward.

    Raises:
        DatasetError: a malformed or empty split, or one without entities for an entity reward.
    """
    from framework.data.schema import require_entities
    from framework.registry import DATASETS

    load = DATASETS.bind(cfg.dataset)
    splits = {"train": load("train")}
    if getattr(cfg.dataset, "validation", "") is not None:  # user files may have no validation
        splits["validation"] = load("validation")
    if getattr(type(cfg.reward), "needs_entities", False):
        for split, items in splits.items():
            why = f"reward={cfg.reward.name} needs ground-truth entities"
            require_entities(items, _source(cfg.dataset, split), why=why)
    return splits


def _source(dataset: Any, split: str) -> str:
    """The file a split was read from, for messages."""
    if hasattr(dataset, "directory"):  # synthesized data
        return str(dataset.directory() / f"{split}.jsonl")
    return str(getattr(dataset, split, None) or f"dataset={dataset.name} ({split})")


COMPONENT_SECTIONS = (
    "reward",
    "advantage",
    "loss",
    "kl",
    "sampler",
    "dataset",
    "rollout",
    "retriever",
)


def dry_run(cfg: TrainConfig) -> None:
    """Bind every configured component, say what the run would build (from the cache, building
    nothing: no index, no data, no model loaded), check the data when it exists, then stop."""
    from framework.cli import plan
    from framework.cli.components import describe, render
    from framework.data.schema import DatasetError
    from framework.registry import ALL
    from framework.retrieval.types import RetrievalError

    print(f"seekrl-train: configuration valid (algorithm={cfg.algorithm}, seed={cfg.seed})")
    for section in COMPONENT_SECTIONS:
        component = getattr(cfg, section)
        entry = ALL[section].get(component.name)
        ALL[section].bind(component)  # fails here, not mid-run, if a target cannot take its config
        values = {k: v for k, v in vars(component).items() if k != "name"}
        print(f"  {section:<10} {component.name:<22} [{entry.source}] {values}")
    try:
        stages = plan.train_plan(cfg)
    except RetrievalError as exc:  # a corpus source that is not there
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    print("\nbefore the first RL step (rough times from a 2-core Xeon, fp32):")
    print(plan.render(stages))
    print(f"  RL                 {plan.rl_estimate(cfg)}")
    if all(s.ready for s in stages if s.name == "questions"):
        try:  # the data exists: check its schema and the reward's needs now
            splits = load_training_data(cfg)
        except DatasetError as exc:
            print(exc, file=sys.stderr)
            raise SystemExit(2) from None
        sizes = ", ".join(f"{k} {len(v)}" for k, v in splits.items())
        print(f"  data               {sizes} questions, checked")
    print()
    print(render(describe()))
    print("\nseekrl-train: dry run; drop dry_run=true to train.")


def versions(trainer: Any = None) -> dict[str, str]:
    """Python, platform, CPU, the precision a run uses (and why) and the versions of the packages a
    run depends on."""
    from framework.training.precision import cpu_name

    out = {"python": platform.python_version(), "platform": platform.platform(), "cpu": cpu_name()}
    commit = git_commit()
    if commit:
        out["git_commit"] = commit
    if trainer is not None:
        choice = trainer.precision_choice()
        out |= {"precision": choice.precision, "precision_reason": choice.reason}
    for dist in VERSIONED:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_commit() -> str | None:
    """The checkout's commit (with ``-dirty`` when it has uncommitted changes), or None outside git."""
    import subprocess

    def git(*args: str) -> subprocess.CompletedProcess:
        here = Path(__file__).resolve().parent
        return subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=10)

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        if head.returncode != 0:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty else "")


def announce_precision(trainer: Any) -> None:
    """One start-up line: the precision this run trains (and rolls out) in, and why."""
    choice = trainer.precision_choice()
    print(f"seekrl: precision {choice.precision} ({choice.reason})", flush=True)


def save_run_info(cfg: TrainConfig, run_dir: Path) -> None:
    """The resolved config and the package versions, beside the logs."""
    from omegaconf import OmegaConf

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    (run_dir / "versions.json").write_text(json.dumps(versions(cfg.trainer), indent=2) + "\n")


#: figures on the plain progress lines of an RL run
RL_PROGRESS_KEYS = ("rollout/reward", "rollout/accuracy", "rollout/format_valid", "loss/entropy")


def log_progress(label: str, total: int, keys: tuple[str, ...], every_s: float = 0.0) -> list[Any]:
    """A plain-line progress callback when stdout is not a terminal (a log file or a pipe)."""
    from framework.lightning.callbacks import LogProgress

    return [] if sys.stdout.isatty() else [LogProgress(label, total, keys, every_s=every_s)]


def build_trainer(cfg: TrainConfig, run_dir: Path, checkpoint: Any) -> Any:
    """The Lightning trainer of a run (loggers, checkpoint callback, validation schedule)."""
    import lightning as L
    from hydra.utils import instantiate

    t = cfg.trainer
    logger = instantiate(cfg.logger) if cfg.logger is not None else False
    return L.Trainer(
        accelerator=t.accelerator,
        devices=t.devices,
        num_nodes=t.num_nodes,
        strategy=t.strategy,
        precision=t.precision_choice().precision,
        max_steps=t.max_steps * cfg.optim.policy_epochs,  # Lightning counts optimiser steps
        max_epochs=1,  # one pass over the step stream, whose length is max_steps
        logger=logger,
        callbacks=[checkpoint, *log_progress("rl", t.max_steps, RL_PROGRESS_KEYS)],
        log_every_n_steps=t.log_every_n_steps,
        val_check_interval=t.val_every_n_steps or 10**9,
        check_val_every_n_epoch=None,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        enable_checkpointing=False,  # StepCheckpoint owns checkpoints
        enable_model_summary=False,
        use_distributed_sampler=False,
        default_root_dir=str(run_dir),
    )


def warm_start_sft(cfg: TrainConfig) -> tuple[Any, Path]:
    """The SFT stage ``warm_start.sft=true`` runs, and the cache directory that holds (or will hold)
    its policy: ``$SEEKRL_CACHE/sft/<key>``, the key covering everything the stage depends on."""
    from dataclasses import asdict, replace

    from framework.config.schema import SFTConfig
    from framework.data.datasets import data_key
    from framework.retrieval.encoder import fingerprint_key
    from framework.retrieval.local import cache_root

    ws = cfg.warm_start
    sft_cfg = SFTConfig(
        seed=ws.expert.seed,
        run_dir="",
        dataset=cfg.dataset,
        retriever=cfg.retriever,
        rollout=cfg.rollout,
        agent=cfg.agent,
        expert=ws.expert,
        optim=ws.optim,
        trainer=replace(cfg.trainer, devices=1, strategy="auto", num_nodes=1),
        eval_questions=ws.eval_questions,
    )
    keyed = {k: v for k, v in asdict(sft_cfg).items() if k not in ("run_dir", "logger")}
    keyed["data"] = data_key(cfg.dataset)  # the questions themselves (synthesis code, files' bytes)
    keyed["trainer"] = {
        "accelerator": cfg.trainer.accelerator,
        "precision": cfg.trainer.precision_choice().precision,
    }
    return sft_cfg, cache_root(getattr(cfg.dataset, "cache_dir", None)) / "sft" / fingerprint_key(
        keyed
    )


def warm_start(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with the policy RL starts from: an SFT run's policy, or one made now (and cached).

    The SFT stage made by ``warm_start.sft=true`` is cached under ``$SEEKRL_CACHE/sft/<key>``, the key
    covering everything it depends on (data, retriever, policy, agent budgets, expert and optimiser
    settings, precision) but not the RL seed or algorithm: GRPO and E-GRPO arms and every seed of a
    sweep start from the same warm start, as in the paper.
    """
    from dataclasses import replace

    from framework.training.checkpoints import policy_folder

    ws = cfg.warm_start
    if ws.path is not None:
        folder = policy_folder(ws.path) or Path(ws.path).expanduser()
    elif ws.sft:
        sft_cfg, done = warm_start_sft(cfg)
        if not (done / "policy" / "config.json").is_file():
            import shutil

            from framework.cli.sft import run_sft

            # an interrupted earlier attempt left its SFT checkpoint here: run_sft resumes from it
            tmp = done.with_name(done.name + ".partial")
            logger = {
                "_target_": "lightning.pytorch.loggers.TensorBoardLogger",
                "save_dir": str(tmp),
                "name": "tensorboard",
                "version": "",
                "default_hp_metric": False,
            }
            print(f"seekrl-train: warm start: cold-start SFT first (cached in {done})")
            summary = run_sft(replace(sft_cfg, run_dir=str(tmp), logger=logger), quiet=True)
            if done.exists():
                shutil.rmtree(done)
            tmp.rename(done)
            e, before, after = summary["expert"], summary["before"], summary["after"]
            print(
                f"seekrl-train: warm start ready in {summary['seconds']} s: {e['kept']} of "
                f"{e['requested']} expert trajectories, {summary['optimizer_steps']} SFT steps, "
                f"final loss {summary['final'].get('sft/loss', float('nan')):.3f}"
            )
            if before and after:
                print(
                    f"  on {after['questions']} test questions: format valid "
                    f"{before['format_valid']:.2f} -> {after['format_valid']:.2f}, accuracy "
                    f"{before['accuracy']:.2f} -> {after['accuracy']:.2f} (details: {done}/summary.json)"
                )
        else:
            print(f"seekrl-train: warm start: reusing the SFT policy in {done}")
        folder = done / "policy"
    else:
        return cfg
    policy = replace(cfg.rollout.policy, source="path", path=str(folder))
    return replace(cfg, rollout=replace(cfg.rollout, policy=policy))


def quiet_lightning() -> None:
    """One copy of each Lightning log line (through Hydra's handlers), without notices that do
    not apply to this loop (it keeps the policy in eval mode on purpose, its step stream has a
    length, its batches are plain question indices)."""
    import logging
    import warnings

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        log = logging.getLogger(name)
        for handler in list(log.handlers):
            if isinstance(handler, logging.StreamHandler):
                log.removeHandler(handler)
        log.propagate = True
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(
        lambda record: "litlogger" not in record.getMessage()
    )
    for name in ("lightning.pytorch.trainer.connectors.checkpoint_connector", "faiss.loader"):
        logging.getLogger(name).setLevel(logging.WARNING)
    for pattern in (
        r".*module\(s\) in eval mode.*",
        r".*`IterableDataset` has `__len__` defined.*",
        r".*overridden `transfer_batch_to_device`.*",
        r".*LeafSpec.*",
        r".*litlogger.*",
        # the data module restores the sampler position itself (see framework/lightning/data.py)
        r".*resuming from a checkpoint that ended before the epoch ended.*",
    ):
        warnings.filterwarnings("ignore", message=pattern)


def train(cfg: TrainConfig) -> float | None:
    """Train; returns ``cfg.optimized_metric`` (for Hydra sweepers), or None when not measured."""
    import lightning as L

    from framework.data.schema import DatasetError
    from framework.lightning.callbacks import StepCheckpoint
    from framework.lightning.data import QuestionDataModule
    from framework.lightning.module import CheckpointMismatch, SearchAgentRL
    from framework.registry import SAMPLERS
    from framework.retrieval.types import RetrievalError
    from framework.rollout.policy import PolicyError
    from framework.training.checkpoints import latest_checkpoint
    from framework.training.lora import export_policy

    if cfg.dry_run:
        dry_run(cfg)
        return None
    clock = time.perf_counter()
    quiet_lightning()
    run_dir = Path(cfg.run_dir)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    announce_precision(cfg.trainer)
    cfg = warm_start(cfg)
    try:
        splits = load_training_data(cfg)
        train_items, val_items = splits["train"], splits.get("validation", [])
        sampler = SAMPLERS.bind(cfg.sampler)(len(train_items), cfg.seed)
        module = SearchAgentRL(cfg, train_items, val_items)
    except (DatasetError, PolicyError, ValueError) as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    data = QuestionDataModule(
        train_items,
        val_items,
        sampler,
        max_steps=cfg.trainer.max_steps,
        val_questions=cfg.trainer.val_questions,
        seed=cfg.seed,
    )
    checkpoints = StepCheckpoint(
        run_dir / "checkpoints",
        cfg.trainer.checkpoint_every_n_steps,
        cfg.trainer.keep_checkpoints,
        cfg.trainer.max_steps,
    )
    trainer = build_trainer(cfg, run_dir, checkpoints)
    if trainer.is_global_zero:
        save_run_info(cfg, run_dir)
    ckpt = str(latest_checkpoint(cfg.resume)) if cfg.resume else None
    try:
        trainer.fit(module, datamodule=data, ckpt_path=ckpt, weights_only=True)
        t = cfg.trainer
        just_validated = t.val_every_n_steps and module.rl_step % t.val_every_n_steps == 0
        validate = t.val_at_end and data.val_rows and not checkpoints.interrupted
        validate = validate and not just_validated
        if validate:
            trainer.validate(module, datamodule=data, verbose=False)
    except (CheckpointMismatch, RetrievalError, PolicyError) as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        module.close()
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    if trainer.is_global_zero:
        if cfg.trainer.export_policy and not checkpoints.interrupted:
            export_policy(module.policy, module.tokenizer, run_dir / "policy")
        summary = {
            "algorithm": cfg.algorithm,
            "seed": cfg.seed,
            "steps": module.rl_step,
            "seconds": round(time.perf_counter() - clock, 1),
            "interrupted": checkpoints.interrupted,
            "last_checkpoint": str(run_dir / "checkpoints"),
            "last_step": {f"rollout/{k}": v for k, v in module.last_rollout.items()},
            "metrics": metrics,
        }
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        report(cfg, run_dir, module, metrics, checkpoints)
    if checkpoints.interrupted:
        raise SystemExit(INTERRUPTED)
    value = metrics.get(cfg.optimized_metric)
    if value is None and trainer.is_global_zero:
        print(
            f"seekrl-train: optimized_metric {cfg.optimized_metric!r} was not measured "
            f"(measured: {sorted(metrics)}); returning None to the sweeper.",
            file=sys.stderr,
        )
    return value


def report(
    cfg: TrainConfig, run_dir: Path, module: Any, metrics: dict[str, float], ckpt: Any
) -> None:
    """Where everything is, and the headline figures."""
    last = module.last_rollout
    print(f"\nseekrl-train: {cfg.algorithm} finished {module.rl_step} steps in {run_dir}")
    if last:
        print(
            f"  last step: reward {last['reward']:.3f}, accuracy {last['accuracy']:.3f}, "
            f"format valid {last['format_valid']:.3f}, tool calls {last['tool_calls']:.2f}"
        )
    val = {k: v for k, v in metrics.items() if k.startswith("val/")}
    if val:
        keys = ("val/accuracy", "val/reward", "val/format_valid")
        print("  validation: " + ", ".join(f"{k} {val[k]:.3f}" for k in keys if k in val))
    if ckpt.interrupted:
        print(f"  interrupted: resume with  seekrl-train resume={run_dir}")
    print(f"  checkpoints: {run_dir / 'checkpoints'}")
    if cfg.trainer.export_policy and not ckpt.interrupted:
        print(
            f"  policy:      {run_dir / 'policy'}  (rollout.policy.source=path "
            f"rollout.policy.path={run_dir / 'policy'})"
        )
    if cfg.logging.dump_trajectories:
        print(f"  rollouts:    {run_dir / 'trajectories'}")
    logger = cfg.logger or {}
    if "TensorBoard" in str(logger.get("_target_", "")):
        print(f"  TensorBoard: tensorboard --logdir {run_dir / 'tensorboard'}")


def main() -> None:
    import importlib.util

    import __main__

    # Lightning's DDP launcher re-runs `python -m <__main__.__spec__.name> <argv>` for each
    # extra process; point it at this module whichever way the app was started.
    __main__.__spec__ = importlib.util.find_spec("framework.cli.train")
    run_app("train", train)


if __name__ == "__main__":
    main()
