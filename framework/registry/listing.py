"""The listing of every registered component (``seekrl-components``, and the end of a train dry run):
its source package, paper, fidelity and config fields, as plain data and as text."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from framework.registry import ALL, load_components, plugins


def describe(kinds: Sequence[str] | None = None) -> dict[str, Any]:
    """Registries, plugins and their components as plain data (the listing's JSON form)."""
    load_components()
    chosen = list(kinds) if kinds else list(ALL)
    return {
        "plugins": {
            "autoload": not plugins.autoload_disabled(),
            "entry_point_group": plugins.ENTRY_POINT_GROUP,
            "loaded": [
                {"name": p.name, "distribution": p.distribution, "value": p.value}
                for p in plugins.loaded()
            ],
            "failed": [
                {
                    "name": f.name,
                    "distribution": f.distribution,
                    "error": f"{f.error_type}: {f.message}",
                }
                for f in plugins.failures()
            ],
        },
        "components": {
            kind: [
                {
                    "name": e.name,
                    "source": e.source,
                    "origin": e.origin,
                    "paper": e.config_cls.paper,
                    "fidelity": e.config_cls.fidelity,
                    "fields": [vars(f) for f in e.fields()],
                }
                for e in ALL[kind]
            ]
            for kind in chosen
        },
    }


def render(data: dict[str, Any]) -> str:
    """The listing as text: one block per kind, one line per component, one per field."""
    lines = []
    plug = data["plugins"]
    state = "on" if plug["autoload"] else "off (SEEKRL_NO_PLUGINS is set)"
    lines.append(f"plugins [{plug['entry_point_group']}]: autoload {state}")
    for p in plug["loaded"]:
        lines.append(f"  loaded  {p['name']} ({p['distribution']}) -> {p['value']}")
    for p in plug["failed"]:
        lines.append(f"  FAILED  {p['name']} ({p['distribution']}): {p['error']}")
    for kind, entries in data["components"].items():
        lines.append("")
        lines.append(f"{kind} ({len(entries)})")
        if not entries:
            lines.append("  (none registered)")
        for e in entries:
            lines.append(f"  {e['name']:<24} [{e['source']}] {e['origin']}")
            if e["paper"] or e["fidelity"]:
                lines.append(f"      ({provenance(e['paper'], e['fidelity'])})")
            for f in e["fields"]:
                help_text = f"  # {f['help']}" if f["help"] else ""
                lines.append(f"      {f['name']}: {f['type']} = {f['default']}{help_text}")
    return "\n".join(lines)


def provenance(paper: str, fidelity: str) -> str:
    """A component's paper and how closely it follows it, as the listing prints it."""
    if fidelity == "reconstructed":
        return f"RECONSTRUCTED from the abstract, not the paper's method: {paper or 'no paper'}"
    return "; ".join(x for x in (paper, fidelity and f"{fidelity} formula") if x)
