"""The registries' declared call signatures match the built-ins, and the table of docs/components.md
matches both."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from framework import DISTRIBUTION
from framework.registry import ALL, Registry, load_components

REPO = Path(__file__).resolve().parents[3]


def load_tool(name: str) -> Any:
    """The script ``tools/<name>.py`` as a module (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tool() -> Any:
    return load_tool("registry_table")


def _builtins(reg: Registry) -> list[Any]:
    load_components(plugins=False)
    return [e for e in reg if e.source == DISTRIBUTION]


def _targets(group: str) -> list[Any]:
    return [e.target for e in _builtins(ALL[group])]


def _declared(signature: str) -> tuple[list[tuple[str, str, bool]], str | None]:
    """``([(name, 'positional' | 'keyword', has_default)], return)`` of ``name(...) -> R``."""
    fn = ast.parse(f"def {signature}: ...").body[0]
    a = fn.args
    positional = a.posonlyargs + a.args
    n_plain = len(positional) - len(a.defaults)
    params = [(p.arg, "positional", i >= n_plain) for i, p in enumerate(positional)]
    params += [
        (p.arg, "keyword", d is not None) for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)
    ]
    return params, ast.unparse(fn.returns) if fn.returns else None


def _actual(target: Any, *, method: bool = False) -> list[tuple[str, str, bool]]:
    params = list(inspect.signature(target).parameters.values())
    if method:
        params = params[1:]  # self
    kinds = {inspect.Parameter.KEYWORD_ONLY: "keyword", inspect.Parameter.VAR_KEYWORD: "**"}
    return [
        (p.name, kinds.get(p.kind, "positional"), p.default is not inspect.Parameter.empty)
        for p in params
    ]


def _normalised(annotation: str) -> str:
    """``Tensor[N, L]`` (a shape in the docs) and ``torch.Tensor`` are both ``Tensor``."""
    return re.sub(r"Tensor\[[^\]]*\]", "Tensor", annotation.replace("torch.", ""))


def _check_call(where: str, declared: str, targets: list[Any], *, method: bool = False) -> None:
    """Every built-in accepts the declared call, and the declaration names what they all take."""
    params, returns = _declared(declared)
    names = {name for name, _, _ in params}
    actual = {t: _actual(t, method=method) for t in targets}
    for target, have in actual.items():
        taken = {name: (kind, default) for name, kind, default in have}
        for name, kind, default in params:
            assert taken.get(name) == (kind, default), (
                f"{where}: {target} takes {name!r} as {taken.get(name)}; declared {(kind, default)}"
            )
        positional = [n for n, k, _ in have if k == "positional"]
        assert positional[: len(params)] == [n for n, k, _ in params if k == "positional"], where
        required = [n for n, k, d in have if n not in names and not d and k != "**"]
        assert not required, f"{where}: {target} also requires {required}"
        hint = None if inspect.isclass(target) else target.__annotations__.get("return")
        if returns and hint:  # a declared union (``A | B``): each built-in returns some of it
            declared_types = {_normalised(r.strip()) for r in returns.split("|")}
            hinted = {_normalised(h.strip()) for h in str(hint).split("|")}
            assert hinted <= declared_types, f"{where}: returns {hint}"
    shared = set.intersection(*({n for n, k, _ in have if k != "**"} for have in actual.values()))
    assert not shared - names, (
        f"{where}: every built-in takes {sorted(shared - names)}; declare them"
    )


@pytest.mark.parametrize("group", list(ALL))
def test_declared_signature_matches_the_builtins(group):
    reg = ALL[group]
    targets = _targets(group)
    assert targets, f"{group}: no built-in to check the declaration against"
    assert re.match(r"^(fn|cls)\(", reg.signature), reg.signature
    is_class = reg.signature.startswith("cls(")
    assert all(inspect.isclass(t) == is_class for t in targets), group
    _check_call(f"{group} signature", reg.signature.replace("fn(", "f(", 1), targets)
    assert bool(reg.methods) == is_class, f"{group}: a class kind lists the methods it offers"
    for method in reg.methods:
        name = method.split("(")[0]
        for target in targets:
            assert callable(getattr(target, name, None)), f"{target} lacks {name}"
        _check_call(f"{group}.{name}", method, [getattr(t, name) for t in targets], method=True)


@pytest.mark.parametrize("group", list(ALL))
def test_builtin_configs_subclass_the_declared_base(group):
    module, _, name = ALL[group].config_base.partition(":")
    base = getattr(importlib.import_module(module), name)
    for entry in _builtins(ALL[group]):
        assert issubclass(entry.config_cls, base), f"{group}.{entry.name}: {entry.config_cls}"


def test_check_catches_an_undeclared_shared_parameter():
    # the README once said ``cls(*, cfg)`` for the rollout backends, which also take model/tokenizer
    with pytest.raises(AssertionError, match="declare them"):
        _check_call("rollout", "cls(*, cfg)", _targets("rollout"))
    # ... and ``fn(split, *, cfg) -> list[dict]`` for the datasets, which return QAItem rows
    with pytest.raises(AssertionError, match="returns"):
        _check_call("dataset", "f(split, *, cfg) -> list[dict]", _targets("dataset"))
    with pytest.raises(AssertionError, match="takes 'seed'"):
        _check_call("sampler", "cls(questions, *, cfg, seed)", _targets("sampler"))


def test_components_page_table_is_generated_from_the_registries():
    tool = _tool()
    page = (REPO / "docs" / "components.md").read_text(encoding="utf-8")
    assert tool.page_table(page) == tool.render(), (
        "docs/components.md's registry table is out of date. Fix: python3 tools/registry_table.py"
    )


def test_table_has_one_row_per_registry_with_its_builtins():
    table = _tool().render()
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert [row.split("`")[3] for row in rows] == list(ALL)
    judges = next(row for row in rows if row.startswith("| `JUDGES`"))
    assert "`cls(*, cfg, backend=None)`" in judges and "`llm`, `rule`" in judges
    datasets = next(row for row in rows if row.startswith("| `DATASETS`"))
    assert "-> list[QAItem]`" in datasets
    assert "`cls(*, cfg, model=None, tokenizer=None)`" in table
    assert "`RetrieverConfigBase` from `framework.retrieval.types`" in table
    # the trainer reads a loss's aggregation from its config base, with no fallback
    losses = next(row for row in rows if row.startswith("| `POLICY_LOSSES`"))
    assert "`PolicyLossConfig`" in losses
    assert "`PolicyLossConfig` from `framework.algorithms.losses`" in table
