"""The tiny random policy, loaded once per test session (SmolLM2's tokenizer, 2 layers, seed 0)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_policy():
    """``(model, tokenizer)``: first use on a fresh machine builds the SmolLM2 cache (~20 s)."""
    from framework.rollout.policy import PolicyConfig, load_policy

    return load_policy(PolicyConfig(source="tiny"))
