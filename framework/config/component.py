"""The base of every component's config dataclass."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from omegaconf import MISSING

from framework.config.problems import Problem


@dataclass
class ComponentConfig:
    """Base for the typed config of a registered component.

    ``name`` is the registry key; registration fills it in, so ``advantage=rloo`` on the command line
    selects both the code and this schema. Subclasses add fields with defaults (paper values) and may
    override :meth:`problems` to report invalid values; paths there are relative to the component
    (``clip_low``), the validator prefixes the section (``loss.clip_low``).

    ``requires`` names the inputs an advantage estimator needs beyond what every step computes
    (for example ``("answer_probs",)``): each is computed by the input provider registered under
    that name in ``INPUT_PROVIDERS`` and handed over in ``AdvantageInputs.extras``, so an
    estimator that needs something new brings its provider instead of editing the training step
    (:mod:`framework.rl.inputs`).

    ``paper`` and ``fidelity`` say where a method comes from and how closely it follows it;
    seekrl-components prints both, so a result of a reconstructed method is not read as the paper's.
    """

    requires: ClassVar[tuple[str, ...]] = ()
    #: the method's paper (for example ``"COPO, arXiv 2508.04138"``), listed by seekrl-components
    paper: ClassVar[str] = ""
    #: how the formula was obtained: ``"exact"`` (the paper's text or its authors' code),
    #: ``"partial"`` (the core exact, named pieces chosen here) or ``"reconstructed"`` (from the
    #: abstract: every constant is a choice written in the docstring); ``""`` when not stated
    fidelity: ClassVar[str] = ""

    name: str = field(default=MISSING, metadata={"help": "registry key of the component"})

    def problems(self) -> list[Problem]:
        """Every invalid value of this config (empty when valid)."""
        return []
