"""The warm start of RL: the policy a train run starts from, made by the SFT stage when asked.

``warm_start.sft=true`` runs the SFT stage (:func:`framework.sft.stage.run_sft`) before RL, once:
its policy is cached under ``$SEEKRL_CACHE/sft/<key>``, the key covering everything the stage
depends on (data, retriever, policy, agent budgets, expert and optimiser settings, precision) but not
the RL seed or algorithm, so the GRPO and E-GRPO arms and every seed of a sweep start from the same
warm start, as in the paper.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from framework.data.datasets import data_key
from framework.paths import cache_root
from framework.retrieval.encoder import fingerprint_key, resolved_dtype, resolved_prefixes
from framework.sft.config import SFTConfig
from framework.sft.stage import run_sft
from framework.training.checkpoints import policy_folder


def warm_start_sft(cfg: Any) -> tuple[SFTConfig, Path]:
    """The SFT stage ``warm_start.sft=true`` runs, and the cache directory that holds (or will hold)
    its policy: ``$SEEKRL_CACHE/sft/<key>``, the key covering everything the stage depends on.

    Args:
        cfg: the train app's config (:class:`framework.rl.config.TrainConfig`).
    """
    from dataclasses import asdict, replace

    ws = cfg.warm_start
    # the sections the SFT stage takes from the train config as they are
    shared = {name: getattr(cfg, name) for name in ("dataset", "retriever", "rollout", "agent")}
    sft_cfg = SFTConfig(
        **shared,
        seed=ws.expert.seed,
        run_dir="",
        expert=ws.expert,
        optim=ws.optim,
        trainer=replace(cfg.trainer, devices=1, strategy="auto", num_nodes=1),
        eval_questions=ws.eval_questions,
    )
    keyed = {k: v for k, v in asdict(sft_cfg).items() if k not in ("run_dir", "logger")}
    # settings that change memory or the before/after check's rollouts, not the trained weights
    keyed["optim"].pop("micro_batch_tokens", None)
    if not keyed["expert"].get("within_budget"):  # keys made before the option: as they were
        keyed["expert"].pop("within_budget", None)
    keyed["rollout"].pop("compute_dtype", None)
    encoder = getattr(cfg.retriever, "encoder", None)
    if encoder is not None and "encoder" in keyed["retriever"]:  # the dtype run, not "auto"
        keyed["retriever"]["encoder"]["dtype"] = resolved_dtype(encoder)
        # how the embeddings are computed (shards, workers), not what they are; a prefix family
        # is in the key through the prefixes it resolves to
        for name in ("shard_rows", "devices", "family"):
            keyed["retriever"]["encoder"].pop(name, None)
        if keyed["retriever"]["encoder"].get("store_dtype") == "float32":  # keys made before it
            keyed["retriever"]["encoder"].pop("store_dtype")
        prefixes = resolved_prefixes(encoder)
        keyed["retriever"]["encoder"]["query_prefix"] = prefixes[0]
        keyed["retriever"]["encoder"]["passage_prefix"] = prefixes[1]
    keyed["data"] = data_key(cfg.dataset)  # the questions themselves (synthesis code, files' bytes)
    keyed["trainer"] = {
        "accelerator": cfg.trainer.accelerator,
        "precision": cfg.trainer.precision_choice().precision,
    }
    return sft_cfg, cache_root(getattr(cfg.dataset, "cache_dir", None)) / "sft" / fingerprint_key(
        keyed
    )


def warm_start(cfg: Any) -> Any:
    """``cfg`` with the policy RL starts from: an SFT run's policy, or one made now (and cached).

    Args:
        cfg: the train app's config (:class:`framework.rl.config.TrainConfig`).

    Returns:
        ``cfg`` itself when it names no warm start, else a copy whose ``rollout.policy`` reads the
        warm start's policy folder.
    """
    from dataclasses import replace

    ws = cfg.warm_start
    if ws.path is not None:
        folder = policy_folder(ws.path) or Path(ws.path).expanduser()
    elif ws.sft:
        sft_cfg, done = warm_start_sft(cfg)
        if not (done / "policy" / "config.json").is_file():
            import shutil

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
                    f"  on {after['questions']} validation questions: format valid "
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
