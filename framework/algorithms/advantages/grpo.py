"""GRPO's group-relative advantage (arXiv 2402.03300), and Dr. GRPO's without the std.

Each estimator of :mod:`framework.algorithms.advantages` takes
:class:`~framework.types.AdvantageInputs` and its config and returns ``[N]`` advantages (``[N, L]``
for the turn- and step-level ones). Rollouts masked out of the loss (over budget) still count here:
masking happens in the loss.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor

from framework.algorithms.stats.group import group_center, group_std
from framework.config import ComponentConfig, Problem, check_range, option
from framework.registry.kinds import ADVANTAGES
from framework.types import AdvantageInputs


def _float_rewards(inputs: AdvantageInputs) -> Tensor:
    """Rewards as floats: floating inputs keep their dtype, integers become the default dtype."""
    r = inputs.rewards
    return r if r.is_floating_point() else r.to(torch.get_default_dtype())


@dataclass
class GRPOAdvantageConfig(ComponentConfig):
    scale_by_std: bool = option(
        True, "divide by the group std (GRPO); false gives Dr. GRPO's r - mean"
    )
    epsilon: float = option(1e-6, "added to the std before dividing")
    unbiased_std: bool = option(True, "Bessel-corrected group std (n - 1), as torch.std")

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
