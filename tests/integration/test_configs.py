"""Every shipped config composes and validates: apps, every group option, every experiment job."""

from __future__ import annotations

import itertools

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from framework.cli.app import APPS, load_config
from framework.config.compose import group_options
from framework.paths import config_dir
from framework.registry import ADVANTAGES, POLICY_LOSSES, load_components
from framework.rl.inputs import augmenters_providing

load_components(plugins=False)

CONF = config_dir()
TRAIN_GROUPS = (
    "advantage",
    "loss",
    "kl",
    "reward",
    "sampler",
    "augment",
    "algorithm",
    "trainer",
    "logger",
    "debug",
)


def _experiments():
    return sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


def _sweep_jobs(experiment: str) -> list[list[str]]:
    """The override lists a Hydra basic-sweeper multirun of ``experiment`` launches (for an
    Optuna search's intervals: both ends)."""
    raw = OmegaConf.load(CONF / "experiment" / f"{experiment}.yaml")
    params = OmegaConf.select(raw, "hydra.sweeper.params") or {}
    parser = OverridesParser.create()
    axes = []
    for key, value in params.items():
        (override,) = parser.parse_overrides([f"{key}={value}"])
        if override.is_interval_sweep():
            values = [override.value().start, override.value().end]
        elif override.is_sweep_override():
            values = list(override.sweep_string_iterator())
        else:
            values = [value]
        axes.append([f"{key}={v}" for v in values])
    return [list(combo) for combo in itertools.product(*axes)] if axes else [[]]


def required_args(app: str, tmp_path) -> list[str]:
    """What an app has no default for: seekrl-export's checkpoint (a run directory with one)."""
    if app != "export":
        return []
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "step-000001.ckpt").write_bytes(b"")
    (tmp_path / "config.yaml").write_text("{}\n")
    return [f"checkpoint={tmp_path}"]


@pytest.mark.parametrize("app", sorted(APPS))
def test_app_default_config_validates(app, tmp_path):
    assert isinstance(load_config(app, required_args(app, tmp_path)), APPS[app])


@pytest.mark.parametrize("group,option", [(g, o) for g in TRAIN_GROUPS for o in group_options(g)])
def test_every_group_option_validates(group, option):
    overrides = [f"{group}={option}"]
    two_passes = group == "loss" and option in POLICY_LOSSES
    if two_passes and POLICY_LOSSES.get(option).config_cls.acts_off_policy_only:
        overrides.append("optim.policy_epochs=2")  # refused with one pass (its own test)
    if group == "advantage" and option in ADVANTAGES:
        # an input that an augmenter makes needs it selected (refused otherwise: its own test)
        for name in ADVANTAGES.get(option).config_cls.requires:
            overrides += [f"augment={a}" for a in augmenters_providing(name)[:1]]
    cfg = load_config("train", list(dict.fromkeys(overrides)))
    if group in ("advantage", "loss", "kl", "reward", "sampler", "augment", "rollout", "retriever"):
        # a preset (e.g. advantage/dr_grpo) names the registered component it extends
        assert getattr(cfg, group).name in group_options(group)


def test_group_options_include_registry_entries_and_presets():
    assert {"grpo", "rloo", "reinforce_pp_baseline", "dr_grpo"} <= set(group_options("advantage"))
    assert {"ppo_clip", "gspo", "dr_grpo"} <= set(group_options("loss"))
    assert {"grpo", "e_grpo", "dr_grpo"} <= set(group_options("algorithm"))


def _passed_values(experiment: str, tmp_path) -> list[str]:
    """What a user passes to ``experiment`` (the values it requires, the files it reads that a
    clean clone lacks), as stand-ins: none for most experiments."""
    from tests.integration.test_search_r1_recipes import cpu_values, required_values

    if experiment == "search_r1":
        return required_values(tmp_path)
    if experiment == "search_r1_cpu":  # the files seekrl-synth export_search_r1 writes
        return cpu_values(tmp_path)
    return []


@pytest.mark.parametrize("experiment", _experiments())
def test_every_experiment_job_validates(experiment, tmp_path):
    jobs = _sweep_jobs(experiment)
    assert jobs, experiment
    passed = _passed_values(experiment, tmp_path)
    for job in jobs:
        cfg = load_config("train", [f"experiment={experiment}", *passed, *job])
        assert cfg.algorithm in ("grpo", "e_grpo", "dr_grpo")


def test_experiment_headers_name_their_run_command():
    for path in (CONF / "experiment").glob("*.yaml"):
        head = path.read_text().splitlines()[:6]
        assert any(f"experiment={path.stem}" in line and line.startswith("#") for line in head), (
            path
        )


def test_alpha_sweep_expands_to_the_papers_values():
    jobs = _sweep_jobs("alpha_sweep")
    alphas = [load_config("train", ["experiment=alpha_sweep", *j]).reward.alpha for j in jobs]
    assert alphas == [0.0, 0.1, 0.3, 0.5]


def test_algorithm_bundles_as_the_papers_ran_them():
    grpo = load_config("train", ["algorithm=grpo"])
    e_grpo = load_config("train", ["algorithm=e_grpo"])
    dr = load_config("train", ["algorithm=dr_grpo"])
    # E-GRPO and its GRPO arm differ only in the reward
    assert grpo.reward.name == "outcome" and e_grpo.reward.name == "e_grpo"
    assert e_grpo.reward.alpha == 0.3
    for cfg in (grpo, e_grpo):
        assert cfg.advantage.name == "grpo" and cfg.advantage.scale_by_std
        assert (cfg.loss.name, cfg.loss.clip_low, cfg.loss.clip_high) == ("ppo_clip", 0.2, 0.28)
        assert cfg.loss.agg == "seq_mean_token_mean" and cfg.kl.coef == 0.0
    assert grpo.loss == e_grpo.loss and grpo.advantage == e_grpo.advantage
    # Dr. GRPO: no std, token sum over a constant
    assert dr.advantage.name == "grpo" and not dr.advantage.scale_by_std
    assert dr.loss.agg == "token_sum_norm" and dr.loss.norm_constant > 0


def test_command_line_choice_beats_the_bundle():
    cfg = load_config("train", ["algorithm=grpo", "advantage=rloo", "loss=gspo"])
    assert cfg.advantage.name == "rloo"
    assert (cfg.loss.name, cfg.loss.clip_low, cfg.loss.clip_high) == ("gspo", 3e-4, 4e-4)


@pytest.mark.parametrize(
    ("native", "expert", "checks", "samples", "val"), [("1", 64, 8, 2, 8), ("0", 32, 0, 1, 4)]
)
def test_the_demo_sizes_follow_the_cpus_bf16(monkeypatch, native, expert, checks, samples, val):
    # scale=demo (the main job) sizes its model stages by the machine: without native bf16 (fp32)
    # half the expert questions and validation, one final-comparison sample, and no warm-start
    # check (the final comparison evaluates the warm start on the same 32 questions)
    monkeypatch.setenv("SEEKRL_NATIVE_BF16", native)
    cfg = load_config("train")
    assert cfg.warm_start.expert.questions == expert
    assert cfg.warm_start.eval_questions == checks
    assert cfg.final_eval.samples_per_question == samples
    assert cfg.final_eval.questions == 32 and cfg.trainer.val_questions == val
