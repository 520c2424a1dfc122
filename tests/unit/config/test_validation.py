"""Problems, ConfigError and validation of composed configs."""

from __future__ import annotations

import pytest

from framework.cli.app import compose, load_config
from framework.config import ConfigError, Problem, check_choice, check_range
from framework.config.validate import validate
from framework.rl.config import TrainConfig


def test_problem_format_and_reroot():
    p = Problem("clip_low", 1.5, "a number in (0, 1]", "set clip_low inside that range")
    assert (
        str(p)
        == "[clip_low] got 1.5; expected a number in (0, 1]. Fix: set clip_low inside that range."
    )
    q = p.under("loss")
    assert str(q) == (
        "[loss.clip_low] got 1.5; expected a number in (0, 1]. Fix: set loss.clip_low inside that range."
    )


def test_config_error_lists_every_problem():
    err = ConfigError([Problem("a", 1, "2", "x"), Problem("b", 3, "4", "y")])
    lines = str(err).splitlines()
    assert lines[0] == "invalid configuration (2 problems):"
    assert lines[1].strip().startswith("[a] got 1") and lines[2].strip().startswith("[b] got 3")


def test_check_helpers():
    assert check_range(0.5, "x", low=0, high=1) == []
    (p,) = check_range(0.0, "x", low=0, low_inclusive=False)
    assert p.expected == "a number > 0"
    assert check_choice("a", "m", ["a", "b"]) == []
    assert check_choice("c", "m", ["a", "b"])[0].expected == "one of ['a', 'b']"


def test_default_train_config_is_valid_and_typed():
    cfg = load_config("train")
    assert isinstance(cfg, TrainConfig)
    assert cfg.algorithm == "e_grpo" and cfg.reward.name == "e_grpo" and cfg.reward.alpha == 0.3
    assert cfg.loss.clip_low == 0.2 and cfg.loss.clip_high == 0.28
    assert cfg.loss.agg == "seq_mean_token_mean" and cfg.kl.coef == 0.0
    assert cfg.optim.lr == 2e-6
    # scale=demo (default) is minutes on a CPU; scale=paper is the paper's G = 8 x 64 questions
    assert cfg.sampler.group_size == 4 and cfg.trainer.max_steps == 4
    paper = load_config("train", ["scale=paper"])
    assert paper.sampler.group_size == 8 and paper.sampler.questions_per_step == 64
    assert paper.trainer.max_steps == 80 and paper.agent.max_tool_calls == 40


def test_all_value_problems_reported_at_once():
    with pytest.raises(ConfigError) as info:
        load_config(
            "train",
            [
                "loss.clip_low=1.5",
                "reward.alpha=-1",
                "trainer.max_steps=0",
                "optim.lr=0",
                "kl.coef=-0.1",
            ],
        )
    paths = [p.path for p in info.value.problems]
    assert sorted(paths) == sorted(
        ["loss.clip_low", "reward.alpha", "trainer.max_steps", "optim.lr", "kl.coef"]
    )
    for line in str(info.value).splitlines()[1:]:
        assert line.strip().startswith("[") and "; expected " in line and ". Fix: " in line


def test_missing_values_and_unknown_names_are_problems():
    cfg = compose("train")
    cfg.loss.name = "no_such_loss"
    cfg.seed = "???"
    with pytest.raises(ConfigError) as info:
        validate(cfg, TrainConfig)
    text = str(info.value)
    assert "[seed] got '???'; expected a value" in text
    assert "[loss.name] got 'no_such_loss'" in text and "ppo_clip" in text


def test_a_required_value_is_reported_until_one_is_passed():
    # an experiment file's `???` would not stick (merging MISSING keeps the schema default), so it
    # writes ${required:}: reported as missing, with every other problem, until a value replaces it
    from framework.config.validate import REQUIRED

    cfg = compose("train")
    cfg.agent.system_prompt = REQUIRED
    cfg.retriever.cache_dir = "${required: }"
    cfg.optim.lr = 0
    with pytest.raises(ConfigError) as info:
        validate(cfg, TrainConfig)
    assert sorted(p.path for p in info.value.problems) == [
        "agent.system_prompt",
        "optim.lr",
        "retriever.cache_dir",
    ]
    assert "[agent.system_prompt] got '???'; expected a value. Fix: pass " in str(info.value)
    cfg.agent.system_prompt = "Answer."
    cfg.retriever.cache_dir = None
    cfg.optim.lr = 1e-6
    assert validate(cfg, TrainConfig).agent.system_prompt == "Answer."


def test_cross_section_problem_logger_target():
    with pytest.raises(ConfigError, match=r"\[logger._target_\] got 'nowhere.Logger'"):
        load_config("train", ["logger._target_=nowhere.Logger"])


def test_token_sum_norm_needs_constant():
    with pytest.raises(ConfigError, match=r"\[loss.norm_constant\] got None"):
        load_config("train", ["loss.agg=token_sum_norm"])
    cfg = load_config("train", ["loss.agg=token_sum_norm", "loss.norm_constant=512"])
    assert cfg.loss.norm_constant == 512


def _package(root, name, files):
    """A package ``name`` under ``root`` whose __init__ records its import in ``imported.txt``."""
    pkg = root / name
    for rel, text in files.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return pkg


def test_module_exists_finds_submodules_without_importing_their_packages(tmp_path, monkeypatch):
    import sys

    from framework.config.app import module_exists

    record = tmp_path / "imported.txt"
    touch = f"open({str(record)!r}, 'a').write(__name__ + '\\n')\n"
    _package(
        tmp_path,
        "mx_pkg",
        {"__init__.py": touch, "sub/__init__.py": touch, "sub/leaf.py": "", "flat.py": ""},
    )
    # a package that extends its path when imported: its submodule is only found by importing it
    extra = tmp_path / "elsewhere" / "mx_ext"
    extra.mkdir(parents=True)
    (extra / "hidden.py").write_text("")
    _package(tmp_path, "mx_ext", {"__init__.py": f"__path__.append({str(extra)!r})\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("mx_pkg", "mx_pkg.sub", "mx_ext"):
        monkeypatch.delitem(sys.modules, name, raising=False)

    assert module_exists("mx_pkg.sub.leaf") and module_exists("mx_pkg.flat")
    assert not record.exists()  # neither mx_pkg nor mx_pkg.sub ran
    assert not module_exists("mx_pkg.sub.nope") and not module_exists("mx_pkg.flat.nope")
    assert not module_exists("mx_no_such_package.sub")
    assert module_exists("mx_ext.hidden")  # found the importing way
    assert module_exists("json")  # already imported (sys.modules)


@pytest.mark.slow
def test_validating_a_train_config_and_its_dry_run_do_not_import_lightning(tmp_path):
    # the logger's _target_ (lightning.pytorch.loggers.TensorBoardLogger) is checked without
    # importing Lightning, and a dry run trains nothing: seconds of every command's start
    import os
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from framework.cli.app import load_config\n"
        "from framework.cli.train import train\n"
        "cfg = load_config('train', ['dry_run=true'])\n"
        "assert cfg.logger['_target_'].startswith('lightning.pytorch.'), cfg.logger\n"
        "train(cfg)\n"
        "print('lightning:', sorted(m for m in sys.modules if m.split('.')[0] == 'lightning'))\n"
    )
    env = {**os.environ, "SEEKRL_CACHE": str(tmp_path / "cache")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert "seekrl-train: dry run" in out.stdout
    assert out.stdout.strip().endswith("lightning: []"), out.stdout[-500:]
