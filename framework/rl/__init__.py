"""Group-relative RL of a search agent: the recipe and everything only RL uses.

Read top to bottom: :mod:`framework.rl.recipe` (the train job: index, questions, warm start, RL's
sampler, Lightning module, data module, trainer and fit, export, final comparison, summary; its dry
run is :mod:`framework.rl.plan`), :mod:`framework.rl.module` (the LightningModule wrapping policy
and loss), :mod:`framework.rl.step` (one step: roll out, score, build the batch, advantages, update),
:mod:`framework.rl.batch` (the typed rollout batch, built once), :mod:`framework.rl.inputs` (inputs
components declare and registered providers compute), :mod:`framework.rl.update` (the
micro-batched policy update). SFT, its peer, is :mod:`framework.sft`; what both share to train a
policy is :mod:`framework.training`.
"""
