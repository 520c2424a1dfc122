"""Behaviour fixed across refactors: for every shipped algorithm preset (and GRPO with a KL term,
and with two policy epochs over small micro-batches), one seeded :func:`rl_step` of the tiny LM on
scripted rollouts gives the rewards, advantages, loss figures and the gradients of every optimiser step
recorded in ``step_regression.json``.

The figures were recorded before the rollout batch was rebuilt as one object (issue 37) and must not
move when the wiring changes. Regenerate them only for an intended change of behaviour, and say why
in the commit: ``SEEKRL_REGEN_STEP_REGRESSION=1 python3 -m pytest
tests/unit/training/test_step_regression.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from framework.cli.app import load_config
from framework.data.schema import QAItem
from framework.rl.step import StepParts, rl_step
from framework.training.schedule import optimizer_and_schedule
from framework.types import GroupRequest
from tests.unit.rollout.fakes import EOS, search_call
from tests.unit.training.test_step import ANSWER, SEARCH, ScriptedLoop, tiny_lm

GOLDEN = Path(__file__).with_name("step_regression.json")
REGEN = os.environ.get("SEEKRL_REGEN_STEP_REGRESSION") == "1"
REPO = Path(__file__).resolve().parents[3]
PRESETS = sorted(p.stem for p in (REPO / "conf" / "algorithm").glob("*.yaml"))
#: further cases beside the presets: the KL term against a frozen reference, several micro-batches
#: and policy epochs (the loss aggregation and the old-log-prob ratio away from 1)
EXTRA = {
    "grpo+kl": ["algorithm=grpo", "kl.coef=0.05", "optim.policy_epochs=2"],
    "grpo+epochs": ["algorithm=grpo", "optim.policy_epochs=2", "optim.micro_batch_size=3"],
    # PPO mini-batches (issue 74): the step's groups split over optimiser steps, off policy after
    # the first
    "grpo+minibatches": ["algorithm=grpo", "optim.mini_batch_size=4", "optim.micro_batch_size=3"],
}
CASES = {p: [f"algorithm={p}"] for p in PRESETS} | EXTRA
#: cases run with the tiny LM's output layer scaled by this factor. HAPO standardises the
#: log-entropies of the trained tokens; the tiny LM's near-uniform outputs (every entropy within
#: 5.553-5.555 nats) make that spread 1e4 times smaller than the values, so fp32 rounding of another
#: CPU's kernels moved HAPO's figures 16 times the tolerance (torch's default kernels against AVX2
#: ones; it failed CI on an AVX2-only EPYC). Scaled by 30, the entropies spread over 0.2-3.4 nats
#: and the same two kernel sets move it 0.05 times the tolerance, as for every other case (much
#: sharper outputs bring near-zero entropies, whose logs are rounding noise again).
LOGIT_SCALE = {"hapo": 30.0}

DATASET = [
    QAItem(
        "q0",
        "Who directed Jaws?",
        ("Steven Spielberg",),
        (("Jaws", "Jaws (film)"), ("Steven Spielberg", "Spielberg")),
        2,
        ("p1", "p2"),
        "synth",
    ),
    QAItem(
        "q1",
        "Where was the director of Jaws born?",
        ("Cincinnati",),
        (("Jaws",), ("Steven Spielberg",), ("Cincinnati",)),
        3,
        ("p1", "p2", "p3"),
        "synth",
    ),
]

THINK = "<think>{}</think>"
#: per question four rollouts: right after two searches, wrong with entities in its thinking,
#: wrong after one search and no entities, right at once
SCRIPTS = [
    [SEARCH, THINK.format("Jaws") + search_call("Spielberg"), ANSWER.format("Steven Spielberg")],
    [THINK.format("Jaws by Spielberg") + ANSWER.format("George Lucas")[len("<think>so</think>") :]],
    [SEARCH, ANSWER.format("Boston")],
    [ANSWER.format("Steven Spielberg")],
    [SEARCH, search_call("Steven Spielberg born"), ANSWER.format("Cincinnati")],
    [THINK.format("Jaws, Steven Spielberg") + "<answer>Ohio</answer>"],
    [search_call("Cincinnati"), ANSWER.format("Cincinnati, Ohio")],
    [ANSWER.format("Los Angeles")],
]
GROUPS = [GroupRequest(0, 4), GroupRequest(1, 4)]


def run_case(overrides: list[str], logit_scale: float = 1.0) -> dict[str, Any]:
    """One step of ``overrides`` (the tiny LM's output layer times ``logit_scale``); what it
    computed, rounded for JSON."""
    cfg = load_config("train", ["optim.lr=1e-2", *overrides])
    torch.manual_seed(0)
    policy = tiny_lm().train()
    with torch.no_grad():
        policy.lm_head.weight.mul_(logit_scale)
    parts = StepParts.of(cfg, policy, ScriptedLoop([SCRIPTS]), EOS)
    opt, sched = optimizer_and_schedule(policy, cfg.optim, 1)
    grads: list[list[list[float]]] = []  # per optimiser step, per parameter: sum, norm, 3 entries

    def gradients(optimizer, args, kwargs) -> None:
        grads.append([])
        for p in policy.parameters():
            g = torch.zeros_like(p) if p.grad is None else p.grad
            grads[-1].append([float(g.sum()), float(g.norm()), float(g.flatten()[:3].sum())])

    opt.register_step_pre_hook(gradients)
    result = rl_step(parts, GROUPS, DATASET, opt, sched)
    losses = {k: v for k, v in result.figures.items() if k.startswith("loss/")}
    rollout = {
        k: v
        for k, v in result.figures.items()
        if k.startswith("rollout/") and "tokens" not in k and "length" not in k
    }
    return {
        "rewards": result.scores.total.tolist(),
        "components": {k: v.tolist() for k, v in sorted(result.scores.components.items())},
        "advantages": result.rollout_advantages().tolist(),
        "advantage_sum": float(result.advantage_values().sum()),
        "losses": dict(sorted(losses.items())),
        "rollout": dict(sorted(rollout.items())),
        "gradients": grads,
    }


#: the mini-batch case's second mini-batch runs after an optimiser step, which carries the kernels'
#: last-bit differences between CPUs into its gradients (1.1e-4 relative on a Zen 4 against the
#: recording Xeon): a looser relative tolerance there, the others unchanged
REL = {"grpo+minibatches": 5e-4}


def _close(got: Any, want: Any, where: str) -> None:
    if isinstance(want, dict):
        assert set(got) == set(want), f"{where}: keys {sorted(set(got) ^ set(want))} differ"
        for k in want:
            _close(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert len(got) == len(want), f"{where}: length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _close(g, w, f"{where}[{i}]")
    else:
        rel = REL.get(where.split(".")[0], 1e-4)
        assert got == pytest.approx(want, rel=rel, abs=1e-6), f"{where}: {got} != {want}"


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    if REGEN:
        data = {name: run_case(args, LOGIT_SCALE.get(name, 1.0)) for name, args in CASES.items()}
        GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return json.loads(GOLDEN.read_text())


def test_every_preset_has_a_recorded_step(golden: dict[str, Any]):
    assert set(golden) == set(CASES), "a preset without a recorded step: regenerate (see above)"


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_step_computes_what_it_computed_before(name: str, golden: dict[str, Any]):
    got = run_case(CASES[name], LOGIT_SCALE.get(name, 1.0))
    want = golden[name]
    # the scripts give every case rewards that differ within a group, so the step trains
    assert any(abs(a) > 0 for a in want["advantages"]) or name == "placebo", name
    assert any(g[1] > 0 for g in want["gradients"][0]), name
    _close(got, want, name)
