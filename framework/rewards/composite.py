"""Format validity, and weighted sums of rewards with every component reported."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from framework.algorithms.stats.padding import pad_to_widest
from framework.config import ComponentConfig, Problem, option
from framework.registry.kinds import REWARDS
from framework.registry.kinds import REWARDS as registry
from framework.rewards.common import valid_mask
from framework.rewards.text import ReportsEntityRule, ReportsVerdict
from framework.types import RewardInputs, RewardOutput


@dataclass
class FormatRewardConfig(ComponentConfig):
    pass


@REWARDS.register("format", config=FormatRewardConfig)
def format_reward(inputs: RewardInputs, *, cfg: FormatRewardConfig) -> Tensor:
    """1 for a rollout that ended in an ``<answer>`` within budget and without format errors, else 0.

    Returns:
        ``[N]`` rewards.
    """
    return valid_mask(inputs).to(torch.get_default_dtype())


@dataclass
class WeightedSumConfig(ComponentConfig):
    terms: list[Any] = option(
        default_factory=lambda: [
            {"name": "outcome", "weight": 1.0},
            {"name": "format", "weight": 0.1},
        ],
        help="list of {name, weight, <that reward's fields>}",
    )

    def problems(self) -> list[Problem]:
        out: list[Problem] = []
        for i, term in enumerate(self.terms):
            try:
                term_config(term)
            except (TypeError, ValueError, LookupError) as exc:
                out.append(
                    Problem(
                        f"terms.{i}",
                        term,
                        "{name: <registered reward>, weight: <number>, ...}",
                        str(exc).splitlines()[0],
                    )
                )
                continue
            out += [p.under(f"terms.{i}") for p in term_config(term)[0].problems()]
        names = [t.get("name") for t in self.terms if isinstance(t, dict)]
        for i, name in enumerate(names):
            if name in names[:i]:
                out.append(
                    Problem(
                        f"terms.{i}.name",
                        name,
                        "each reward once (its components are reported by name)",
                        f"Merge the two '{name}' terms into one with the summed weight.",
                    )
                )
        return out

    def verdict_metric(self) -> str | None:
        """The first term's that judges answers."""
        for cfg in self._term_configs():
            if isinstance(cfg, ReportsVerdict) and cfg.verdict_metric() is not None:
                return cfg.verdict_metric()
        return None

    def entity_rule(self) -> Any:
        """The first term's entity rule (an ``e_grpo`` term's)."""
        for cfg in self._term_configs():
            if isinstance(cfg, ReportsEntityRule) and cfg.entity_rule() is not None:
                return cfg.entity_rule()
        return None

    def _term_configs(self) -> list[ComponentConfig]:
        return [term_config(term)[0] for term in self.terms]


def term_config(term: Any) -> tuple[ComponentConfig, float]:
    """``(config, weight)`` of one weighted-sum term."""
    if not isinstance(term, dict) or "name" not in term:
        raise TypeError("each term needs a 'name'")
    fields = dict(term)
    name, weight = fields.pop("name"), float(fields.pop("weight", 1.0))
    if name == "weighted_sum":
        raise ValueError("weighted_sum cannot contain itself")
    entry = registry.get(name)
    return entry.config_cls(name=name, **fields), weight


def reward_components(inputs: RewardInputs, cfg: ComponentConfig) -> dict[str, Tensor]:
    """Every component of a reward, by name; a single reward is its own only component."""
    return reward_parts(inputs, cfg)[1]


#: extras that are rewards themselves, with what each holds: a ``weighted_sum`` weights them by
#: their term's weight and adds those of several terms, as it does the rewards proper (a plugin
#: whose reward returns another such extra adds it with ``framework.registry.tables.add_entry``)
SUMMED_EXTRAS: dict[str, str] = {"turn_rewards": "[N, T] the reward of each model turn"}


def reward_parts(
    inputs: RewardInputs, cfg: ComponentConfig
) -> tuple[Tensor, dict[str, Tensor], dict[str, Tensor]]:
    """``(total, components, extras)`` of the reward ``cfg``, called through the registry: its
    ``[N]`` reward, every component's ``[N]`` reward by name (what a
    :class:`~framework.types.RewardOutput` reports in ``parts``, else the reward itself under its
    name) and its extras.

    Raises:
        ValueError: an extra whose first dimension is not the batch's ``N``.
    """
    out = REWARDS.bind(cfg)(inputs)
    if not isinstance(out, RewardOutput):
        return out, {cfg.name: out}, {}
    for key, value in out.extras.items():
        if value.shape[:1] != (len(inputs),):
            raise ValueError(
                f"[reward.{cfg.name}] got extras[{key!r}] of shape {tuple(value.shape)}; "
                f"expected first dimension N = {len(inputs)}. Fix: one row per rollout."
            )
    return out.rewards, dict(out.parts) or {cfg.name: out.rewards}, dict(out.extras)


@REWARDS.register("weighted_sum", config=WeightedSumConfig)
def weighted_sum_reward(inputs: RewardInputs, *, cfg: WeightedSumConfig) -> RewardOutput:
    """``sum_i w_i r_i`` over the configured rewards, each computed once, reported term by term
    in ``parts``. An extra named in :data:`SUMMED_EXTRAS` (``turn_rewards``) is the weighted sum
    of the terms' ``w_i · extra_i``, each right-padded with zeros to the widest; any other extra
    passes through unweighted and may come from one term only.

    Raises:
        ValueError: two terms return the same extra outside :data:`SUMMED_EXTRAS`.
    """
    total = torch.zeros(len(inputs), dtype=torch.get_default_dtype())
    parts: dict[str, Tensor] = {}
    extras: dict[str, Tensor] = {}
    for sub, weight in (term_config(t) for t in cfg.terms):
        rewards, _, sub_extras = reward_parts(inputs, sub)
        parts[sub.name] = rewards
        total = total + weight * rewards
        for key, value in sub_extras.items():
            if key in SUMMED_EXTRAS:
                value = weight * value
                if key in extras:  # another term's: add, padded to the wider
                    before, value = pad_to_widest([extras[key], value])
                    value = before + value
                extras[key] = value
            elif key in extras:
                raise ValueError(
                    f"[reward.{sub.name}] got extras[{key!r}] twice (another term returned it "
                    "too); expected each extra from one reward. Fix: combine only rewards whose "
                    "extras have different names."
                )
            else:
                extras[key] = value
    return RewardOutput(total, extras, parts=parts)
