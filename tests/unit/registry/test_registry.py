"""The generic Registry, on isolated instances."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from framework.config import ComponentConfig
from framework.registry import DuplicateComponentError, Registry, UnknownComponentError, plugins


@dataclass
class ScaleConfig(ComponentConfig):
    factor: float = field(default=2.0, metadata={"help": "multiplier"})
    label: str = "x"


class FakeStore:
    def __init__(self):
        self.calls = []

    def store(self, **kwargs):
        self.calls.append(kwargs)


def scale(x, *, cfg):
    return x * cfg.factor


def other_scale(x, *, cfg):
    return x * cfg.factor + 1


@pytest.fixture
def reg():
    return Registry("advantage", config_store=FakeStore())


def test_register_get_and_bind(reg):
    reg.register("scale", config=ScaleConfig)(scale)
    entry = reg.get("scale")
    assert entry.target is scale and entry.config_cls is ScaleConfig
    assert entry.origin.endswith("test_registry:scale")
    bound = reg.bind(ScaleConfig(name="scale", factor=3.0))
    assert bound(2) == 6.0
    assert "scale" in reg and len(reg) == 1 and reg.names() == ["scale"]


def test_registration_stores_typed_node_under_group(reg):
    reg.register("scale", config=ScaleConfig)(scale)
    (call,) = reg._store.calls
    assert call["group"] == "advantage" and call["name"] == "scale"
    assert isinstance(call["node"], ScaleConfig) and call["node"].name == "scale"
    assert call["node"].factor == 2.0


def test_isolated_registry_without_store():
    reg = Registry("reward", config_store=None)
    reg.register("scale", config=ScaleConfig)(scale)
    assert reg.names() == ["scale"]


def test_unknown_name_lists_options_and_closest_match(reg, plugin_state):
    reg.register("scale", config=ScaleConfig)(scale)
    reg.register("rloo", config=ScaleConfig)(other_scale)
    with pytest.raises(UnknownComponentError) as info:
        reg.get("rlo")
    msg = str(info.value)
    assert msg.startswith("[advantage] got 'rlo'; expected one of: rloo, scale")
    assert "(closest: 'rloo')" in msg and "Fix: use advantage=rloo" in msg
    assert info.value.__cause__ is None


def test_unknown_name_without_close_match(reg, plugin_state):
    reg.register("scale", config=ScaleConfig)(scale)
    msg = str(reg.unknown("zzzzzz"))
    assert "closest" not in msg and "expected one of: scale" in msg


def test_duplicate_name_names_both_definitions(reg):
    reg.register("scale", config=ScaleConfig)(scale)
    with pytest.raises(DuplicateComponentError) as info:
        reg.register("scale", config=ScaleConfig)(other_scale)
    msg = str(info.value)
    assert "test_registry:other_scale" in msg and "test_registry:scale " in msg
    assert "Fix: rename one of them" in msg
    assert reg.get("scale").target is scale  # the first definition stays


@pytest.mark.parametrize("bad", ["Scale", "1scale", "sc-ale", "", "a b"])
def test_bad_names_rejected(reg, bad):
    with pytest.raises(TypeError, match="lower_snake_case"):
        reg.register(bad, config=ScaleConfig)(scale)


def test_config_must_be_component_dataclass(reg):
    @dataclass
    class Plain:
        factor: float = 1.0

    with pytest.raises(TypeError, match="ComponentConfig"):
        reg.register("scale", config=Plain)(scale)
    with pytest.raises(TypeError, match="ComponentConfig"):
        reg.register("scale", config=dict)(scale)


def test_target_must_accept_cfg(reg):
    def no_cfg(x):
        return x

    with pytest.raises(TypeError, match="'cfg' parameter"):
        reg.register("scale", config=ScaleConfig)(no_cfg)


def test_fidelity_must_be_a_known_label(reg):
    @dataclass
    class Vague(ScaleConfig):
        fidelity: ClassVar[str] = "roughly"

    with pytest.raises(TypeError, match=r"fidelity 'roughly'; expected one of"):
        reg.register("scale", config=Vague)(scale)


def test_the_listing_labels_a_reconstructed_method():
    from framework.registry.listing import describe, provenance, render

    assert provenance("P, arXiv 1", "exact") == "P, arXiv 1; exact formula"
    assert provenance("P, arXiv 1", "reconstructed").startswith("RECONSTRUCTED from the abstract")
    data = describe(["advantage"])
    salt = next(e for e in data["components"]["advantage"] if e["name"] == "salt")
    assert salt["fidelity"] == "reconstructed" and "2510.20022" in salt["paper"]
    assert "RECONSTRUCTED from the abstract, not the paper's method: SALT" in render(data)
    copo = next(e for e in data["components"]["advantage"] if e["name"] == "copo")
    assert copo["fidelity"] == "partial" and "2508.04138" in copo["paper"]


def test_fields_listing(reg):
    reg.register("scale", config=ScaleConfig)(scale)
    fields = {f.name: f for f in reg.get("scale").fields()}
    assert set(fields) == {"factor", "label"}
    assert fields["factor"].default == "2.0" and fields["factor"].help == "multiplier"
    assert fields["label"].type == "str"


def test_unknown_name_chains_failed_plugin(reg, plugin_state):
    error = ImportError("missing dependency xyz")
    plugin_state.failed.append(plugins.PluginFailure("broken", "broken-dist", "m:f", error))
    with pytest.raises(UnknownComponentError) as info:
        reg.get("from_broken")
    assert info.value.__cause__ is error
    assert "'broken' (ImportError: missing dependency xyz)" in str(info.value)


def test_source_comes_from_plugin_context(reg):
    from framework.registry.core import current_source

    token = current_source.set("my-plugin-dist")
    try:
        reg.register("scale", config=ScaleConfig)(scale)
    finally:
        current_source.reset(token)
    assert reg.get("scale").source == "my-plugin-dist"
    assert reg._store.calls[0]["provider"] == "my-plugin-dist"
