"""Shared fixtures."""

from __future__ import annotations

import pytest

from framework.registry import state


@pytest.fixture
def plugin_state():
    """Plugin loader state saved and restored around a test (loaded/failed lists)."""
    saved = (state._state.attempted, list(state._state.loaded), list(state._state.failed))
    state.reset()
    yield state._state
    state._state.attempted = saved[0]
    state._state.loaded[:] = saved[1]
    state._state.failed[:] = saved[2]


class Checkout:
    """A git checkout made for a test (:func:`study_checkout`): ``git(...)`` runs git in it,
    ``commit()`` commits everything in it and returns the new commit."""

    def __init__(self, path):
        self.path = path

    def git(self, *args: str) -> str:
        import subprocess

        ident = ["-c", "user.name=test", "-c", "user.email=test@example.invalid"]
        done = subprocess.run(
            ["git", *ident, "-C", str(self.path), *args],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    def commit(self, message: str = "change") -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "--no-verify", "-m", message)
        return self.git("rev-parse", "HEAD")


@pytest.fixture
def study_checkout(tmp_path, monkeypatch):
    """A clean git checkout with one commit (``framework/code.py``, ``conf/a.yaml``,
    ``notes.md``) that seekrl-study takes for the code's checkout (its integrity checks,
    framework/study/integrity.py), so that a test does not depend on the state of the real
    one."""
    from framework.study import integrity as study_integrity

    checkout = Checkout(tmp_path / "checkout")
    for rel, text in {
        "framework/code.py": "x = 1\n",
        "conf/a.yaml": "a: 1\n",
        "notes.md": "n\n",
    }.items():
        (checkout.path / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout.path / rel).write_text(text)
    checkout.git("init", "-q")
    checkout.commit("first")
    monkeypatch.setattr(study_integrity, "code_checkout", lambda: checkout.path)
    return checkout


@pytest.fixture(autouse=True)
def _detect_bf16_from_the_cpu(monkeypatch):
    """Tests inject CPU flags themselves: a SEEKRL_NATIVE_BF16 set in the shell must not override
    them (a test that needs it sets it)."""
    monkeypatch.delenv("SEEKRL_NATIVE_BF16", raising=False)
