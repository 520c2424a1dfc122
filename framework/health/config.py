"""The ``health`` section of the train app: which monitors watch a run, with which thresholds.

``health.monitors`` maps a registered monitor's name to its typed config (the built-in monitors with
their defaults unless the config says otherwise), so a user tunes one threshold, turns one warning
into a stop, drops a monitor or adds a plugin's (fields not given keep their defaults) from the
command line::

    seekrl-train health.monitors.reward_collapse.stop=true health.monitors.reward_collapse.drop=0.7
    seekrl-train '~health.monitors.zero_variance'
    seekrl-train '+health.monitors.my_monitor={threshold: 3}'
    seekrl-train health.enabled=false
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from framework.config import ComponentConfig, Problem, option
from framework.registry.kinds import HEALTH_MONITORS

#: the monitors a run has unless the config says otherwise (every built-in one but ``signals``,
#: the opt-in triage warning of framework/health/signals.py)
DEFAULT_MONITORS = (
    "reward_collapse",
    "entropy_collapse",
    "length_blowup",
    "tool_calls_vanish",
    "answers_vanish",
    "retrieval_empty",
    "gradient",
    "zero_variance",
)


@dataclass
class HealthConfig:
    """Training-health monitors: each logs ``health/<name>/...`` every step and, when it trips,
    warns or (``stop: true``) stops the run after writing a checkpoint."""

    enabled: bool = option(True, "false: no monitor runs")
    monitors: dict[str, Any] = option(
        default_factory=lambda: default_monitors(),
        help="monitor name -> its config (null drops it)",
    )

    def problems(self) -> list[Problem]:
        out: list[Problem] = []
        for name, fields in (self.monitors or {}).items():
            if fields is None:  # dropped with health.monitors.<name>=null
                continue

            if name not in HEALTH_MONITORS:
                out.append(
                    Problem(
                        f"monitors.{name}",
                        name,
                        f"a registered health monitor: {', '.join(HEALTH_MONITORS.names())}",
                        f"drop it ('~health.monitors.{name}') or install the plugin that provides it",
                    )
                )
                continue
            try:
                cfg = monitor_config(name, fields)
            except (TypeError, ValueError) as exc:
                known = [f.name for f in dataclasses.fields(HEALTH_MONITORS.get(name).config_cls)]
                out.append(
                    Problem(
                        f"monitors.{name}",
                        fields,
                        f"fields of {name} among {', '.join(known)}",
                        f"remove the field the error names ({str(exc).splitlines()[0]})",
                    )
                )
                continue
            out += [p.under(f"monitors.{name}") for p in cfg.problems()]
        return out


def default_monitors() -> dict[str, ComponentConfig]:
    """The built-in monitors with their default configs."""
    return {name: HEALTH_MONITORS.get(name).config_cls(name=name) for name in DEFAULT_MONITORS}


def monitor_config(name: str, fields: Any) -> ComponentConfig:
    """The typed config of monitor ``name``: ``fields`` is its config already (what the app's
    schema holds), or a mapping of fields (a plugin's monitor added with ``+health.monitors``).

    Raises:
        UnknownComponentError: ``name`` is not a registered monitor.
        TypeError: a field the monitor's config does not have.
    """
    entry = HEALTH_MONITORS.get(name)
    if isinstance(fields, ComponentConfig):
        return fields if fields.name == name else entry.config_cls(**{**vars(fields), "name": name})
    values = {k: v for k, v in dict(fields or {}).items() if k != "name"}
    return entry.config_cls(name=name, **values)


def build_monitors(cfg: HealthConfig) -> dict[str, Any]:
    """Every configured monitor, built through the registry (none when disabled)."""
    if not cfg.enabled:
        return {}
    return {
        name: HEALTH_MONITORS.bind(monitor_config(name, fields))()
        for name, fields in (cfg.monitors or {}).items()
        if fields is not None
    }
