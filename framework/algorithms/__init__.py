"""Pure tensor functions of the GRPO family, one module per method, by kind: ``advantages/``,
``losses/`` (with the KL estimators), ``rewards/`` (group shaping) and ``stats/`` (group statistics,
aggregation) that they share.

Only torch and :mod:`framework.types` are imported here (plus the registries the functions are
registered in).
"""
