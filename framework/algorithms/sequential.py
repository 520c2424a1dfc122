"""SeeUPO: sequence-level sequential updates (arXiv 2602.06554), reconstructed: treat each
turn of a multi-turn rollout as an agent of a sequence and update them one after another, last
turn first (backward induction), each with a sequence-level clipped ratio, so every update sees the
later turns' policy already improved.

The method section could not be read from here (``../shared/METHODS-2.md`` item 7); our choices,
hence "reconstructed":

- turns are aligned from the end (the last turn, the answer, is position 0);
- optimisation pass ``p`` of ``P = optim.policy_epochs`` trains the turns at position ``p`` from
  the end, and the last pass trains every earlier turn as well (the cap the methods page suggests:
  with two passes, the answer turn, then all the others); other tokens add 0 to the loss and still
  count in its normaliser (so micro-batching stays exact);
- each turn's ratio is GSPO's length-normalised sequence ratio over the turn's tokens,
  ``s_(i,k) = exp(mean_(t in k) log ρ_t)``, clipped as GSPO clips (3e-4 / 4e-4);
- the HAPPO-style correction: a turn's advantage is multiplied by the product of the (detached,
  clipped) sequence ratios of the rollout's turns already updated in earlier passes;
- the advantage is the rollout's, undiscounted (GRPO's with ``algorithm=seeupo``).

With one pass (or one-turn rollouts) SeeUPO is GSPO with per-turn sequence ratios.

Sources found 2026-11-26 (this stays reconstructed): arXiv 2602.06554; the authors' code
(github.com/modelscope/AgentEvolver, branch ``seeupo``, ``beyondagent/module/trainer/
ba_ray_trainer.py``) runs one full actor update per turn index from the last turn to the first,
multiplies each later turn's advantage by the running product of the earlier-updated turns'
length-normalised sequence ratios clipped to [0.8, 1.2] (the product clipped again), and uses a
group-centred advantage without std, z-scored over the batch and clamped to +-3 (GSPO loss, one
PPO epoch). Ours: one pass per ``policy_epochs`` (earlier turns share the last pass), GSPO's clip
for the correction ratio, GRPO's advantage. Matching it is a later change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.aggregation import masked_mean
from framework.algorithms.losses import GSPOLossConfig, _clipped_objective, _masked_inputs
from framework.registry.kinds import POLICY_LOSSES
from framework.types import LossOutput, PolicyLossInputs


@dataclass
class SeeUPOLossConfig(GSPOLossConfig):
    paper: ClassVar[str] = (
        "SeeUPO: Sequence-Level Agentic-RL with Convergence Guarantees, arXiv 2602.06554"
    )
    fidelity: ClassVar[str] = "reconstructed"


def turns_from_end(turn_index: Tensor, mask: Tensor) -> Tensor:
    """``[N, L]`` long: each trained token's turn counted from the rollout's last turn (0), -1
    off the mask or outside any turn; a rollout that recorded no turns is one turn."""
    no_turns = ~(turn_index >= 0).any(-1, keepdim=True)  # [N, 1]
    index = torch.where(no_turns, torch.zeros_like(turn_index), turn_index)
    m = mask.bool() & (index >= 0)
    last = index.masked_fill(~m, -1).max(-1, keepdim=True).values  # [N, 1]
    return torch.where(m, last - index, torch.full_like(index, -1))


def turn_log_ratios(log_ratio: Tensor, position: Tensor) -> Tensor:
    """``[N, L]``: on each token the mean of ``log_ratio`` over the tokens of its turn (its
    ``position``); 0 where ``position`` is -1."""
    n = log_ratio.shape[0]
    slots = int(position.max()) + 2 if position.numel() else 1
    index = (position + 1).clamp(min=0)  # slot 0 collects the tokens outside any turn
    sums = torch.zeros(n, slots, dtype=log_ratio.dtype, device=log_ratio.device)
    counts = torch.zeros_like(sums)
    sums.scatter_add_(1, index, log_ratio)
    counts.scatter_add_(1, index, torch.ones_like(log_ratio))
    mean = sums / counts.clamp(min=1)
    out = torch.gather(mean, 1, index)
    return torch.where(position >= 0, out, torch.zeros_like(out))


@POLICY_LOSSES.register("seeupo", config=SeeUPOLossConfig)
def seeupo_loss(inputs: PolicyLossInputs, *, cfg: SeeUPOLossConfig) -> LossOutput:
    """SeeUPO (reconstructed; module docstring): pass ``p`` trains the turns ``p`` from the end
    (the last pass every earlier one too) with their sequence ratio, the advantage corrected by the
    ratios of the turns already updated::

        s_(i,k) = exp(mean_(t in turn k) log ρ_t)
        trained in pass p: d_(i,k) = p (d counted from the last turn), or d >= p in the last pass
        M_(i,p) = Π_(d < p) clip(sg[s_(i,k(d))], 1 - ε_low, 1 + ε_high)
        per token of a trained turn: -min(s A M, clip(s) A M)

    Raises:
        ValueError: the inputs carry no turn index (the trainer always fills it).
    """
    if inputs.turn_index is None:
        raise ValueError(
            "[loss.seeupo] got PolicyLossInputs without turn_index; expected each token's turn. "
            "Fix: call the loss through the trainer, or pass turn_index=[N, L]."
        )
    mask, lp, old, adv = _masked_inputs(inputs)
    position = turns_from_end(inputs.turn_index, mask)
    seq_log = turn_log_ratios((lp - old).detach(), position)  # [N, L] log s of each token's turn
    log_ratio = seq_log + lp - lp.detach()
    p = inputs.pass_index
    trained = (position == p) | ((position > p) & (p >= inputs.passes - 1))
    # the correction: the clipped sequence ratios of the turns updated before (positions < p)
    clipped = seq_log.exp().clamp(1 - cfg.clip_low, 1 + cfg.clip_high)
    log_m = torch.zeros(lp.shape[0], dtype=lp.dtype, device=lp.device)
    for d in range(p):
        at = position == d
        first = at.float().argmax(-1)  # a token of that turn, if any
        has = at.any(-1)
        log_m = log_m + torch.where(has, clipped.gather(1, first[:, None]).squeeze(1).log(), 0.0)
    scale = log_m.exp().unsqueeze(-1) * trained
    out = _clipped_objective(log_ratio.exp(), adv * scale, mask, cfg.clip_low, cfg.clip_high, cfg)
    with torch.no_grad():
        out.metrics["seeupo_trained_share"] = masked_mean(trained.float(), mask)
        out.metrics["seeupo_correction_mean"] = log_m.exp().mean()
    return out
