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
