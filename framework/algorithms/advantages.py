"""Group-relative advantage estimators.

Each takes :class:`~framework.types.AdvantageInputs` and its config and returns ``[N]`` advantages.
Rollouts masked out of the loss (over budget) still count here: masking happens in the loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import torch
from torch import Tensor

from framework.algorithms.group import group_center, group_size, group_std
from framework.config import ComponentConfig, Problem, check, check_range
from framework.registry.kinds import ADVANTAGES
from framework.types import AdvantageInputs


def _float_rewards(inputs: AdvantageInputs) -> Tensor:
    """Rewards as floats: floating inputs keep their dtype, integers become the default dtype."""
    r = inputs.rewards
    return r if r.is_floating_point() else r.to(torch.get_default_dtype())


@dataclass
class GRPOAdvantageConfig(ComponentConfig):
    scale_by_std: bool = field(
        default=True,
        metadata={"help": "divide by the group std (GRPO); false gives Dr. GRPO's r - mean"},
    )
    epsilon: float = field(default=1e-6, metadata={"help": "added to the std before dividing"})
    unbiased_std: bool = field(
        default=True, metadata={"help": "Bessel-corrected group std (n - 1), as torch.std"}
    )

    def problems(self) -> list[Problem]:
        return check_range(self.epsilon, "epsilon", low=0.0, fix="use a small positive epsilon")


def baseline_is_grpo(section: ComponentConfig, baseline: Any) -> bool:
    """Whether the ``baseline`` train config's estimator is GRPO with ``section``'s GRPO fields
    (``scale_by_std``, ``epsilon``, ``unbiased_std``): what the inert rules of GRPO's variants
    (DPPO, DaGRPO) need before they may say the variant leaves GRPO's advantages as they are."""
    from framework.config.inert import differing_fields

    base = baseline.advantage
    names = [f.name for f in fields(GRPOAdvantageConfig) if f.name != "name"]
    return base.name == "grpo" and not differing_fields(section, base, names)


@ADVANTAGES.register("grpo", config=GRPOAdvantageConfig)
def grpo_advantage(inputs: AdvantageInputs, *, cfg: GRPOAdvantageConfig) -> Tensor:
    """GRPO: ``A_i = (r_i - mean_g r) / (std_g r + eps)``; Dr. GRPO when ``scale_by_std`` is off.

    DeepSeekMath (arXiv 2402.03300) eq. 4; Dr. GRPO (arXiv 2503.20783) drops the std. A group of one
    or of identical rewards gets 0 (its std is defined as 0, never NaN).

    Args:
        inputs: ``rewards [N]``, ``group_index [N]``.
        cfg: the estimator's config.

    Returns:
        ``[N]`` advantages; each group's advantages sum to 0.
    """
    r = _float_rewards(inputs)
    centered = group_center(r, inputs.group_index)
    if not cfg.scale_by_std:
        return centered
    std = group_std(r, inputs.group_index, unbiased=cfg.unbiased_std)
    # constant groups are exactly 0 already; the guard keeps epsilon = 0 from giving 0/0
    return torch.where(std > 0, centered / (std + cfg.epsilon), torch.zeros_like(centered))


@dataclass
class RLOOAdvantageConfig(ComponentConfig):
    pass


@ADVANTAGES.register("rloo", config=RLOOAdvantageConfig)
def rloo_advantage(inputs: AdvantageInputs, *, cfg: RLOOAdvantageConfig) -> Tensor:
    """RLOO: ``A_i = r_i - mean_{j != i} r_j = G/(G-1) (r_i - mean_g r)``.

    Ahmadian et al. 2024 (arXiv 2402.14740). A group of one has no baseline and gets 0.

    Args:
        inputs: ``rewards [N]``, ``group_index [N]``.
        cfg: unused (no hyperparameters).

    Returns:
        ``[N]`` advantages.
    """
    r = _float_rewards(inputs)
    n = group_size(inputs.group_index).to(r)
    scale = torch.where(n > 1, n / (n - 1.0).clamp(min=1.0), torch.zeros_like(n))
    return scale * group_center(r, inputs.group_index)


@dataclass
class ReinforcePPBaselineConfig(ComponentConfig):
    epsilon: float = field(default=1e-6, metadata={"help": "added to the batch std"})
    whiten: bool = field(default=True, metadata={"help": "normalise over the whole batch"})
    clip: float = field(
        default=0.0, metadata={"help": "clamp the advantages to [-clip, clip]; 0: no clamp"}
    )

    def problems(self) -> list[Problem]:
        return check(
            self.epsilon >= 0, "epsilon", self.epsilon, "a number >= 0", "use 1e-6"
        ) + check(self.clip >= 0, "clip", self.clip, "a number >= 0", "use 0 (no clamp) or 3")


@ADVANTAGES.register("reinforce_pp_baseline", config=ReinforcePPBaselineConfig)
def reinforce_pp_baseline_advantage(
    inputs: AdvantageInputs, *, cfg: ReinforcePPBaselineConfig
) -> Tensor:
    """REINFORCE++ with baseline: ``r - mean_g r``, then whitened over the whole batch.

    Hu et al. (arXiv 2501.03262). Whitening is over rollouts (each counted once), not tokens: the
    batch mean of ``r - mean_g r`` is already 0, so this divides by the batch std (Bessel). With
    ``clip`` > 0 the result is clamped to ``[-clip, clip]`` (SeeUPO's code clamps at 3).

    Args:
        inputs: ``rewards [N]``, ``group_index [N]``.
        cfg: the estimator's config.

    Returns:
        ``[N]`` advantages.
    """
    centered = group_center(_float_rewards(inputs), inputs.group_index)
    out = centered
    if cfg.whiten:
        std = centered.std() if centered.numel() > 1 else centered.new_zeros(())
        if std == 0:  # every group constant: nothing to learn, and epsilon = 0 must not give NaN
            return torch.zeros_like(centered)
        out = (centered - centered.mean()) / (std + cfg.epsilon)
    return out.clamp(-cfg.clip, cfg.clip) if cfg.clip > 0 else out
