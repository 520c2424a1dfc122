"""Every component registry of the framework, declared in one place.

Each registry's Hydra group has the same name as the config section it fills, so
``advantage=rloo`` selects the ``rloo`` entry of :data:`ADVANTAGES` and its config dataclass.

Call signatures, one per kind (``cfg`` is the component's config dataclass, bound by
:meth:`Registry.bind`):

=================  ====================  =======================================================
registry           group                 signature
=================  ====================  =======================================================
REWARDS            ``reward``            ``fn(inputs: RewardInputs, *, cfg) -> Tensor[N]``
ADVANTAGES         ``advantage``         ``fn(inputs: AdvantageInputs, *, cfg) -> Tensor[N]``
POLICY_LOSSES      ``loss``              ``fn(inputs: PolicyLossInputs, *, cfg) -> LossOutput``
KL_ESTIMATORS      ``kl``                ``fn(logprobs, ref_logprobs, *, cfg) -> Tensor[N, L]``
SAMPLERS           ``sampler``           ``cls(num_questions: int, seed: int, *, cfg)``
RETRIEVERS         ``retriever``         ``cls(*, cfg)`` (search / document lookup)
ROLLOUT_BACKENDS   ``rollout``           ``cls(*, cfg)`` (batched generation)
DATASETS           ``dataset``           ``fn(split: str, *, cfg) -> list[dict]``
JUDGES             ``judge``             ``cls(*, cfg, backend=None)``; ``judge(JudgeInputs) -> list[bool]``
=================  ====================  =======================================================
"""

from __future__ import annotations

from framework.registry.core import Registry

REWARDS: Registry = Registry("reward")
ADVANTAGES: Registry = Registry("advantage")
POLICY_LOSSES: Registry = Registry("loss")
KL_ESTIMATORS: Registry = Registry("kl")
SAMPLERS: Registry = Registry("sampler")
RETRIEVERS: Registry = Registry("retriever")
ROLLOUT_BACKENDS: Registry = Registry("rollout")
DATASETS: Registry = Registry("dataset")
JUDGES: Registry = Registry("judge")

ALL: dict[str, Registry] = {
    r.group: r
    for r in (
        REWARDS,
        ADVANTAGES,
        POLICY_LOSSES,
        KL_ESTIMATORS,
        SAMPLERS,
        RETRIEVERS,
        ROLLOUT_BACKENDS,
        DATASETS,
        JUDGES,
    )
}
