"""The framework's own registries and their ConfigStore nodes."""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from framework.registry import ALL, load_components

EXPECTED = {
    "reward": {"outcome", "e_grpo"},
    "advantage": {"grpo", "rloo", "reinforce_pp_baseline"},
    "loss": {"ppo_clip", "gspo"},
    "kl": {"k1", "k2", "k3"},
    "sampler": {"uniform"},
    "health_monitor": {"retrieval_empty", "gradient", "reward_collapse"},
}


def test_every_kind_declared_once():
    assert set(ALL) == {
        "reward",
        "advantage",
        "loss",
        "kl",
        "sampler",
        "augment",
        "retriever",
        "rollout",
        "protocol",
        "dataset",
        "judge",
        "health_monitor",
        "input",
    }
    assert len({id(r) for r in ALL.values()}) == len(ALL)


def test_builtins_registered_with_config_nodes():
    load_components(plugins=False)
    store = ConfigStore.instance()
    for kind, names in EXPECTED.items():
        assert names <= set(ALL[kind].names()), kind
        for name in names:
            node = store.load(f"{kind}/{name}.yaml").node
            assert node.name == name
            assert node._metadata.object_type is ALL[kind].get(name).config_cls
            assert ALL[kind].get(name).source == "seekrl"


def test_input_providers_are_looked_up_by_name_not_chosen_in_a_config():
    load_components(plugins=False)
    assert "answer_probs" in ALL["input"].names()
    assert "input" not in ConfigStore.instance().repo  # no Hydra group: not a config choice


def test_protocols_are_chosen_by_agent_protocol_not_by_a_group():
    load_components(plugins=False)
    assert {"seekrl", "search_r1"} <= set(ALL["protocol"].names())
    assert ALL["protocol"].get("seekrl").source == "seekrl"
    assert "protocol" not in ConfigStore.instance().repo  # agent.protocol=<name> selects one
