"""Inert at these settings: what a component's config alone shows it changes nothing.

A screen (``seekrl-study screen=true``, :mod:`framework.study.screen`) compares each method with a
baseline at one set of training settings. Some methods reduce to the baseline there exactly: a
ratio-based loss when every optimiser step is on policy (its importance ratio is 1), a pruning
rule no binary-reward advantage falls under, a sampler that is the baseline's under another name.
Training such an arm measures nothing about the method, so the screen asks each component first.

A component declares its rule as ``screen_inert`` on its config class::

    @dataclass
    class MyLossConfig(PolicyLossConfig):
        screen_inert: ClassVar[InertRule] = my_rule

    def my_rule(section, train, baseline) -> str | None: ...

``section`` is the arm's config of that component, ``train`` the arm's whole train config and
``baseline`` the baseline's. The rule returns why the section's differences from
``baseline``'s same section change no update at ``train``'s settings (a sentence for the table), or
None when they may. A rule is its class's own: it is **not inherited** (:func:`declared_rule`), since
a subclass that changes the objective (NSR on PPO-clip's config, say) must not pass for its parent.
A class that shares its parent's reasoning declares the same function again.

The helpers below are the facts rules share: whether one optimiser step per batch is taken on
policy, whether the reward is binary, the groups' fixed size, and which fields two configs differ
in. Every rule errs towards None: an arm that is not called inert is trained, and the screen's
after-the-fact check (``same_as_baseline``) still marks a run that came out the baseline's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields, is_dataclass
from typing import Any

#: a component's inert rule: ``(section, train, baseline) -> reason or None`` (module docstring)
InertRule = Callable[[Any, Any, Any], "str | None"]
#: the class attribute a component's config declares its rule under
RULE = "screen_inert"


def declared_rule(cls: type) -> InertRule | None:
    """The inert rule ``cls`` declares itself (``screen_inert`` in its own ``__dict__``), or None;
    a parent's rule is not inherited (module docstring)."""
    rule = vars(cls).get(RULE)
    if isinstance(rule, staticmethod):
        rule = rule.__func__
    return rule if callable(rule) else None


def config_leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    """A nested dict (a config as plain containers) as ``{"dotted.key": leaf}``."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(config_leaves(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: node}


def differing_fields(a: Any, b: Any, names: Sequence[str] | None = None) -> list[str]:
    """The fields (``names``, or every dataclass field of both) whose values differ between two
    configs; a field only one has counts as differing."""
    if names is None:
        names = sorted(
            {f.name for f in fields(a)} | {f.name for f in fields(b)}
            if is_dataclass(a) and is_dataclass(b)
            else set(vars(a)) | set(vars(b))
        )
    missing = object()
    return [n for n in names if getattr(a, n, missing) != getattr(b, n, missing)]


def fixed_group_size(train: Any) -> int | None:
    """The size of every group the step trains on, or None when groups may vary: an augmenter
    (``augment`` other than ``none``) adds rollouts of its own, and a sampler that sizes groups
    itself declares ``max_group_size`` (XRPO)."""
    augment = getattr(getattr(train, "augment", None), "name", "none")
    sampler = train.sampler
    if augment != "none" or getattr(sampler, "max_group_size", None) is not None:
        return None
    return int(sampler.group_size)


def single_on_policy_step(train: Any) -> str | None:
    """Why every optimiser step of ``train`` is taken on policy, with the importance ratio exactly
    1 (the update's log-probabilities are the behaviour's, detached), or None when some step is
    not: one policy epoch (``optim.policy_epochs=1``) and one mini-batch per batch
    (``optim.mini_batch_size`` 0, or at least the step's rollouts with fixed groups). A later
    epoch or mini-batch trains on rollouts of the policy before the earlier steps, off policy."""
    optim = train.optim
    if int(optim.policy_epochs) != 1:
        return None
    size = int(getattr(optim, "mini_batch_size", 0) or 0)
    if size == 0:
        return "one policy epoch, one mini-batch"
    group = fixed_group_size(train)
    if group is not None and size >= int(train.sampler.questions_per_step) * group:
        return "one policy epoch, one mini-batch"
    return None


def binary_reward(train: Any) -> bool:
    """Whether every rollout's reward is 0 or 1: the ``outcome`` reward (the answer's score, 0 on
    a format error or over budget) with a right/wrong answer metric (``em``, ``substring``; not
    the graded ``f1``), which its ``verdict_metric()`` names (None for a graded one)."""
    reward = train.reward
    verdict = getattr(reward, "verdict_metric", None)
    return reward.name == "outcome" and callable(verdict) and verdict() is not None
