"""One RL policy update of the tiny model under a Lightning strategy built from ``trainer``
settings, as a script that Lightning relaunches once per process (``test_distributed.py`` runs it).

    python tests/integration/distributed_step.py OUT STRATEGY [key=value ...]

``STRATEGY`` is ``ddp`` or ``fsdp``; ``key=value`` set ``trainer.fsdp`` fields and
``policy_epochs``. Each of the two processes trains on its half of :func:`batch` (two of the four
groups) through :func:`framework.rl.update.policy_update`, with the train module's own wiring
(``SearchAgentRL.configure_model`` shards the policy under FSDP, ``_missing_passes`` pads the
passes); rank 0 writes to ``OUT`` the whole-batch gradient each parameter held after the update
(gathered from the shards under FSDP), both processes' figures and the strategy it ran.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from framework.algorithms.losses.kl import KLConfig
from framework.algorithms.losses.ppo_clip import ClipLossConfig
from framework.lightning.trainer import TrainerConfig, apply_gradient_checkpointing
from framework.rl.batch import RolloutBatch
from framework.rl.config import OptimConfig
from framework.rl.update import loss_spec, plan_options, policy_update
from framework.training.sharding import FSDPConfig
from framework.types import Trajectory

#: per row: (prompt, generated, tool response, generated) lengths; rows 2k and 2k+1 are group k
SHAPES = [(5, 4, 3, 2), (7, 2, 4, 3), (4, 6, 2, 5), (6, 3, 3, 1)] * 2
#: group 1 has no signal (skipped), so rank 0 has fewer micro-batches than rank 1 (padded passes);
#: they do not sum to 0, so the on-policy loss (-mean A) is not 0 either
ADVANTAGES = [0.9, -0.5, 0.0, 0.0, 1.1, -0.3, 0.4, -1.2]
#: rows each process trains on: the first two groups on rank 0, the last two on rank 1
RANK_ROWS = (slice(0, 4), slice(4, 8))


def batch(vocab: int) -> list[Trajectory]:
    """Eight rollouts in four groups, each response with a tool span (loss mask 0) in it."""
    gen = torch.Generator().manual_seed(7)
    out = []
    for i, (prompt, first, tool, second) in enumerate(SHAPES):
        n = prompt + first + tool + second
        ids = torch.randint(3, vocab, (n,), generator=gen).tolist()
        mask = [0] * prompt + [1] * first + [0] * tool + [1] * second
        out.append(Trajectory(i // 2, i // 2, ids, mask, prompt))
    return out


def optim(epochs: int) -> OptimConfig:
    return OptimConfig(lr=1e-3, micro_batch_size=1, policy_epochs=epochs)


def update(
    model: torch.nn.Module,
    rows: list[Trajectory],
    advantages: list[float],
    pad_id: int,
    epochs: int,
    **kwargs: Any,
) -> dict[str, float]:
    """``policy_update`` of ``model`` on ``rows`` with PPO-clip and AdamW (``kwargs``: the
    optimiser and schedule, ``backward``, ``pad_passes``)."""
    o = optim(epochs)
    spec = loss_spec(ClipLossConfig(name="ppo_clip"), KLConfig(name="k1", coef=0.0))
    sample = torch.ones(len(rows), dtype=torch.bool)
    built = RolloutBatch.build(rows, pad_id=pad_id, sample_mask=sample)
    plan = built.plan(torch.tensor(advantages), plan_options(o, spec))
    return policy_update(model, plan, spec, optim=o, **kwargs)


def gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's gradient, whole (a sharded one gathered: a collective)."""
    from torch.distributed.tensor import DTensor

    out = {}
    for name, p in model.named_parameters():
        g = p.grad
        if isinstance(g, DTensor):
            g = g.full_tensor()
        if g is not None:
            out[name] = g.detach().clone()
    return out


def main(out: Path, strategy: str, settings: dict[str, str]) -> None:
    import lightning as L

    from framework.lightning.trainer import build_trainer
    from framework.rl.module import SearchAgentRL
    from framework.rollout.policy import PolicyConfig, load_policy
    from framework.training.schedule import optimizer_and_schedule

    torch.set_num_threads(1)  # two processes on a shared machine
    epochs = int(settings.pop("policy_epochs", "1"))
    fsdp = replace(FSDPConfig(process_group_backend="gloo"), **settings)
    t = TrainerConfig(
        accelerator="cpu", devices=2, strategy=strategy, precision="32-true", fsdp=fsdp
    )

    class OneUpdate(L.LightningModule):
        """The train module's distributed wiring around one policy update."""

        sharded = SearchAgentRL.sharded
        configure_model = SearchAgentRL.configure_model
        _missing_passes = SearchAgentRL._missing_passes

        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False
            self.cfg = SimpleNamespace(trainer=t)
            self.policy, self.tok = load_policy(PolicyConfig(source="tiny"))
            apply_gradient_checkpointing(self.policy, t)
            self.figures: dict[str, float] = {}

        def configure_optimizers(self) -> Any:
            opt, sched = optimizer_and_schedule(self.policy, optim(epochs), 1)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

        def training_step(self, _batch: Any, _idx: int) -> None:
            rows = RANK_ROWS[self.global_rank]
            self.figures = update(
                self.policy,
                batch(len(self.tok))[rows],
                ADVANTAGES[rows],
                self.tok.pad_token_id,
                epochs,
                optimizer=self.optimizers(),
                scheduler=self.lr_schedulers(),
                backward=self.manual_backward,
                pad_passes=self._missing_passes,
            )

        def on_train_end(self) -> None:
            import torch.distributed as dist

            grads = gradients(self.policy)  # every rank takes part
            figures: list[Any] = [None, None]
            dist.all_gather_object(figures, self.figures)
            if self.global_rank == 0:
                kind = type(self.trainer.strategy).__name__
                torch.save({"grads": grads, "figures": figures, "strategy": kind}, out)

    module = OneUpdate()
    trainer = build_trainer(
        t, None, out.parent, max_steps=1, callbacks=[], val_check_interval=1, limit_val_batches=0
    )
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader([0], batch_size=1))


if __name__ == "__main__":
    pairs = dict(a.split("=", 1) for a in sys.argv[3:])
    main(Path(sys.argv[1]), sys.argv[2], pairs)
