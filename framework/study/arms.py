"""Which arms a study trains, in which order: a screen's arm per registered method
(:func:`screen_arms`), the arms ``only_arms`` keeps, the arms the components' rules show to be the
baseline's (:func:`inert_reason`, not trained) and the (arm, seed) jobs (:func:`study_jobs`).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from dataclasses import dataclass, is_dataclass, replace
from typing import Any

from framework.config.inert import config_leaves, declared_rule
from framework.study.runs import STUDY_TRAIN_ARGS
from framework.study.schema import StudyConfig

#: the registries a screen sweeps (``screen=true``), each selected by its config group
SCREENED_KINDS = ("advantage", "loss", "sampler", "augment")


@dataclass(frozen=True)
class BundleUpdate:
    """How a bundle (composed with a study's shared overrides) updates: its policy epochs, its
    mini-batch size and whether its loss trains turn by turn (``stages_per_turn``, which the
    train config refuses with mini-batches)."""

    policy_epochs: int
    mini_batch_size: int
    stages_per_turn: bool


@functools.lru_cache(maxsize=8)
def _bundle_choices(
    bundles: tuple[str, ...], overrides: tuple[str, ...]
) -> tuple[tuple[str, tuple[tuple[str, str], ...], BundleUpdate], ...]:
    """The component each bundle selects per screened kind, and how it updates
    (:class:`BundleUpdate`), composed once per process (not validated: a turn-staged loss with
    the shared overrides' mini-batches is refused by the train config, and the screen gives its
    arm ``optim.mini_batch_size=0``).

    Composing the train config of every bundle takes seconds (Hydra), and the bundles' files do
    not change while a process runs; a component registered later (a plugin) changes no bundle's
    choice, and a new bundle changes ``bundles``, the key.
    """
    from framework.cli.app import compose

    out = []
    for bundle in bundles:
        cfg = compose("train", [*overrides, f"algorithm={bundle}"])
        update = BundleUpdate(
            int(cfg.optim.policy_epochs),
            int(cfg.optim.get("mini_batch_size", 0) or 0),
            _stages_per_turn(str(cfg.loss.name)),
        )
        choices = tuple((kind, str(getattr(cfg, kind).name)) for kind in SCREENED_KINDS)
        out.append((bundle, choices, update))
    return tuple(out)


def _stages_per_turn(loss: str) -> bool:
    """Whether the registered loss ``loss`` trains turn by turn (``stages_per_turn``)."""
    from framework.registry import ALL

    cls = ALL["loss"].get(loss).config_cls if loss in ALL["loss"] else None
    return bool(getattr(cls, "stages_per_turn", False))


#: the arm's override that makes a turn-staged loss (SeeUPO) trainable under shared mini-batches
WHOLE_BATCH = "optim.mini_batch_size=0"


def reference_label(baseline: str, epochs: int) -> str:
    """The label of the baseline at ``epochs`` policy epochs (a matched baseline)."""
    return f"{baseline}-epochs{epochs}"


def screen_arms(
    baseline: str, *, overrides: Sequence[str] = (), matched: bool = False
) -> dict[str, list[str]]:
    """One arm per registered method: the bundles first (the baseline bundle leading), then each
    component no bundle selects, on the baseline bundle.

    A loss that acts only off policy gets a second policy epoch (``optim.policy_epochs=2``); a
    loss that trains turn by turn (SeeUPO), where the shared overrides split batches into
    mini-batches, gets one mini-batch (``optim.mini_batch_size=0``), which it needs.

    Args:
        baseline: the bundle every swapped-in component is compared with (``algorithm=<it>``).
        overrides: the study's shared overrides (they decide, e.g., the sampler the arms share).
        matched: also the baseline at each number of policy epochs some arm takes beyond the
            baseline's (:func:`reference_label`, e.g. ``grpo-epochs2``), right after it: an arm
            that spends more optimiser steps is compared with it (framework/study/screen.py).

    Raises:
        ValueError: ``baseline`` is not an algorithm bundle.
    """
    from framework.config.compose import group_options
    from framework.registry import ALL, load_components

    load_components()
    bundles = group_options("algorithm")
    if baseline not in bundles:
        raise ValueError(
            f"[baseline] got {baseline!r}; expected an algorithm bundle for screen=true (one of "
            f"{bundles}). Fix: set baseline=grpo."
        )
    arms: dict[str, list[str]] = {baseline: [f"algorithm={baseline}"]}
    selected: dict[str, set[str]] = {kind: set() for kind in SCREENED_KINDS}
    updates: dict[str, BundleUpdate] = {}
    for bundle, choices, update in _bundle_choices(tuple(bundles), tuple(overrides)):
        for kind, name in choices:
            selected[kind].add(name)
        updates[bundle] = update
        args = [f"algorithm={bundle}"]
        if update.stages_per_turn and update.mini_batch_size:
            args.append(WHOLE_BATCH)
        arms.setdefault(bundle, args)
    base = updates[baseline]
    epochs = {arm: updates[arm].policy_epochs for arm in arms}
    for kind in SCREENED_KINDS:
        for entry in ALL[kind]:
            if entry.name in selected[kind]:
                continue
            args = [f"algorithm={baseline}", f"{kind}={entry.name}"]
            label = f"{kind}-{entry.name}"
            epochs[label] = base.policy_epochs
            if getattr(entry.config_cls, "acts_off_policy_only", False):
                args.append("optim.policy_epochs=2")
                epochs[label] = 2
            if getattr(entry.config_cls, "stages_per_turn", False) and base.mini_batch_size:
                args.append(WHOLE_BATCH)
            arms[label] = args
    if matched:  # the baseline at each budget of epochs an arm takes, right after it
        more = sorted({n for n in epochs.values() if n > base.policy_epochs})
        refs = {
            reference_label(baseline, n): [f"algorithm={baseline}", f"optim.policy_epochs={n}"]
            for n in more
        }
        arms = {baseline: arms.pop(baseline), **refs, **arms}
    return arms


def selected_arms(cfg: StudyConfig) -> dict[str, list[str]]:
    """The arms ``only_arms`` keeps, the baseline first, in the study's order.

    Raises:
        SystemExit: status 2, naming the study's arms, when ``only_arms`` names one it lacks (with
            screen=true, an arm per registered method is known only now).
    """
    unknown = [a for a in cfg.only_arms if a not in cfg.arms]
    if unknown:
        print(
            f"[only_arms] got {unknown}; expected arms of study {cfg.name!r}: "
            f"{', '.join(cfg.arms)}. Fix: name those (seekrl-study study={cfg.name} dry_run=true "
            "lists them).",
            file=sys.stderr,
        )
        raise SystemExit(2)
    keep = {cfg.baseline, *cfg.only_arms}
    return {arm: args for arm, args in cfg.arms.items() if arm in keep}


#: train config keys that name an arm, not what it trains
LABEL_KEYS = ("algorithm",)


def inert_reason(arm: Any, baseline: Any) -> str | None:
    """Why the train config ``arm`` trains exactly as ``baseline`` does, from the two configs
    alone, or None when it may not (module docstring, "Inert at these settings").

    Every section in which the two differ (``advantage``, ``loss``, ``sampler``, ...; the bundle's
    label ``algorithm`` aside) must be a component whose config class declares a ``screen_inert``
    rule (:mod:`framework.config.inert`) that says its differences change no update at ``arm``'s
    settings; a difference anywhere else (``optim``, ``reward``, a component without a rule, a rule
    that says None) leaves the arm to be trained. The reasons are joined, section by section."""
    from omegaconf import OmegaConf

    a = config_leaves(OmegaConf.to_container(OmegaConf.structured(arm)))
    b = config_leaves(OmegaConf.to_container(OmegaConf.structured(baseline)))
    missing = object()
    keys = sorted(
        k
        for k in a.keys() | b.keys()
        if k.split(".")[0] not in LABEL_KEYS and a.get(k, missing) != b.get(k, missing)
    )
    if not keys:
        return "its train config is the baseline's"
    reasons = []
    for name in dict.fromkeys(k.split(".")[0] for k in keys):
        section = getattr(arm, name, None)
        rule = declared_rule(type(section)) if is_dataclass(section) else None
        why = rule(section, arm, baseline) if rule is not None else None
        if why is None:
            return None
        reasons.append(f"{name}={getattr(section, 'name', '?')}: {why}")
    return "; ".join(reasons)


def with_inert_arms(cfg: StudyConfig) -> StudyConfig:
    """``cfg`` with ``inert_arms`` filled for a screen: every arm whose train config the
    components' rules show to train exactly as the baseline's
    (:func:`framework.study.arms.inert_reason`), with why; the study lists them and trains none
    of them. Said in the study's log. An arm whose config does not compose is left to train (its
    run fails with the config error and the study reports it)."""
    from framework.cli.app import load_config

    def composed(arm: str) -> Any:
        try:
            return load_config("train", [*cfg.overrides, *cfg.arms[arm], *STUDY_TRAIN_ARGS])
        except (Exception, SystemExit):
            return None

    base = composed(cfg.baseline)
    found: dict[str, str] = {}
    for arm in cfg.arms:
        if base is None or arm == cfg.baseline or arm in cfg.inert_arms:
            continue
        arm_cfg = composed(arm)
        if arm_cfg is not None and (why := inert_reason(arm_cfg, base)):
            found[arm] = why
    inert = {**found, **{a: why for a, why in cfg.inert_arms.items() if a in cfg.arms}}
    if inert:
        print(
            f"seekrl-study: {len(inert)} arm(s) inert at these settings, not trained (their runs "
            "would be the baseline's; the table lists them with the reason):\n"
            + "\n".join(f"  {arm:<16} {why}" for arm, why in inert.items()),
            flush=True,
        )
    return replace(cfg, inert_arms=inert)


def study_jobs(cfg: StudyConfig) -> list[tuple[str, int]]:
    """The study's (arm, seed) runs in the order they are made: seed by seed, every arm of a
    seed before the next seed, so that a study stopped part way has comparable arms (the same
    seeds done) rather than one arm's seeds and none of the next; a replicated baseline's further
    seeds (``baseline_seeds``) right after its first run, so that the noise band they give is
    there before the methods' runs; no run of an arm in ``inert_arms``."""
    inert = cfg.inert_arms or {}
    extra = [s for s in cfg.arm_seeds(cfg.baseline) if s not in cfg.seeds]
    jobs: list[tuple[str, int]] = []
    for i, seed in enumerate(cfg.seeds):
        for arm in cfg.arms:
            if arm in inert:
                continue
            jobs.append((arm, seed))
            if i == 0 and arm == cfg.baseline:
                jobs += [(arm, s) for s in extra]
    return jobs
