"""Every component registry of the framework, declared in one place.

Each registry's Hydra group has the same name as the config section it fills, so
``advantage=rloo`` selects the ``rloo`` entry of :data:`ADVANTAGES` and its config dataclass.

Each registry also declares how the framework calls its targets (``signature``; ``cfg`` is the
component's config dataclass, bound by :meth:`Registry.bind`), the methods of the objects that class
targets build (``methods``). The class every config of a kind derives from is declared by the
package that defines it (``POLICY_LOSSES.declare_config_base(PolicyLossConfig)``, checked when a
component registers), so nothing here names a layer above the registries.
Each registry is typed by its kind's :mod:`~framework.registry.protocols` protocol, so the type
checker checks every registered target against the signature. These declarations are the README's
registry table (``python3 tools/registry_table.py`` writes it);
``tests/unit/registry/test_registry_table.py`` checks them against the built-in components and the
README, so the table, this file and the code cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from framework.registry.core import Registry
from framework.registry.protocols import (
    AdvantageFn,
    AgentProtocolFactory,
    AugmenterFactory,
    BoundAdvantageFn,
    BoundAgentProtocolFactory,
    BoundAugmenterFactory,
    BoundDatasetFn,
    BoundHealthMonitorFactory,
    BoundInputProviderFn,
    BoundJudgeFactory,
    BoundKLFn,
    BoundPolicyLossFn,
    BoundRetrieverFactory,
    BoundRewardFn,
    BoundRolloutBackendFactory,
    BoundSamplerFactory,
    DatasetFn,
    HealthMonitorFactory,
    InputProviderFn,
    JudgeFactory,
    KLFn,
    PolicyLossFn,
    RetrieverFactory,
    RewardFn,
    RolloutBackendFactory,
    SamplerFactory,
)

#: the methods of a component whose state a checkpoint keeps (samplers, monitors, augmenters)
CHECKPOINTED = ("state_dict()", "load_state_dict(state)")

REWARDS: Registry[RewardFn, BoundRewardFn] = Registry(
    "reward",
    signature="fn(inputs: RewardInputs, *, cfg) -> Tensor[N] | RewardOutput",
)
ADVANTAGES: Registry[AdvantageFn, BoundAdvantageFn] = Registry(
    "advantage",
    signature="fn(inputs: AdvantageInputs, *, cfg) -> Tensor[N or N, L]",
)
POLICY_LOSSES: Registry[PolicyLossFn, BoundPolicyLossFn] = Registry(
    "loss",
    signature="fn(inputs: PolicyLossInputs, *, cfg) -> LossOutput",
)
KL_ESTIMATORS: Registry[KLFn, BoundKLFn] = Registry(
    "kl",
    signature="fn(logprobs, ref_logprobs, *, cfg) -> Tensor[N, L]",
)
SAMPLERS: Registry[SamplerFactory, BoundSamplerFactory] = Registry(
    "sampler",
    signature="cls(questions, seed, *, cfg)",
    methods=("next_groups() -> list[GroupRequest]", *CHECKPOINTED),
    # optional: keep_group(rewards, correct) -> bool, which groups of a step are trained;
    # observe(step, questions, rewards, correct) and state_after(state): adaptive samplers
)
RETRIEVERS: Registry[RetrieverFactory, BoundRetrieverFactory] = Registry(
    "retriever",
    signature="cls(*, cfg)",
    methods=(
        "search(queries, k) -> list[list[Hit]]",
        "document(*, doc_id=None, title=None) -> Document",
        "close()",
    ),
)
ROLLOUT_BACKENDS: Registry[RolloutBackendFactory, BoundRolloutBackendFactory] = Registry(
    "rollout",
    signature="cls(*, cfg, model=None, tokenizer=None)",
    methods=(
        "generate(sequences, max_new_tokens, stop, seeds=None) -> list[Generation]",
        "update_weights(model)",
    ),
)
DATASETS: Registry[DatasetFn, BoundDatasetFn] = Registry(
    "dataset",
    signature="fn(split, *, cfg) -> list[QAItem]",
)
JUDGES: Registry[JudgeFactory, BoundJudgeFactory] = Registry(
    "judge",
    signature="cls(*, cfg, backend=None)",
    methods=("__call__(inputs: JudgeInputs) -> list[bool]",),
)
HEALTH_MONITORS: Registry[HealthMonitorFactory, BoundHealthMonitorFactory] = Registry(
    "health_monitor",
    signature="cls(*, cfg)",
    methods=("check(step, figures, run) -> Reading", *CHECKPOINTED),
)
INPUT_PROVIDERS: Registry[InputProviderFn, BoundInputProviderFn] = Registry(
    "input",
    signature="fn(ctx: InputContext, *, cfg) -> Tensor | list | float | Any",
    # registered under the name of the input it computes; ``cfg`` is the config of the component
    # that declared the input in its ``requires`` (not selected on the command line: no group)
    config_store=None,
)

AUGMENTERS: Registry[AugmenterFactory, BoundAugmenterFactory] = Registry(
    "augment",
    signature="cls(*, cfg)",
    methods=("augment(drawn: Drawn, ctx: AugmentContext) -> Augmented", *CHECKPOINTED),
)

AGENT_PROTOCOLS: Registry[AgentProtocolFactory, BoundAgentProtocolFactory] = Registry(
    "protocol",
    signature="cls(*, cfg)",
    methods=(
        "prompt_ids(tokenizer, question) -> list[int]",
        "parse(text) -> Turn",
        "observation(obs, tokenizer) -> tuple[str, list[int]]",
    ),
    # optional: messages_ids(tokenizer, messages) -> list[int], a dataset's chat prompt rendered by
    # the protocol (agent.prompt=dataset; tool_calling adds its tools)
    # chosen by name on the agent config (``agent.protocol=search_r1``), not as a Hydra group: a
    # protocol's options are agent settings (framework.rollout.protocol.build_protocol)
    config_store=None,
)

ALL: dict[str, Registry[Any, Any]] = {
    r.group: r
    for r in (
        REWARDS,
        ADVANTAGES,
        POLICY_LOSSES,
        KL_ESTIMATORS,
        SAMPLERS,
        AUGMENTERS,
        RETRIEVERS,
        ROLLOUT_BACKENDS,
        AGENT_PROTOCOLS,
        DATASETS,
        JUDGES,
        HEALTH_MONITORS,
        INPUT_PROVIDERS,
    )
}
