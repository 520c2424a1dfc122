"""Policy losses: PPO-clip with asymmetric (clip-higher) bounds, and GSPO's sequence-level ratio.

Both take :class:`~framework.types.PolicyLossInputs` and return a
:class:`~framework.types.LossOutput` to minimise. Tokens outside the effective mask (tool responses,
padding, dropped rollouts) neither change the loss nor receive gradient.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor

from framework.algorithms.aggregation import AGG_MODES, aggregate, masked_mean
from framework.algorithms.rollout_correction import CORRECTION_LEVELS, CORRECTION_MODES
from framework.config import ComponentConfig, Problem, check, check_choice, check_range
from framework.config.inert import InertRule, declared_rule, differing_fields, single_on_policy_step
from framework.registry.kinds import POLICY_LOSSES
from framework.types import LossOutput, PolicyLossInputs


@dataclass
class PolicyLossConfig(ComponentConfig):
    """The config base of every policy loss (``POLICY_LOSSES``): how its token losses aggregate.

    The trainer reads ``agg`` and ``norm_constant`` from here to weigh micro-batches (and the KL
    term), so a loss's aggregation and the trainer's always agree. A loss subclasses this config,
    reduces its per-token losses with ``aggregate(..., cfg.agg, cfg.norm_constant)`` and calls
    ``super().problems()`` if it overrides :meth:`problems`.

    Class-level flags tell the trainer what a loss needs of the micro-batching and the update:
    ``needs_groups`` (the loss reads ``PolicyLossInputs.group_index`` and statistics of whole
    groups, so every group must sit in one micro-batch) and ``zero_advantage_inert`` (a rollout
    whose advantage is 0 adds exactly nothing to the loss, so it may be skipped) and
    ``acts_off_policy_only`` (the loss adds a term that is 0 while the policy equals the behaviour
    policy, so it needs a second optimisation pass over each batch) and ``needs_entropy`` (the
    trainer computes each trained token's entropy and passes it as ``PolicyLossInputs.entropy``)
    and ``stages_per_turn`` (the update makes one optimisation pass per model turn of the step's
    rollouts, with the log-probs of the earlier passes in ``PolicyLossInputs.earlier_logprobs``;
    ``optim.policy_epochs`` must then be 1).

    The ``rollout_correction*`` fields correct for the mismatch between the rollout backend's and
    the trainer's log-probs (:mod:`framework.algorithms.rollout_correction`): the trainer computes
    the weights and passes them as ``PolicyLossInputs.token_weights``, which every loss applies to
    its per-token policy-gradient terms (:func:`_masked_inputs` folds them into the advantages).
    """

    #: the loss computes statistics over each rollout's group: keep every group in one micro-batch
    needs_groups: ClassVar[bool] = False
    #: a rollout with advantage 0 contributes exactly nothing (the trainer may leave it out)
    zero_advantage_inert: ClassVar[bool] = True
    #: the loss's added term compares current and behaviour log-probs, so it is exactly 0 on the
    #: first, on-policy pass over a batch: the train config then requires optim.policy_epochs >= 2
    acts_off_policy_only: ClassVar[bool] = False
    #: the loss reads the current policy's per-token entropy (``PolicyLossInputs.entropy``)
    needs_entropy: ClassVar[bool] = False
    #: one optimisation pass (one optimiser step) per model turn of the step's rollouts, each pass
    #: on policy (its ratio against the pass's own start), the earlier passes' log-probs kept
    stages_per_turn: ClassVar[bool] = False

    agg: str = field(default="seq_mean_token_mean", metadata={"help": f"one of {tuple(AGG_MODES)}"})
    norm_constant: float | None = field(
        default=None, metadata={"help": "divisor for agg=token_sum_norm (max response tokens)"}
    )
    rollout_correction: str = field(
        default="none",
        metadata={
            "help": "rollout/trainer log-prob mismatch: none, tis (truncated importance weights "
            "min(rho, C)) or mis (masked: rho, or 0 where rho > C)"
        },
    )
    rollout_correction_level: str = field(
        default="token",
        metadata={"help": "token (per-token ratio) or sequence (product over the rollout)"},
    )
    rollout_correction_threshold: float = field(
        default=2.0,
        metadata={
            "help": "C (> 1): weight cap (tis) or mask bound (mis); the mismatch figure "
            "frac_beyond counts tokens whose ratio is outside [1/C, C]"
        },
    )

    def problems(self) -> list[Problem]:
        out = check_choice(self.rollout_correction, "rollout_correction", CORRECTION_MODES)
        out += check_choice(
            self.rollout_correction_level, "rollout_correction_level", CORRECTION_LEVELS
        )
        out += check_range(
            self.rollout_correction_threshold,
            "rollout_correction_threshold",
            low=1.0,
            low_inclusive=False,
            fix="set rollout_correction_threshold above 1, e.g. 2 (Yao et al.'s C)",
        )
        out += check_choice(self.agg, "agg", AGG_MODES)
        agg = AGG_MODES.get(self.agg) if isinstance(self.agg, str) else None
        if agg is not None and agg.needs_norm_constant:
            out += check(
                self.norm_constant is not None and self.norm_constant > 0,
                "norm_constant",
                self.norm_constant,
                f"a positive number when agg={self.agg}",
                "set loss.norm_constant to the maximum response length in tokens",
            )
        return out


POLICY_LOSSES.declare_config_base(PolicyLossConfig)


#: the fields every policy loss shares that decide how its per-token terms add up
AGGREGATION_FIELDS = (
    "agg",
    "norm_constant",
    "rollout_correction",
    "rollout_correction_level",
    "rollout_correction_threshold",
)


def on_policy_ratio_inert(section: Any, train: Any, baseline: Any) -> str | None:
    """The inert rule (:mod:`framework.config.inert`) of a loss that sees the policy only through
    the importance ratio ``ρ = π / π_old``, clipped or used as a detached weight (PPO-clip, GSPO,
    CISPO, ETR): when every optimiser step is on policy, ``ρ`` is exactly 1 on every token, no
    bound or weight acts, and the gradient is ``-A ∇log π`` aggregated by ``agg``, the same as
    every loss of this rule under the same aggregation fields. The baseline's loss must declare
    this rule too. A loss that keeps whole groups in a micro-batch (``needs_groups``) or trains
    zero-advantage rollouts where the other skips them sums its micro-batches in another order:
    its run differs from the baseline's by floating-point rounding only, which the reason says."""
    base = baseline.loss
    if declared_rule(type(base)) is not on_policy_ratio_inert:
        return None
    if differing_fields(section, base, AGGREGATION_FIELDS):
        return None
    steps = single_on_policy_step(train)
    if steps is None:
        return None
    why = (
        f"{steps} per batch: the importance ratio is exactly 1, so no clip bound or ratio weight "
        f"acts and the gradient is -A grad log pi aggregated by {section.agg}, the baseline "
        f"loss's ({base.name})"
    )
    mine, theirs = type(section), type(base)
    if (mine.needs_groups, mine.zero_advantage_inert) != (
        theirs.needs_groups,
        theirs.zero_advantage_inert,
    ):
        why += (
            "; its micro-batches are cut otherwise (whole groups), so its sums run in another "
            "order and its run differs from the baseline's by rounding only"
        )
    return why


@dataclass
class ClipLossConfig(PolicyLossConfig):
    """PPO-clip's bounds, and its dual clip (:func:`dual_clip`), which every loss built on
    :func:`_clipped_objective` or :func:`ppo_clip_loss` applies."""

    #: on policy (ratio 1) no bound acts: the plain policy gradient (not inherited: a subclass
    #: that changes the objective declares its own rule or none)
    screen_inert: ClassVar[InertRule] = on_policy_ratio_inert

    clip_low: float = field(default=0.2, metadata={"help": "ratio lower bound is 1 - clip_low"})
    clip_high: float = field(
        default=0.28, metadata={"help": "ratio upper bound is 1 + clip_high (clip-higher, DAPO)"}
    )
    dual_clip: float = field(
        default=0.0,
        metadata={
            "help": "dual clip c (> 1; Ye et al. 2020): where A < 0 a token's loss is at most "
            "-c A (no gradient beyond it); 0 = off"
        },
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.clip_low, "clip_low", low=0.0, high=1.0, low_inclusive=False)
        out += check_range(self.clip_high, "clip_high", low=0.0, low_inclusive=False)
        if self.dual_clip != 0:
            fix = "set dual_clip above 1, e.g. 3 (verl's default), or 0 to turn it off"
            out += check_range(self.dual_clip, "dual_clip", low=1.0, low_inclusive=False, fix=fix)
        return out + super().problems()


def _masked_inputs(inputs: PolicyLossInputs) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(mask, logprobs, old_logprobs, advantages)`` with masked entries zeroed (no NaN/inf).

    The advantages are weighted by ``inputs.token_weights`` (rollout correction), when given.
    For a loss whose per-token term is ``A_t · f(ρ_t)`` or ``min``/``max`` of such terms (every
    clipped surrogate here), a weight ``w_t >= 0`` on ``A_t`` is exactly a weight on the term:
    ``-min(ρ w A, clip(ρ) w A) = w · -min(ρ A, clip(ρ) A)``.
    """
    mask = inputs.effective_mask()
    lp = inputs.logprobs.masked_fill(~mask, 0.0)
    old = inputs.old_logprobs.detach().masked_fill(~mask, 0.0)
    adv = inputs.token_advantages().detach()
    if inputs.token_weights is not None:
        adv = adv * inputs.token_weights.detach().to(adv.dtype)
    adv = adv.masked_fill(~mask, 0.0)
    return mask, lp, old, adv


def require_entropy(inputs: PolicyLossInputs, loss: str) -> Tensor:
    """``inputs.entropy``, detached, for a loss whose config sets ``needs_entropy``.

    Raises:
        ValueError: the inputs carry none (the trainer fills it for such a loss).
    """
    if inputs.entropy is None:
        raise ValueError(
            f"[loss.{loss}] got PolicyLossInputs without entropy; expected the per-token entropy "
            "the trainer computes for a loss whose config sets needs_entropy. Fix: call the loss "
            "through the trainer, or pass entropy=[N, L]."
        )
    return inputs.entropy.detach()


def dual_clip(per_token: Tensor, adv: Tensor, c: float) -> Tensor:
    """Dual-clip PPO (Ye et al. 2020, arXiv 1912.09729): cap the loss of negative-advantage tokens.

    PPO's pessimistic per-token loss ``max(-ρ A, -clip(ρ) A)`` is, where ``A < 0``, ``|A| ρ`` for
    every ``ρ >= 1 - ε_low``: unbounded as the ratio grows, so a token the policy has made far more
    likely than the behaviour policy did (a stale or off-policy sample) can dominate the update.
    Dual clip bounds it where ``A < 0``::

        loss_t = min(max(-ρ A, -clip(ρ) A), -c A)

    i.e. ``|A| min(max(ρ, 1 - ε_low), c)``: the loss stops growing at ``ρ = c``, and a token beyond
    it contributes ``-c A`` with **zero gradient** (the ``min`` takes the constant). Tokens with
    ``A >= 0`` are unchanged (their loss is already bounded by the upper clip), as is every token
    whose ratio is at most ``c``. ``c`` must exceed 1 (verl's ``clip_ratio_c``, default 3; HAPO's
    authors use 10); ``c = 0`` turns it off and returns ``per_token`` itself, bit for bit.

    Args:
        per_token: ``[N, L]`` per-token losses to minimise (PPO's pessimistic bound).
        adv: advantages broadcastable to ``per_token`` (the same ones the loss used, so with the
            rollout-correction weights and any per-token scaling already applied).
        c: the dual-clip constant, ``> 1``, or 0 for off.

    Returns:
        ``[N, L]`` losses, ``per_token`` where ``A >= 0`` or ``c = 0``.
    """
    if c == 0:
        return per_token
    return torch.where(adv < 0, torch.minimum(per_token, -c * adv), per_token)


def _clipped_objective(
    ratio: Tensor,
    adv: Tensor,
    mask: Tensor,
    low: float | Tensor,
    high: float | Tensor,
    cfg: ClipLossConfig,
) -> LossOutput:
    """PPO's pessimistic clipped objective; ``low`` / ``high`` are the clip widths (a number, or
    per-token ``[N, L]`` / per-row ``[N, 1]`` widths, as ETR scales them). With ``cfg.dual_clip``
    set, negative-advantage tokens' losses are capped (:func:`dual_clip`); the metrics then include
    ``dual_clip_frac``, the share of tokens at that cap."""
    unclipped = -adv * ratio  # [N, L]
    # a number or a tensor: clamp takes both (its stub's overloads take one kind at a time)
    clipped = -adv * ratio.clamp(1.0 - low, 1.0 + high)  # type: ignore[arg-type]  # [N, L]
    pessimistic = torch.maximum(unclipped, clipped)  # [N, L] pessimistic bound
    per_token = dual_clip(pessimistic, adv, cfg.dual_clip)  # [N, L]
    loss = aggregate(per_token, mask, cfg.agg, cfg.norm_constant)
    with torch.no_grad():
        r = ratio.detach()
        metrics = {
            "clip_frac": masked_mean((clipped > unclipped).float(), mask),
            "clip_frac_low": masked_mean(((r < 1.0 - low) & (adv < 0)).float(), mask),
            "clip_frac_high": masked_mean(((r > 1.0 + high) & (adv > 0)).float(), mask),
            "ratio_mean": masked_mean(r, mask),
        }
        if cfg.dual_clip != 0:
            metrics["dual_clip_frac"] = masked_mean((per_token < pessimistic).float(), mask)
    return LossOutput(loss, metrics)


@POLICY_LOSSES.register("ppo_clip", config=ClipLossConfig)
def ppo_clip_loss(inputs: PolicyLossInputs, *, cfg: ClipLossConfig) -> LossOutput:
    """PPO-clip with separate lower and upper bounds (clip-higher).

    Per token ``-min(ρ A, clip(ρ, 1 - ε_low, 1 + ε_high) A)`` with ``ρ = exp(logp - old_logp)``
    (Schulman et al. 2017; clip-higher from DAPO, arXiv 2503.14476), reduced by ``cfg.agg``. With
    ``cfg.dual_clip = c > 0`` (off by default) a token with ``A < 0`` loses at most ``-c A``
    (:func:`dual_clip`, Ye et al. 2020).

    Args:
        inputs: ``logprobs``/``old_logprobs``/``token_mask`` ``[N, L]``, ``advantages`` ``[N]`` or
            ``[N, L]``, ``sample_mask`` ``[N]``.
        cfg: bounds and aggregation.

    Returns:
        Loss and metrics ``clip_frac`` (tokens where the clipped term is active), ``clip_frac_low``,
        ``clip_frac_high``, ``ratio_mean``, ``approx_kl`` (k3 estimate of KL(old || new)), and with
        the dual clip on ``dual_clip_frac`` (tokens whose loss it caps).
    """
    mask, lp, old, adv = _masked_inputs(inputs)
    log_ratio = lp - old  # [N, L]
    out = _clipped_objective(log_ratio.exp(), adv, mask, cfg.clip_low, cfg.clip_high, cfg)
    with torch.no_grad():
        out.metrics["approx_kl"] = masked_mean(log_ratio.exp() - 1.0 - log_ratio, mask)
    return out


@dataclass
class GSPOLossConfig(ClipLossConfig):
    #: on policy the sequence ratio is 1 and the gradient is PPO-clip's (gspo_loss)
    screen_inert: ClassVar[InertRule] = on_policy_ratio_inert

    clip_low: float = field(default=3e-4, metadata={"help": "sequence ratio lower bound 1 - x"})
    clip_high: float = field(default=4e-4, metadata={"help": "sequence ratio upper bound 1 + x"})


@POLICY_LOSSES.register("gspo", config=GSPOLossConfig)
def gspo_loss(inputs: PolicyLossInputs, *, cfg: GSPOLossConfig) -> LossOutput:
    """GSPO: PPO-clip on the sequence ratio ``s_i = exp(mean_t log ρ_{i,t})``.

    Zheng et al. 2025 (arXiv 2507.18071). Implemented token-wise as
    ``s_{i,t} = sg[s_i] · π(y_t) / sg[π(y_t)]``: its value is ``s_i`` on every token, and with
    ``agg=seq_mean_token_mean`` the gradient equals that of the sequence objective
    ``-min(s_i A_i, clip(s_i) A_i)`` averaged over rollouts. On policy (``s_i = ρ_t = 1``, one
    update per rollout batch) no bound is active and the gradient equals PPO-clip's under the same
    aggregation, so a run with ``optim.policy_epochs=1`` trains exactly as ``ppo_clip`` does.

    Args:
        inputs: as :func:`ppo_clip_loss`; advantages should be per rollout.
        cfg: sequence-ratio bounds (3e-4 / 4e-4 in the paper) and aggregation.

    Returns:
        Loss and the same metrics as :func:`ppo_clip_loss` (over tokens), plus ``seq_ratio_mean``.
    """
    mask, lp, old, adv = _masked_inputs(inputs)
    tokens = mask.sum(-1).clamp(min=1)  # [N]
    log_seq_ratio = ((lp - old).sum(-1) / tokens).detach()  # [N] mean_t log ρ
    log_ratio = log_seq_ratio.unsqueeze(-1) + lp - lp.detach()  # [N, L] value log s_i
    out = _clipped_objective(log_ratio.exp(), adv, mask, cfg.clip_low, cfg.clip_high, cfg)
    with torch.no_grad():
        has = mask.any(-1)
        seq_ratio = log_seq_ratio.exp()
        out.metrics["seq_ratio_mean"] = (seq_ratio * has).sum() / has.sum().clamp(min=1)
        token_log_ratio = lp - old
        out.metrics["approx_kl"] = masked_mean(token_log_ratio.exp() - 1.0 - token_log_ratio, mask)
    return out
