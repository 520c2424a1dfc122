"""trainer.precision=auto: bf16 only where the CPU (or GPU) computes it natively."""

from __future__ import annotations

import pytest

from framework.lightning.trainer import TrainerConfig
from framework.training.precision import choose_precision, native_bf16

# flags of real CPUs (trimmed): Cascade Lake Xeon (AVX512, no bf16), Sapphire Rapids (AMX),
# Cooper Lake / Zen 4 (AVX512-BF16), an AVX2-only EPYC, an Arm Neoverse V1 (bf16)
CASCADE_LAKE = {"avx2", "avx512f", "avx512bw", "avx512_vnni"}
SAPPHIRE_RAPIDS = CASCADE_LAKE | {"avx512_bf16", "amx_bf16", "amx_tile"}
ZEN4 = {"avx2", "avx512f", "avx512_bf16"}
EPYC_AVX2 = {"avx2", "fma", "sse4_2"}
NEOVERSE_V1 = {"fp", "asimd", "sve", "bf16", "i8mm"}


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (CASCADE_LAKE, "32-true"),
        (EPYC_AVX2, "32-true"),
        (set(), "32-true"),  # flags unreadable: the safe choice
        (SAPPHIRE_RAPIDS, "bf16-mixed"),
        (ZEN4, "bf16-mixed"),
        (NEOVERSE_V1, "bf16-mixed"),
    ],
)
def test_auto_on_cpu_follows_native_bf16(flags, expected):
    choice = choose_precision("auto", "cpu", flags=flags, cpu="test CPU")
    assert choice.precision == expected
    assert choice.reason.startswith("auto: this CPU (test CPU)")
    assert ("no native bf16" in choice.reason) == (expected == "32-true")


def test_native_flag_is_named():
    assert native_bf16(SAPPHIRE_RAPIDS) == "avx512_bf16"
    assert native_bf16(CASCADE_LAKE) is None


@pytest.mark.parametrize("explicit", ["bf16-mixed", "32-true", "bf16-true"])
def test_explicit_setting_overrides(explicit):
    for flags in (EPYC_AVX2, SAPPHIRE_RAPIDS):
        choice = choose_precision(explicit, "cpu", flags=flags, cpu="x")
        assert choice.precision == explicit
        assert "explicitly" in choice.reason


def test_auto_on_gpu():
    assert choose_precision("auto", "gpu", gpu_bf16=True).precision == "bf16-mixed"
    assert choose_precision("auto", "cuda", gpu_bf16=False).precision == "32-true"


def test_trainer_config_accepts_auto_and_resolves_it():
    t = TrainerConfig(precision="auto")
    assert t.problems() == []
    assert t.precision_choice().precision in ("32-true", "bf16-mixed")
    assert TrainerConfig(precision="fp8").problems()  # still refused


@pytest.mark.parametrize(("value", "flag"), [("0", None), ("1", "SEEKRL_NATIVE_BF16=1")])
def test_environment_overrides_this_machines_detection(monkeypatch, value, flag):
    monkeypatch.setenv("SEEKRL_NATIVE_BF16", value)
    assert native_bf16() == flag
    assert native_bf16(SAPPHIRE_RAPIDS) == "avx512_bf16"  # an injected CPU is not overridden
    choice = choose_precision("auto", "cpu", cpu="this CPU")
    assert choice.precision == ("32-true" if flag is None else "bf16-mixed")
    assert ("SEEKRL_NATIVE_BF16" in choice.reason) is True


def test_environment_override_refuses_other_values(monkeypatch):
    monkeypatch.setenv("SEEKRL_NATIVE_BF16", "yes")
    with pytest.raises(ValueError, match=r"^\[SEEKRL_NATIVE_BF16\] got 'yes'; expected 0 or 1"):
        native_bf16()


@pytest.mark.parametrize(
    ("trainer", "env", "expected"),
    [
        ({"precision": "32-true", "accelerator": "cpu"}, "1", 32),
        ({"precision": "bf16-mixed", "accelerator": "cpu"}, "0", 64),
        ({"precision": "auto", "accelerator": "cpu"}, "0", 32),
        ({"precision": "auto", "accelerator": "cpu"}, "1", 64),
        ({"precision": "32-true", "accelerator": "gpu"}, "0", 64),  # a GPU is never the slow path
        ({"precision": "auto"}, "0", 32),  # the trainer's accelerator defaults to the CPU
    ],
)
def test_bf16_or_fp32_resolver_follows_the_trainers_precision(monkeypatch, trainer, env, expected):
    from omegaconf import OmegaConf

    from framework.training.precision import register_resolvers

    monkeypatch.setenv("SEEKRL_NATIVE_BF16", env)
    register_resolvers()
    register_resolvers()  # idempotent
    cfg = OmegaConf.create({"trainer": trainer, "size": "${bf16_or_fp32:64,32}"})
    assert cfg.size == expected
