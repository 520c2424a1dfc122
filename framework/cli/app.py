"""The table of apps (name -> typed schema), and the apps' way into Hydra
(:mod:`framework.config.compose`): compose, validate and run with that table."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from framework.config import compose as hydra_app
from framework.config.validate import register_required_resolver
from framework.data.datasets import SynthConfig
from framework.eval.config import EvalConfig
from framework.retrieval.config import IndexConfig, ServeConfig
from framework.retrieval.coverage import CoverageConfig
from framework.rl.config import TrainConfig
from framework.rollout.show import RolloutsConfig
from framework.sft.config import SFTConfig
from framework.study.schema import StudyConfig
from framework.training.export import ExportAppConfig
from framework.training.precision import register_resolvers

#: app name -> its schema (``conf/<app>.yaml`` lists ``<app>_schema`` first in its defaults)
APPS: dict[str, type] = {
    "train": TrainConfig,
    "eval": EvalConfig,
    "index": IndexConfig,
    "coverage": CoverageConfig,
    "synth": SynthConfig,
    "serve": ServeConfig,
    "rollouts": RolloutsConfig,
    "sft": SFTConfig,
    "study": StudyConfig,
    "export": ExportAppConfig,
}

# the config resolvers every app's config may use (``${bf16_or_fp32:A,B}``, ``${required:}``),
# registered once before anything composes; idempotent
register_resolvers()
register_required_resolver()


def prepare() -> None:
    """Register built-ins, load plugins and store the app schemas (idempotent)."""
    hydra_app.prepare(APPS)


def run_app(app: str, task: Callable[[Any], Any], argv: Sequence[str] | None = None) -> Any:
    """Compose ``conf/<app>.yaml`` with the command-line overrides, validate it, call ``task``.

    Exit status 2 with one line per problem on a configuration error.
    """
    return hydra_app.run_app(app, task, APPS, argv)


def compose(app: str, overrides: Sequence[str] = ()) -> Any:
    """The composed (untyped) config of ``app`` with ``overrides``, as the command line would build it
    (``run_dir``, where the app has one, defaults to ``runs/<app>/compose``)."""
    return hydra_app.compose(app, overrides, APPS)


def load_config(app: str, overrides: Sequence[str] = ()) -> Any:
    """The validated, typed config of ``app`` (raises ConfigError or UnknownComponentError)."""
    return hydra_app.load_config(app, overrides, APPS)
