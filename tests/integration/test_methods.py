"""Every registered method trains for real: two steps of the tiny policy through the real trainer
(agent loop, BM25 retrieval, Lightning, checkpoints) with every algorithm preset, and with every
advantage estimator and reward that no preset selects; and every preset is a valid study arm on the
learning benchmark's setting.

The random tiny model rarely answers, so the shipped rewards are mostly 0 there; the estimators
that need a signal to do anything also run under the test reward ``test_length_mod``. The toy
learning test (tests/unit/training/test_learning.py) is where each estimator and loss must learn.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framework.registry import ADVANTAGES, REWARDS, load_components
from tests.integration.test_train import REPO, _scalars_by_step, tags, train_in_process

load_components(plugins=False)
PRESETS = sorted(p.stem for p in (REPO / "conf" / "algorithm").glob("*.yaml"))
#: one fast case per kind of estimator in the default run; the rest with -m slow (CI runs both)
DEFAULT = {"gigpo", "igpo"}


def _selected(kind: str) -> set[str]:
    """Names a preset's ``override /<kind>: <name>`` selects."""
    out = set()
    for name in PRESETS:
        for line in (REPO / "conf" / "algorithm" / f"{name}.yaml").read_text().splitlines():
            if line.strip().startswith(f"- override /{kind}:"):
                out.add(line.split(":", 1)[1].strip())
    return out


def _shipped(registry) -> list[str]:
    """Names the framework itself registers; tests elsewhere in the session register their own."""
    return [e.name for e in registry if e.origin.startswith("framework.")]


def _case(args: list[str], fast: bool) -> object:
    return pytest.param(args, id=" ".join(args), marks=() if fast else (pytest.mark.slow,))


CASES = [_case([f"algorithm={p}"], p in DEFAULT) for p in PRESETS]
CASES += [
    _case([f"advantage={a}", "reward=test_length_mod"], False)
    for a in _shipped(ADVANTAGES)
    if a not in _selected("advantage")
]
CASES += [_case([f"reward={r}"], False) for r in _shipped(REWARDS) if r not in _selected("reward")]
# the opt-in triage monitor (Signals): no bundle, as it trains nothing itself
CASES += [_case(["+health.monitors.signals={}"], False)]


@pytest.mark.parametrize("overrides", CASES)
def test_every_method_trains_two_steps_of_the_tiny_policy(tmp_path: Path, overrides: list[str]):
    run = tmp_path / "run"
    train_in_process(run, *overrides, "trainer.val_at_end=false", "trainer.export_policy=false")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["stopped_by"] is None
    assert (run / "checkpoints" / "step-000002.ckpt").is_file()
    scalars = tags(run)["scalars"]
    assert {"loss/policy_loss", "loss/advantage_abs_mean", "rollout/reward"} <= scalars
    # and no health monitor fired (a warning that stops nothing counts too)
    values = _scalars_by_step(run)
    alarms = [k for k in values if k.startswith("health/") and k.endswith("/alarm")]
    assert alarms, "the health monitors logged nothing"
    assert [k for k in alarms if any(values[k].values())] == []


def test_every_registered_advantage_and_reward_is_covered():
    covered_adv = _selected("advantage") | {
        c.values[0][0].split("=")[1] for c in CASES if c.values[0][0].startswith("advantage=")
    }
    covered_rew = _selected("reward") | {
        c.values[0][0].split("=")[1] for c in CASES if c.values[0][0].startswith("reward=")
    }
    assert set(_shipped(ADVANTAGES)) <= covered_adv | {"grpo"}
    assert set(_shipped(REWARDS)) <= covered_rew


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_is_a_valid_arm_of_the_learning_benchmark(preset: str):
    # what seekrl-study does for each arm before it trains it
    from framework.cli.app import load_config

    cfg = load_config("train", ["experiment=learn_cpu", f"algorithm={preset}", "seed=1"])
    assert cfg.algorithm == preset
    assert cfg.trainer.max_steps == 32 and cfg.sampler.group_size == 8


def test_the_credit_assignment_study_preset_names_real_arms():
    from framework.cli.app import load_config

    study = load_config("study", ["study=credit_cpu", "dry_run=true"])
    assert set(study.arms) == {"grpo", "gigpo", "igpo"} and study.baseline == "grpo"
    for args in study.arms.values():
        load_config("train", [*study.overrides, *args])
