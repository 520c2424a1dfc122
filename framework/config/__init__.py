"""Typed configuration: component base class, problems and validation."""

from framework.problems import (
    ConfigError,
    Problem,
    check,
    check_choice,
    check_folder,
    check_range,
)
from framework.types import ComponentConfig, option

__all__ = [
    "ComponentConfig",
    "ConfigError",
    "Problem",
    "check",
    "check_choice",
    "check_folder",
    "check_range",
    "option",
]
