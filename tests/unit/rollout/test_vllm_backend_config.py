"""The vLLM backend's checks that run without vLLM installed."""

from __future__ import annotations

import pytest

from framework.rollout.policy import PolicyConfig, PolicyError
from framework.rollout.vllm_backend import _checkpoint_dir


@pytest.mark.parametrize("source", ["tiny", "shape"])
def test_a_policy_without_a_checkpoint_folder_is_refused_naming_its_source(source):
    with pytest.raises(PolicyError) as err:
        _checkpoint_dir(PolicyConfig(source=source))
    assert str(err.value).startswith(
        f"[rollout.policy.source] got {source}; expected a source with saved weights (smollm2, path)"
    )
    assert "Fix: use rollout=transformers" in str(err.value)


def test_a_path_policy_is_served_from_its_folder(tmp_path):
    assert _checkpoint_dir(PolicyConfig(source="path", path=str(tmp_path))) == tmp_path
