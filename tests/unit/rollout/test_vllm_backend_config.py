"""The vLLM backend's checks that run without vLLM installed."""

from __future__ import annotations

from pathlib import Path

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


def test_weight_sync_and_compute_dtype_are_checked_and_memory_sync_needs_one_process():
    from framework.rollout.vllm_backend import VLLMBackendConfig

    assert VLLMBackendConfig(name="vllm").problems() == []
    assert (VLLMBackendConfig().compute_dtype, VLLMBackendConfig().weight_sync) == (
        "auto",
        "memory",
    )
    [bad] = VLLMBackendConfig(name="vllm", weight_sync="nfs").problems()
    assert bad.path == "weight_sync" and "memory" in bad.expected and "disk" in bad.expected
    [bad] = VLLMBackendConfig(name="vllm", compute_dtype="float16").problems()
    assert bad.path == "compute_dtype"
    [bad] = VLLMBackendConfig(name="vllm", tensor_parallel_size=2).problems()
    assert (bad.path, bad.got) == ("weight_sync", "memory")
    assert "rollout.weight_sync=disk" in bad.fix
    assert (
        VLLMBackendConfig(name="vllm", tensor_parallel_size=2, weight_sync="disk").problems() == []
    )


class _Engine:
    """What update_weights calls of ``vllm.LLM``: each collective_rpc's method and what it saw."""

    def __init__(self) -> None:
        self.rpcs: list[tuple[str, dict]] = []
        self.resets = 0

    def collective_rpc(self, method, kwargs):
        seen = dict(kwargs)
        if "weights_iterator" in seen:
            seen["weights_iterator"] = list(seen["weights_iterator"])
        if "weights_path" in seen:  # the folder exists while the engine reads it
            seen["files"] = sorted(p.name for p in Path(seen["weights_path"]).iterdir())
        self.rpcs.append((method, seen))

    def reset_prefix_cache(self) -> None:
        self.resets += 1


def _backend(weight_sync: str):
    from framework.rollout.vllm_backend import VLLMBackend, VLLMBackendConfig

    backend = object.__new__(VLLMBackend)  # no engine: the sync's calls are recorded instead
    backend.cfg = VLLMBackendConfig(name="vllm", weight_sync=weight_sync)
    backend.llm = _Engine()  # type: ignore[assignment]
    return backend


def test_memory_sync_hands_the_tensors_themselves_to_reload_weights(tiny_policy):
    import torch

    model = tiny_policy[0]
    backend = _backend("memory")
    backend.update_weights(model)
    [(method, seen)] = backend.llm.rpcs
    assert method == "reload_weights" and set(seen) == {"weights_iterator"}
    names = [name for name, _ in seen["weights_iterator"]]
    assert names == list(model.state_dict())
    for (_, sent), kept in zip(seen["weights_iterator"], model.state_dict().values(), strict=True):
        assert sent.data_ptr() == kept.data_ptr() and not sent.requires_grad  # no copy made
        assert sent.dtype == torch.float32  # the engine's loader casts
    assert backend.llm.resets == 1 and backend.sync_seconds["save"] == 0.0


def test_disk_sync_reloads_from_a_saved_folder_that_is_gone_afterwards(tiny_policy):
    backend = _backend("disk")
    backend.update_weights(tiny_policy[0])
    [(method, seen)] = backend.llm.rpcs
    assert method == "reload_weights" and "model.safetensors" in seen["files"]
    assert not Path(seen["weights_path"]).exists()
    assert backend.llm.resets == 1 and backend.sync_seconds["save"] > 0.0
