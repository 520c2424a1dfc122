"""Typed configuration: component base class, problems and validation."""

from framework.config.component import ComponentConfig
from framework.config.problems import ConfigError, Problem, check, check_choice, check_range

__all__ = ["ComponentConfig", "ConfigError", "Problem", "check", "check_choice", "check_range"]
