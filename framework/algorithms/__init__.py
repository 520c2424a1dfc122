"""Pure tensor functions of the GRPO family: group statistics, advantages, losses, KL estimators.

Only torch and :mod:`framework.types` are imported here (plus the registries the functions are
registered in).
"""
