"""BUILTIN_MODULES lists every module of the framework that registers components, and only those."""

from __future__ import annotations

import textwrap
from pathlib import Path

from framework.registry import BUILTIN_MODULES
from framework.registry.sources import FRAMEWORK_DIR, package_registrations, registrations_in


def _registering_modules() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for reg in package_registrations(FRAMEWORK_DIR, "framework"):
        out.setdefault(reg.module, []).append(f"{reg.group}={reg.name} ({reg.where})")
    return out


def test_every_registering_module_is_in_builtin_modules():
    found = _registering_modules()
    missing = {m: regs for m, regs in found.items() if m not in BUILTIN_MODULES}
    assert not missing, (
        f"modules that register components but are not imported by load_components(): {missing}. "
        "Fix: add them to BUILTIN_MODULES in framework/registry/__init__.py."
    )


def test_every_builtin_module_registers_something():
    stale = set(BUILTIN_MODULES) - set(_registering_modules())
    assert not stale, f"BUILTIN_MODULES lists modules that register nothing: {sorted(stale)}"
    assert len(set(BUILTIN_MODULES)) == len(BUILTIN_MODULES)


def test_scan_finds_the_known_builtins():
    # the scanner itself can fail: it must see the registrations we know of, by name and line
    found = {(r.group, r.name): r for r in package_registrations(FRAMEWORK_DIR, "framework")}
    grpo = found[("advantage", "grpo")]
    assert grpo.module == "framework.algorithms.advantages.grpo"
    assert grpo.where.startswith("framework/algorithms/advantages/grpo.py:")
    line = grpo.path.read_text().splitlines()[grpo.line - 1]
    assert 'ADVANTAGES.register("grpo"' in line
    assert {("rollout", "vllm"), ("judge", "llm"), ("dataset", "files")} <= set(found)


def test_scan_recognises_every_form_of_registration(tmp_path: Path):
    path = tmp_path / "mod.py"
    path.write_text(
        textwrap.dedent(
            """
            from framework.registry import ADVANTAGES, REWARDS as R, kinds
            import atexit

            NAME = "from_constant"

            @ADVANTAGES.register("decorated", config=C)
            def a(inputs, *, cfg): ...

            R.add("added_via_alias", a, config=C)
            kinds.KL_ESTIMATORS.register(NAME, config=C)(a)
            ADVANTAGES.register(make_name(), config=C)(a)
            atexit.register(a)
            ADVANTAGES.get("looked_up")
            """
        )
    )
    regs = registrations_in(path, "pkg.mod")
    assert [(r.group, r.name, r.module) for r in regs] == [
        ("advantage", "decorated", "pkg.mod"),
        ("reward", "added_via_alias", "pkg.mod"),
        ("kl", "from_constant", "pkg.mod"),
        ("advantage", None, "pkg.mod"),
    ]
    assert [r.line for r in regs] == [7, 10, 11, 12]


def test_module_names_of_a_package_tree(tmp_path: Path):
    (tmp_path / "sub").mkdir()
    body = 'from framework.registry import SAMPLERS\nSAMPLERS.add("alpha", f, config=C)\n'
    (tmp_path / "__init__.py").write_text(body)
    (tmp_path / "sub" / "leaf.py").write_text(body.replace("alpha", "beta"))
    (tmp_path / "quiet.py").write_text("x = 1\n")
    (tmp_path / "broken.py").write_text("SAMPLERS.add('u', f,\n")  # does not parse: skipped
    regs = {r.name: r.module for r in package_registrations(tmp_path, "pkg")}
    assert regs == {"alpha": "pkg", "beta": "pkg.sub.leaf"}
    # with a name, only the files that mention it are parsed
    assert [r.name for r in package_registrations(tmp_path, "pkg", "beta")] == ["beta"]
