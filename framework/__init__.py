"""seekrl: a config-driven framework for training LLM search agents with group-relative RL.

The import package is ``framework``; the distribution is ``seekrl``. Components (rewards, advantage
estimators, policy losses, KL estimators, samplers, retrievers, rollout backends, datasets, judges)
live in the registries of :mod:`framework.registry` and are selected by name from Hydra configs.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("seekrl")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0.0.0+unknown"

DISTRIBUTION = "seekrl"
