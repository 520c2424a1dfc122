"""The rollout backend a config names, built through the ``ROLLOUT_BACKENDS`` registry.

Every caller builds it here (the RL module, SFT's before/after check, ``seekrl-eval`` and the
train job's final comparison, ``seekrl-rollout``), so ``rollout=vllm`` builds the vLLM backend from
its own config wherever a policy is rolled out.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping

import torch

from framework.registry.kinds import ROLLOUT_BACKENDS
from framework.registry.protocols import RolloutBackend, Tokenizer
from framework.types import ComponentConfig


def build_backend(
    cfg: ComponentConfig,
    model: torch.nn.Module | None = None,
    tokenizer: Tokenizer | None = None,
    *,
    owns_model: bool = False,
) -> RolloutBackend:
    """The backend registered as ``cfg.name``, built with ``cfg``.

    Args:
        cfg: the ``rollout`` section (the backend's own config class).
        model: an already loaded policy (the one being trained or evaluated); the backend loads
            ``cfg.policy`` itself if None.
        tokenizer: its tokenizer.
        owns_model: the caller hands ``model`` over, so a backend that takes ``owns_model`` (the
            transformers one) may convert it in place instead of copying it; a backend without
            the option (vLLM holds its own copy of the weights) is built without it.
    """
    target = ROLLOUT_BACKENDS.get(cfg.name).target
    if owns_model and "owns_model" in _parameters(target):
        # an option of some backends only (read from the signature), not of the kind's protocol
        build: Callable[..., RolloutBackend] = target
        return build(cfg=cfg, model=model, tokenizer=tokenizer, owns_model=True)
    return ROLLOUT_BACKENDS.bind(cfg)(model=model, tokenizer=tokenizer)


def _parameters(target: Callable[..., object]) -> Mapping[str, inspect.Parameter]:
    try:
        return inspect.signature(target).parameters
    except (TypeError, ValueError):  # no signature to read: build it without the option
        return {}
