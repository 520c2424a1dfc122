"""The policy losses' base config: the aggregation, rollout correction and what a loss reads.

Every policy loss (:mod:`framework.algorithms.losses`) takes
:class:`~framework.types.PolicyLossInputs` and returns a :class:`~framework.types.LossOutput` to
minimise; its config derives from :class:`PolicyLossConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from framework.algorithms.losses.rollout_correction import CORRECTION_LEVELS, CORRECTION_MODES
from framework.algorithms.stats.aggregation import AGG_MODES
from framework.config import ComponentConfig, Problem, check, check_choice, check_range, option
from framework.config.inert import declared_rule, differing_fields, single_on_policy_step
from framework.registry import POLICY_LOSSES


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
    the trainer's log-probs (:mod:`framework.algorithms.losses.rollout_correction`): the trainer computes
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

    agg: str = option("seq_mean_token_mean", f"one of {tuple(AGG_MODES)}")
    norm_constant: float | None = option(
        None, "divisor for agg=token_sum_norm (max response tokens)"
    )
    rollout_correction: str = option(
        "none",
        "rollout/trainer log-prob mismatch: none, tis (truncated importance weights "
        "min(rho, C)) or mis (masked: rho, or 0 where rho > C)",
    )
    rollout_correction_level: str = option(
        "token", "token (per-token ratio) or sequence (product over the rollout)"
    )
    rollout_correction_threshold: float = option(
        2.0,
        "C (> 1): weight cap (tis) or mask bound (mis); the mismatch figure "
        "frac_beyond counts tokens whose ratio is outside [1/C, C]",
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
