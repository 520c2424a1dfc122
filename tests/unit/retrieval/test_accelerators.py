"""The guard that keeps JAX (pulled in by ``bm25s``) off the GPU the policy trains on.

JAX is not installed here, so a stand-in ``jax`` package records the environment and config it saw
at the moment ``bm25s`` imported it and ran its import-time top-k. On a machine whose JAX has CUDA,
``JAX_PLATFORMS=cpu`` at that moment is what keeps JAX from reserving 75% of the GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from framework.accelerators import JAX_CPU_ENV, keep_jax_on_cpu

FAKE_JAX = {
    "jax/__init__.py": """
        import json, os
        class _Config:
            def update(self, key, value):
                SEEN.setdefault("config", {})[key] = value
        config = _Config()
        SEEN = {"env": {k: os.environ.get(k) for k in ("JAX_PLATFORMS", "XLA_PYTHON_CLIENT_PREALLOCATE")}}
    """,
    "jax/lax.py": """
        import json, os
        import jax
        def top_k(x, k):
            jax.SEEN["top_k_env"] = os.environ.get("JAX_PLATFORMS")
            with open(os.environ["FAKE_JAX_REPORT"], "w") as f:
                json.dump(jax.SEEN, f)
            return x[:k], list(range(k))
    """,
}


def run_with_fake_jax(tmp_path: Path, code: str, env: dict[str, str]) -> dict:
    for rel, text in FAKE_JAX.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    report = tmp_path / "report.json"
    clean = {k: v for k, v in os.environ.items() if k not in JAX_CPU_ENV}
    clean |= {"PYTHONPATH": str(tmp_path), "FAKE_JAX_REPORT": str(report), **env}
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=clean, check=True)
    return json.loads(report.read_text())


def test_bm25_imports_bm25s_with_jax_pinned_to_the_cpu(tmp_path: Path) -> None:
    seen = run_with_fake_jax(
        tmp_path,
        """
        from framework.retrieval.bm25 import BM25Params, _tokenize
        _tokenize(["a query"], BM25Params())
        """,
        {},
    )
    # bm25s imported JAX and ran its import-time top-k with JAX already on the CPU
    assert seen["env"] == {"JAX_PLATFORMS": "cpu", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    assert seen["top_k_env"] == "cpu"


def test_a_jax_imported_earlier_is_pinned_through_its_config(tmp_path: Path) -> None:
    seen = run_with_fake_jax(
        tmp_path,
        """
        import jax  # before the guard: the environment came too late, its config still counts
        from framework.accelerators import import_cpu_only
        import_cpu_only("bm25s")
        """,
        {},
    )
    assert seen["env"]["JAX_PLATFORMS"] is None
    assert seen["config"] == {"jax_platforms": "cpu"}


def test_the_users_own_jax_platform_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = run_with_fake_jax(
        tmp_path,
        "from framework.accelerators import import_cpu_only; import_cpu_only('bm25s')",
        {"JAX_PLATFORMS": "cuda"},
    )
    assert seen["env"] == {"JAX_PLATFORMS": "cuda", "XLA_PYTHON_CLIENT_PREALLOCATE": None}
    assert "config" not in seen
    monkeypatch.setenv("JAX_PLATFORMS", "cuda")
    assert keep_jax_on_cpu() is False
