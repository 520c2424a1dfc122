"""Inputs that components declare and registered providers compute.

A component config lists in ``requires`` the inputs it needs beyond what every step computes
(:class:`~framework.config.ComponentConfig`); for each, the provider registered under that name in
:data:`~framework.registry.INPUT_PROVIDERS` computes it from an :class:`InputContext`, and the
step hands it to the component in its inputs' ``extras`` (an advantage estimator's
``AdvantageInputs``, or a loss's ``PolicyLossInputs`` with the rows of its micro-batch). So the step
knows no component:

    @dataclass
    class MyAdvantageConfig(ComponentConfig):
        requires: ClassVar[tuple[str, ...]] = ("rollout_lengths",)

    @INPUT_PROVIDERS.register("rollout_lengths", config=MyAdvantageConfig)
    def rollout_lengths(ctx: InputContext, *, cfg: MyAdvantageConfig) -> Tensor:
        return torch.tensor([len(t.token_ids) - t.prompt_len for t in ctx.trajectories])

A provider is called with ``cfg`` = the config of the first component that requires the input (its
fields may parametrise the provider, as IGPO's ``probe_batch_size`` does), after the rollouts are
scored and before advantages are estimated and the policy updated, without gradients; an input the rewards already
returned (a :class:`~framework.types.RewardOutput` extra of the same name) is not recomputed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch

from framework.config import ComponentConfig, Problem
from framework.registry import AUGMENTERS, INPUT_PROVIDERS
from framework.registry.protocols import Tokenizer
from framework.rl.batch import BatchView, RolloutBatch

#: the config sections whose components' ``requires`` the step meets: the advantage estimator (in
#: ``AdvantageInputs.extras``) and the policy loss (in ``PolicyLossInputs.extras``, per
#: micro-batch); rewards are scored before any input exists
REQUIRING_SECTIONS = ("advantage", "loss")


class MissingInputProvider(LookupError):
    """A component requires an input that no provider computes."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass
class InputContext(BatchView):
    """What an input provider may read.

    Attributes:
        policy: the policy being trained, as it was before this step's update.
        tokenizer: the rollout backend's tokenizer.
        batch: the step's trained rollouts (:class:`~framework.rl.batch.RolloutBatch`:
            packed tokens, masks, turns, rewards, dataset columns, inputs computed so far).
        progress: the share of the run's steps done before this step, in ``[0, 1)`` (0 where
            the caller runs no schedule).
    """

    policy: torch.nn.Module
    tokenizer: Tokenizer
    batch: RolloutBatch
    progress: float = 0.0

    @property
    def pad_id(self) -> int:
        """The tokenizer's padding id."""
        return self.batch.pad_id


def required_inputs(
    sections: Mapping[str, ComponentConfig | None],
) -> dict[str, tuple[str, ComponentConfig]]:
    """Each input named in a component's ``requires``, with the section and config of the first
    component (in ``sections``' order) that requires it."""
    out: dict[str, tuple[str, ComponentConfig]] = {}
    for section, cfg in sections.items():
        for name in getattr(cfg, "requires", ()) if cfg is not None else ():
            out.setdefault(name, (section, cfg))  # type: ignore[arg-type]
    return out


def missing_providers(
    sections: Mapping[str, ComponentConfig | None], augment: ComponentConfig | None = None
) -> list[Problem]:
    """One problem per required input that no provider is registered for and the selected
    augmenter (``augment``, :mod:`framework.rl.augment`) does not provide (empty when none)."""
    given = set(getattr(augment, "provides", ()))
    return [
        _missing(section, cfg, name)
        for name, (section, cfg) in required_inputs(sections).items()
        if name not in INPUT_PROVIDERS and name not in given
    ]


def augmenters_providing(name: str) -> list[str]:
    """The registered augmenters whose config ``provides`` input ``name``."""
    return [e.name for e in AUGMENTERS if name in getattr(e.config_cls, "provides", ())]


def _missing(section: str, cfg: ComponentConfig, name: str) -> Problem:
    augmenters = augmenters_providing(name)
    if augmenters:
        choices = " or ".join(f"augment={a}" for a in augmenters)
        return Problem(
            f"{section}.name",
            cfg.name,
            f"an augmenter that provides its required input '{name}' (the rollouts it needs "
            "are made by an augmenter, not a provider)",
            f"set {choices} (its algorithm bundle does)",
        )
    registered = ", ".join(INPUT_PROVIDERS.names()) or "none"
    return Problem(
        f"{section}.name",
        cfg.name,
        f"a component whose required input '{name}' has a registered provider (registered: "
        f"{registered})",
        f"register one with @INPUT_PROVIDERS.register('{name}', config=...) in the module that "
        f"defines {cfg.name}, or load its plugin",
    )


def provide_inputs(
    sections: Mapping[str, ComponentConfig | None],
    ctx: InputContext,
    have: Iterable[str] = (),
) -> dict[str, object]:
    """Every input the components of ``sections`` require and ``have`` lacks, computed by its
    provider without gradients (nothing when the step has no rollouts).

    Raises:
        MissingInputProvider: an input has no registered provider.
    """
    if not ctx.trajectories:
        return {}
    done = set(have)
    out: dict[str, object] = {}
    for name, (section, cfg) in required_inputs(sections).items():
        if name in done:
            continue
        if name not in INPUT_PROVIDERS:
            raise MissingInputProvider(str(_missing(section, cfg, name)))
        with torch.no_grad():
            out[name] = INPUT_PROVIDERS.get(name).target(ctx, cfg=cfg)
    return out
