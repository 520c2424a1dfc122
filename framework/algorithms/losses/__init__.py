"""Policy losses (``loss=<name>``) and KL estimators (``kl=<name>``), one module per method: its
config, its pure tensor functions and its registration. The kind's base config is
:class:`.base.PolicyLossConfig`; rollout correction, the KL penalty and the SFT objective sit here
too."""

from framework.algorithms.losses.base import PolicyLossConfig

__all__ = ["PolicyLossConfig"]
