"""Registries of components, and the loading of built-ins and plugins into them."""

from __future__ import annotations

import importlib

from framework.registry.core import (
    DuplicateComponentError,
    Entry,
    Registry,
    RegistryError,
    UnknownComponentError,
)
from framework.registry.kinds import (
    ADVANTAGES,
    AGENT_PROTOCOLS,
    ALL,
    AUGMENTERS,
    DATASETS,
    HEALTH_MONITORS,
    INPUT_PROVIDERS,
    JUDGES,
    KL_ESTIMATORS,
    POLICY_LOSSES,
    RETRIEVERS,
    REWARDS,
    ROLLOUT_BACKENDS,
    SAMPLERS,
)
from framework.registry.plugins import load_plugins

#: Modules whose import registers the built-in components: every module under ``framework/`` that
#: calls ``<REGISTRY>.register(...)`` or ``<REGISTRY>.add(...)`` must be listed here.
#:
#: One explicit list, not a walk of the packages, because importing is what costs: a walk would
#: import every module of the component packages (the retrieval server, plotting, Lightning) on
#: every start, or read every source file to find the ones to import, and would hide the import
#: order. Instead ``tests/unit/registry/test_builtin_modules.py`` reads the sources
#: (:mod:`framework.registry.sources`) and fails naming any registering module missing here, and
#: an unknown-name error for a component defined in such a module says to add it here.
BUILTIN_MODULES = (
    "framework.algorithms.advantages.a_grae",
    "framework.algorithms.advantages.arena",
    "framework.algorithms.advantages.copo",
    "framework.algorithms.advantages.d3s",
    "framework.algorithms.advantages.dagrpo",
    "framework.algorithms.advantages.dppo",
    "framework.algorithms.advantages.gigpo",
    "framework.algorithms.advantages.grpo",
    "framework.algorithms.advantages.hapo",
    "framework.algorithms.advantages.hgpo",
    "framework.algorithms.advantages.hiper",
    "framework.algorithms.advantages.igpo",
    "framework.algorithms.advantages.info_reasoner",
    "framework.algorithms.advantages.matchtir",
    "framework.algorithms.advantages.mc_grpo",
    "framework.algorithms.advantages.ngrpo",
    "framework.algorithms.advantages.placebo",
    "framework.algorithms.advantages.r3",
    "framework.algorithms.advantages.raft",
    "framework.algorithms.advantages.reinforce_pp",
    "framework.algorithms.advantages.rloo",
    "framework.algorithms.advantages.s_grpo",
    "framework.algorithms.advantages.salt",
    "framework.algorithms.advantages.spae",
    "framework.algorithms.advantages.spo",
    "framework.algorithms.losses.cispo",
    "framework.algorithms.losses.d3s",
    "framework.algorithms.losses.disco",
    "framework.algorithms.losses.etr",
    "framework.algorithms.losses.gspo",
    "framework.algorithms.losses.hapo",
    "framework.algorithms.losses.kl",
    "framework.algorithms.losses.llds",
    "framework.algorithms.losses.nsr",
    "framework.algorithms.losses.ppo_clip",
    "framework.algorithms.losses.sapo_search",
    "framework.algorithms.losses.seeupo",
    "framework.rewards.outcome",
    "framework.rewards.entity",
    "framework.rewards.composite",
    "framework.rewards.length",
    "framework.rewards.turn_match",
    "framework.rewards.citation",
    "framework.rewards.tiered",
    "framework.samplers.uniform",
    "framework.samplers.dynamic",
    "framework.samplers.adaptive",
    "framework.retrieval.dense",
    "framework.retrieval.bm25",
    "framework.retrieval.hybrid",
    "framework.retrieval.http",
    "framework.data.datasets",
    "framework.rollout.hf_backend",
    "framework.rollout.vllm_backend",
    "framework.rollout.seekrl_protocol",
    "framework.rollout.search_r1",
    "framework.rollout.tool_calling",
    "framework.eval.judge",
    "framework.health.monitors",
    "framework.health.signals",
    "framework.rl.answer_probs",
    "framework.rl.providers",
    "framework.rl.augment",
    "framework.rl.augmenters",
)

_loaded = False


def load_components(*, plugins: bool | None = None) -> None:
    """Import the built-in components, then the plugins (unless disabled); idempotent.

    Args:
        plugins: load entry-point plugins; ``None`` follows the environment variable
            ``SEEKRL_NO_PLUGINS`` (set to 1 to disable).
    """
    global _loaded
    if not _loaded:
        for module in BUILTIN_MODULES:
            importlib.import_module(module)
        _loaded = True

    load_plugins(enabled=plugins)


__all__ = [
    "ADVANTAGES",
    "AGENT_PROTOCOLS",
    "ALL",
    "AUGMENTERS",
    "BUILTIN_MODULES",
    "DATASETS",
    "HEALTH_MONITORS",
    "INPUT_PROVIDERS",
    "JUDGES",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "RETRIEVERS",
    "REWARDS",
    "ROLLOUT_BACKENDS",
    "SAMPLERS",
    "DuplicateComponentError",
    "Entry",
    "Registry",
    "RegistryError",
    "UnknownComponentError",
    "load_components",
]
