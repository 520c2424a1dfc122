"""The cold-start SFT stage as a library function: expert trajectories, supervised training, and the
format-valid rate and accuracy before and after on held-out questions.

``seekrl-sft`` (:mod:`framework.cli.sft`) runs it on its own; ``seekrl-train warm_start.sft=true``
runs it before RL through :mod:`framework.sft.warm_start`.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from framework.data.datasets import split_source
from framework.data.leakage import HELD_OUT, refuse_leaks, trained_text_overlaps
from framework.data.schema import DatasetError
from framework.lightning.run_info import save_run_info
from framework.lightning.trainer import (
    INTERRUPTED,
    announce_precision,
    apply_gradient_checkpointing,
    apply_threads,
    build_trainer,
    log_progress,
    quiet_lightning,
)
from framework.progress import Progress
from framework.registry import DATASETS, RETRIEVERS
from framework.rewards.outcome import OutcomeRewardConfig
from framework.rollout.backend import build_backend
from framework.rollout.engine import AgentLoop
from framework.rollout.metrics import rollout_metrics
from framework.rollout.policy import load_policy
from framework.rollout.scoring import score
from framework.sft.config import SFTConfig
from framework.sft.expert import expert_trajectories
from framework.sft.questions import expert_questions, require_expert_questions
from framework.training.checkpoints import checkpoint_step, newest_checkpoint
from framework.training.export import export_policy
from framework.training.lora import apply_lora

#: how to do without ``seekrl-sft`` when the data has no walks for its expert
SFT_OFF = (
    "train on seekrl-synth's questions (dataset=synth), or start RL from the policy as it is "
    "(seekrl-train warm_start.sft=false)"
)


def agent_check(
    backend: Any, retriever: Any, agent: Any, items: list, reward: Any = None, label: str = "check"
) -> dict:
    """Roll ``items`` out once each and summarise format validity, accuracy and tool use."""
    if not items:
        return {}
    loop = AgentLoop(backend, retriever, agent)
    with Progress(f"sft {label}", unit="rollout") as bar:
        trajs = loop.run(
            [it.question for it in items], 1, progress=bar, prompts=[it.messages() for it in items]
        )
    scores = score(trajs, items, reward or OutcomeRewardConfig(name="outcome"))
    m = rollout_metrics(trajs, items, scores)
    keys = ("format_valid", "accuracy", "tool_calls", "turns", "over_budget", "response_length")
    out = {k: round(float(m[k]), 4) for k in keys}
    out["questions"] = len(items)
    out["seconds"] = round(loop.timings.get("total", 0.0), 1)
    return out


def write_expert(folder: Path, kept: list, report: Any, tokenizer: Any) -> None:
    """The kept expert trajectories (JSONL) and the report of what was kept and dropped."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "trajectories.jsonl").open("w") as fh:
        for item, t in kept:
            row = {
                "question_id": item.id,
                "question": item.question,
                "answer": t.answer,
                "hops": item.hops,
                "text": tokenizer.decode(t.token_ids[t.prompt_len :], skip_special_tokens=False),
                "token_ids": t.token_ids,
                "loss_mask": t.loss_mask,
                "prompt_len": t.prompt_len,
            }
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    data = report.as_dict()
    (folder / "report.json").write_text(json.dumps(data, indent=2) + "\n")
    lines = [
        "# Expert trajectories",
        "",
        f"- questions handed to the expert: {data['requested']}",
        f"- kept: {data['kept']} (mean {data['mean_tokens']} tokens)",
        f"- kept by hops: {data['kept_by_hops']}",
        f"- with a visit: {data['trajectories_with_visit']}; with an extra, unhelpful search: "
        f"{data['trajectories_with_extra_search']}",
        "- dropped:" + ("" if data["dropped"] else " none"),
    ]
    lines += [f"  - {why}: {n}" for why, n in sorted(data["dropped"].items())]
    (folder / "report.md").write_text("\n".join(lines) + "\n")


def check_expert_leaks(kept: list, load: Any, tokenizer: Any, folder: Path) -> dict[str, int]:
    """Refuse expert trajectories whose trained (model-written) tokens name a held-out answer.

    The expert writes the names and clues of its train chain; synthesis keeps those off held-out
    answers, and this checks what is actually trained on (tool observations are masked out of the
    loss and not checked). The counts go to ``<folder>/leakage.json``.

    Raises:
        LeakError: a validation, validation2 or test answer is named (a :class:`DatasetError`).
    """
    held = {}
    for split in HELD_OUT:
        try:
            held[split] = load(split)
        except DatasetError:  # a split the data lack (files, validation2 off): none to check
            continue
    texts = [
        tokenizer.decode([t for t, m in zip(traj.token_ids, traj.loss_mask, strict=True) if m])
        for _, traj in kept
    ]
    counts = trained_text_overlaps(texts, held)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "leakage.json").write_text(json.dumps(counts, indent=2) + "\n")
    refuse_leaks(counts, "sft.expert")
    return counts


def run_sft(cfg: SFTConfig, *, quiet: bool = False) -> dict[str, Any]:
    """The whole SFT stage; returns the summary (also written to ``<run_dir>/summary.json``).

    Expert trajectories, the before check, supervised training (resuming from the run's own
    checkpoint when an earlier attempt was interrupted), the after check, the exported policy.

    Args:
        cfg: the validated SFT config.
        quiet: leave out the precision line (the train app's warm start has printed it).

    Raises:
        DatasetError: the expert can follow fewer than one SFT batch of its questions
            (:func:`~framework.sft.questions.require_expert_questions`), found before anything loads.
        SystemExit: status 2 with a message when no expert trajectory could be made; status
            ``INTERRUPTED`` after SIGINT / SIGTERM, once the step checkpoint is saved.
    """
    import lightning as L

    # Lightning at import time: seconds, paid only by a run that trains
    from framework.lightning.callbacks import StepCheckpoint
    from framework.sft.module import SFTData, SFTModule, padding_report

    clock = time.perf_counter()
    quiet_lightning()
    apply_threads(cfg.trainer)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    run_dir = Path(cfg.run_dir)
    if not quiet:  # inside seekrl-train the train app has said it
        announce_precision(cfg.trainer)
    save_run_info(cfg, run_dir)
    load = DATASETS.bind(cfg.dataset)
    train_items = load("train")
    # before the retriever and the policy load: data the expert cannot follow is refused in seconds
    require_expert_questions(
        train_items,
        cfg.expert,
        cfg.optim.batch_size,
        seed=cfg.seed,
        source=split_source(cfg.dataset, "train"),
        where="sft",
        keys="",
        off=SFT_OFF,
    )
    chosen = expert_questions(train_items, cfg.expert, cfg.seed)
    retriever = RETRIEVERS.bind(cfg.retriever)()
    policy, tok = load_policy(cfg.rollout.policy)
    try:
        mark = time.perf_counter()
        with Progress("expert", len(chosen), "question") as bar:
            kept, report = expert_trajectories(
                chosen, retriever, tok, cfg.agent, cfg.expert, progress=bar
            )
        expert_seconds = time.perf_counter() - mark
        write_expert(run_dir / "expert", kept, report, tok)
        check_expert_leaks(kept, load, tok, run_dir / "expert")
        if not kept:
            print(
                f"[expert] no trajectory passed the evidence check ({dict(report.dropped)}). "
                f"Fix: see {run_dir / 'expert' / 'report.md'}; raise agent budgets or check the "
                "retriever and dataset.",
                file=sys.stderr,
            )
            raise SystemExit(2)
        trajs = [t for _, t in kept]
        random.Random(cfg.seed).shuffle(trajs)
        n_val = int(len(trajs) * cfg.val_fraction)
        train, val = trajs[n_val:], trajs[:n_val]
        test_items = _eval_items(cfg, load)
        backend = build_backend(cfg.rollout, policy, tok)
        before = agent_check(backend, retriever, cfg.agent, test_items, label="check before")
        if cfg.lora.enabled:
            policy = apply_lora(policy, cfg.lora)
            backend = build_backend(cfg.rollout, policy, tok)
        apply_gradient_checkpointing(policy, cfg.trainer)
        steps = math.ceil(len(train) / cfg.optim.batch_size) * cfg.optim.epochs
        module = SFTModule(policy, tok.pad_token_id, cfg.optim, steps)
        resume = newest_checkpoint(run_dir / "checkpoints")
        start = checkpoint_step(resume) if resume is not None else 0
        if resume is not None:
            print(f"[sft] resuming after step {start}/{steps} from {resume}", flush=True)
        data = SFTData(
            train, val, cfg.optim.batch_size, cfg.seed, epochs=cfg.optim.epochs, start=start
        )
        t = cfg.trainer
        checkpoints = StepCheckpoint(
            run_dir / "checkpoints",
            t.checkpoint_every_n_steps,
            keep=1,
            max_steps=steps,
            final=False,
        )
        trainer = build_trainer(
            t,
            cfg.logger,
            run_dir,
            max_steps=steps,
            callbacks=[checkpoints, *log_progress("sft", steps, ("sft/loss",), every_s=20.0)],
            val_check_interval=data.steps_per_epoch,  # validate after each epoch
            limit_val_batches=1.0 if val else 0,
            gradient_clip_val=cfg.optim.grad_clip or None,
        )
        mark = time.perf_counter()
        trainer.fit(
            module,
            datamodule=data,
            ckpt_path=None if resume is None else str(resume),
            weights_only=True,
        )
        train_seconds = time.perf_counter() - mark
        if checkpoints.interrupted:
            print(
                f"[sft] interrupted after step {checkpoints.saved_step}/{steps}; the same command "
                "resumes from there.",
                file=sys.stderr,
                flush=True,
            )
            raise SystemExit(INTERRUPTED)
        policy.eval()
        backend.update_weights(policy)  # its rollout copy (another dtype) still holds the start
        after = agent_check(backend, retriever, cfg.agent, test_items, label="check after")
    finally:
        retriever.close()
    export_policy(policy, tok, run_dir / "policy")
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # the policy is exported: not needed
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    summary = {
        "expert": report.as_dict(),
        "expert_seconds": round(expert_seconds, 1),
        "train_trajectories": len(train),
        "val_trajectories": len(val),
        "optimizer_steps": int(trainer.global_step),
        "train_seconds": round(train_seconds, 1),
        **padding_report(train, cfg.optim.batch_size),
        "final": metrics,
        "before": before,
        "after": after,
        "policy": str(run_dir / "policy"),
        "seconds": round(time.perf_counter() - clock, 1),
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


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


def _eval_items(cfg: SFTConfig, load: Any) -> list:
    """The validation questions of the before/after check (none when ``eval_questions`` is 0 or the
    dataset has no validation split):
    the test split is kept for pre-registered studies (docs/study.md, Protocol)."""
    if not cfg.eval_questions or getattr(cfg.dataset, "validation", "") is None:
        return []  # user files without a validation split: no check, rather than a failed run
    items = load("validation")
    return random.Random(cfg.seed + 1).sample(items, min(cfg.eval_questions, len(items)))
