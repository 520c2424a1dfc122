"""What a training run records beside its logs: the resolved config and the versions it ran with."""

from __future__ import annotations

import json
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from framework.training.precision import cpu_name

#: distributions whose versions are saved with every run
VERSIONED = (
    "seekrl",
    "torch",
    "lightning",
    "transformers",
    "hydra-core",
    "faiss-cpu",
    "sentence-transformers",
    "bm25s",
    "peft",
    "vllm",
)


def versions(trainer: Any = None) -> dict[str, str]:
    """Python, platform, CPU, the precision a run uses (and why) and the versions of the packages a
    run depends on."""
    out = {"python": platform.python_version(), "platform": platform.platform(), "cpu": cpu_name()}
    commit = git_commit()
    if commit:
        out["git_commit"] = commit
    if trainer is not None:
        choice = trainer.precision_choice()
        out |= {"precision": choice.precision, "precision_reason": choice.reason}
    for dist in VERSIONED:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_commit() -> str | None:
    """The checkout's commit (with ``-dirty`` when it has uncommitted changes), or None outside git."""
    import subprocess

    def git(*args: str) -> subprocess.CompletedProcess:
        here = Path(__file__).resolve().parent
        return subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=10)

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        if head.returncode != 0:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty else "")


def save_run_info(cfg: Any, run_dir: Path) -> None:
    """The resolved config (``cfg``: an app schema with a ``trainer``) and the package versions,
    beside the logs."""
    from omegaconf import OmegaConf

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    (run_dir / "versions.json").write_text(json.dumps(versions(cfg.trainer), indent=2) + "\n")
