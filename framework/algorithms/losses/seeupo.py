"""SeeUPO: sequence-level sequential updates (arXiv 2602.06554), partial: each model turn of a
multi-turn rollout is an agent of a sequence, and the turns are updated one after another, last
turn first (backward induction), each update's advantage multiplied by how much the turns updated
before it moved (the HAML/HAPPO correction).

Read from the authors' code (github.com/modelscope/AgentEvolver, branch ``seeupo``, commit
e59dea41: ``beyondagent/module/trainer/ba_ray_trainer.py``, ``update_ratios`` and
``compute_grpo_outcome_advantage_local``, and the launch configs), 2026-11-26:

- turns are the rollout's model turns counted from its start; with ``T`` the most turns of any
  rollout of the step, stage ``p = 0 .. T-1`` trains turn ``k = T - 1 - p`` (the last turn first),
  one optimiser step per stage, and only that turn's tokens; a stage's "old" policy is the policy
  at the stage's start (its log-probs are recomputed after the previous stage), so the stage's
  own ratio is 1 and its step is a policy-gradient step (the loss is GSPO's, the sequence ratio
  over the turn's tokens);
- after stage ``q`` the turn it trained, ``k_q``, has moved by ``r_q = exp(mean_(t in k_q)
  (log π_after - log π_before))`` (clamped to ``exp(+-10)``, detached), clipped to
  ``[1 - c, 1 + c]``; the running factor ``M`` starts at 1 and becomes ``clip(M r_q, 1 - c, 1 + c)``
  after each stage (the product is clipped again each time); stage ``p`` multiplies each rollout's
  advantage by its ``M`` (c = 0.2, the code's ``adv_clip_ratio``);
- the advantage is the outcome reward minus its group mean, whitened over the batch (Bessel std),
  clamped to +-3 (``algorithm=seeupo``: ``advantage=reinforce_pp_baseline`` with ``clip=3``,
  ``epsilon=0``);
- the loss is each rollout's mean over the stage's turn tokens, averaged over all the batch's
  rollouts (those without that turn add 0 and still count, as the code's padded rows do).

What is ours, hence "partial" (the paper's method section was not read here):

- stages: ``T`` is the most turns of the step's trained rollouts (those with a non-zero advantage,
  when ``optim.skip_zero_advantage`` leaves the others out; under data parallelism, the most across
  processes); the code
  always runs ``max_steps`` stages (10), the stages past every rollout's turns stepping the
  optimiser on a loss that is 0 except for its KL term;
- a rollout without turn ``k_q`` keeps its factor (1 for that stage); the code pads it with a copy
  of its last turn and multiplies in that copy's ratio;
- the code's KL term (coefficient 0.002, ``low_var_kl``) is off, as in the other bundles here;
- the code aligns the factors with rows after reordering each stage's batch by length
  (``balance_batch``), which can give a rollout another's factor; here each rollout keeps its own;
- its launch config names ``loss_mode: gspo`` where the actor does not read it (so it runs PPO),
  with the same gradient at a ratio of 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.losses.gspo import GSPOLossConfig
from framework.algorithms.losses.ppo_clip import _clipped_objective, _masked_inputs
from framework.algorithms.stats.aggregation import masked_mean
from framework.config import Problem, check, check_range, option
from framework.registry.kinds import POLICY_LOSSES
from framework.types import LossOutput, PolicyLossInputs


@dataclass
class SeeUPOLossConfig(GSPOLossConfig):
    paper: ClassVar[str] = (
        "SeeUPO: Sequence-Level Agentic-RL with Convergence Guarantees, arXiv 2602.06554"
    )
    fidelity: ClassVar[str] = "partial"
    stages_per_turn: ClassVar[bool] = True

    correction_clip: float = option(
        0.2, "c: each turn's ratio and the running factor in [1-c, 1+c]"
    )

    def problems(self) -> list[Problem]:
        return (
            super().problems()
            + check_range(
                self.correction_clip, "correction_clip", low=0.0, high=1.0, high_inclusive=False
            )
            + check(
                self.agg == "seq_mean_token_mean",
                "agg",
                self.agg,
                "seq_mean_token_mean (each rollout's mean over the stage's turn)",
                "set loss.agg=seq_mean_token_mean",
            )
        )


def model_turns(turn_index: Tensor, mask: Tensor) -> Tensor:
    """``[N, L]`` long: each trained token's model turn (from 0), -1 off the mask or outside any
    turn; a rollout that recorded no turns is one turn (0)."""
    m = mask.bool()
    no_turns = ~((turn_index >= 0) & m).any(-1, keepdim=True)  # [N, 1]
    turn = torch.where(no_turns, torch.zeros_like(turn_index), turn_index)
    return torch.where(m & (turn >= 0), turn, torch.full_like(turn, -1))


def turn_means(values: Tensor, at: Tensor) -> Tensor:
    """``[N]``: the mean of ``values [N, L]`` over each row's positions ``at`` (0 where none)."""
    return (values * at).sum(-1) / at.sum(-1).clamp(min=1)


def correction_factors(turn: Tensor, logprobs: list[Tensor], passes: int, clip: float) -> Tensor:
    """``[N]`` the running factor of the stage after the ``len(logprobs) - 1`` stages before it
    (module docstring): ``logprobs[q]`` are the log-probs at the start of stage ``q``, the last
    the current ones; stage ``q`` trained turn ``passes - 1 - q``."""
    factor = torch.ones(turn.shape[0], dtype=logprobs[-1].dtype, device=turn.device)
    for q in range(len(logprobs) - 1):
        at = turn == passes - 1 - q
        moved = turn_means((logprobs[q + 1] - logprobs[q]).detach(), at).clamp(-10.0, 10.0)
        r = torch.where(at.any(-1), moved.exp().clamp(1 - clip, 1 + clip), torch.ones_like(moved))
        factor = (factor * r).clamp(1 - clip, 1 + clip)
    return factor


@POLICY_LOSSES.register("seeupo", config=SeeUPOLossConfig)
def seeupo_loss(inputs: PolicyLossInputs, *, cfg: SeeUPOLossConfig) -> LossOutput:
    """SeeUPO (partial; module docstring): stage ``p`` of ``P`` (one per model turn) trains turn
    ``k = P - 1 - p`` with its sequence ratio and the advantage times the running factor of the
    turns updated before::

        s_i = exp(mean_(t in turn k) log ρ_t)         (1 at the stage's start)
        r_(i,q) = clip(exp(mean_(t in turn k_q) Δ_q log π), 1 - c, 1 + c)
        M_i = clip(... clip(r_(i,0)) r_(i,1) ..., 1 - c, 1 + c)      (1 at stage 0)
        L = mean_i mean_(t in turn k of i) -min(s_i A_i M_i, clip(s_i) A_i M_i)

    Raises:
        ValueError: the inputs carry no turn index (the trainer always fills it).
    """
    if inputs.turn_index is None:
        raise ValueError(
            "[loss.seeupo] got PolicyLossInputs without turn_index; expected each token's turn. "
            "Fix: call the loss through the trainer, or pass turn_index=[N, L]."
        )
    mask, lp, old, adv = _masked_inputs(inputs)
    turn = model_turns(inputs.turn_index, mask)
    p, passes = inputs.pass_index, inputs.passes
    trained = turn == passes - 1 - p  # [N, L]
    factor = correction_factors(
        turn, [*inputs.earlier_logprobs, lp.detach()], passes, cfg.correction_clip
    )
    n_turn = trained.sum(-1)  # [N]
    seq_log = turn_means((lp - old).detach(), trained)  # [N] log s_i over the turn
    log_ratio = seq_log.unsqueeze(-1) + lp - lp.detach()
    # each rollout's token mean over its whole mask, rescaled, is its mean over the turn's tokens
    rescale = mask.sum(-1).to(lp.dtype) / n_turn.clamp(min=1).to(lp.dtype)  # [N]
    weight = trained * (factor * rescale).unsqueeze(-1)
    out = _clipped_objective(log_ratio.exp(), adv * weight, mask, cfg.clip_low, cfg.clip_high, cfg)
    with torch.no_grad():
        has = n_turn > 0
        out.metrics["seeupo_trained_share"] = masked_mean(trained.float(), mask)
        out.metrics["seeupo_correction_mean"] = factor.mean()
        out.metrics["seeupo_turn_rollouts"] = has.float().mean()
    return out
