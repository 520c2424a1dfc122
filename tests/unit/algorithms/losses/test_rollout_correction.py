"""Rollout correction's pure functions on hand-built log-prob pairs: mismatch figures, TIS and MIS
weights at token and sequence level, masked tokens ignored, the loss configs' validation, and every
registered loss applying ``PolicyLossInputs.token_weights``."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from framework.algorithms.losses.base import PolicyLossConfig
from framework.algorithms.losses.ppo_clip import ClipLossConfig
from framework.algorithms.losses.rollout_correction import (
    MismatchStats,
    correction_weights,
    mismatch_figures,
    mismatch_stats,
    rollout_source_problems,
)
from framework.types import PolicyLossInputs

C = 2.0
# token ratios ρ = π_old / μ; row 0's last token is masked (its huge ratio must change nothing)
RATIOS = torch.tensor([[3.0, 0.6, 100.0], [1.5, 1.6, 1.25]], dtype=torch.float64)
MASK = torch.tensor([[True, True, False], [True, True, True]])
BEHAV = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -0.25, -1.5]])
OLD = (BEHAV.double() + RATIOS.log()).float()  # old - behav = log ρ


def k3(rho: float) -> float:
    return rho - 1.0 - math.log(rho)


def close(got, want, tol=1e-5):
    return torch.allclose(torch.as_tensor(got).double(), torch.as_tensor(want).double(), atol=tol)


# -- mismatch figures ------------------------------------------------------------------------------
def test_mismatch_figures_hand_values():
    figs = mismatch_figures(OLD, BEHAV, MASK, threshold=C)
    kls = [k3(3.0), k3(0.6), k3(1.5), k3(1.6), k3(1.25)]  # 0.9014, 0.1108, 0.0945, 0.1300, 0.0269
    assert figs["rollout_mismatch_kl_mean"] == pytest.approx(sum(kls) / 5, abs=1e-5)  # 0.2527
    assert figs["rollout_mismatch_kl_max"] == pytest.approx(k3(3.0), abs=1e-5)  # not k3(100)
    # |log ρ| > log 2: only ρ = 3 (0.6 is inside [1/2, 2]; the masked 100 does not count)
    assert figs["rollout_mismatch_frac_beyond"] == pytest.approx(1 / 5)
    assert set(figs) == {
        "rollout_mismatch_kl_mean",
        "rollout_mismatch_kl_max",
        "rollout_mismatch_frac_beyond",
    }


def test_identical_logprobs_have_no_mismatch_and_unit_weights():
    figs = mismatch_figures(OLD, OLD, MASK, threshold=C)
    assert figs["rollout_mismatch_kl_mean"] == 0.0
    assert figs["rollout_mismatch_kl_max"] == 0.0
    assert figs["rollout_mismatch_frac_beyond"] == 0.0
    for mode in ("none", "tis", "mis"):
        for level in ("token", "sequence"):
            w, changed = correction_weights(OLD, OLD, MASK, mode=mode, level=level, threshold=C)
            assert torch.equal(w, MASK.float()), (mode, level)
            assert not changed.any()


def test_no_masked_token_gives_no_figures():
    assert mismatch_figures(OLD, BEHAV, torch.zeros_like(MASK)) == {}


def test_micro_batch_stats_merge_to_the_whole_batch():
    whole = mismatch_stats(OLD, BEHAV, MASK, threshold=C).figures()
    parts = [
        mismatch_stats(OLD[i : i + 1], BEHAV[i : i + 1], MASK[i : i + 1], threshold=C)
        for i in range(2)
    ]
    merged = sum(parts, MismatchStats()).figures()
    assert merged == pytest.approx(whole)


# -- token level -----------------------------------------------------------------------------------
def test_token_tis_truncates_at_c():
    w, changed = correction_weights(OLD, BEHAV, MASK, mode="tis", level="token", threshold=C)
    # min(ρ, 2) on the trained tokens, 0 on the masked one
    assert close(w, [[2.0, 0.6, 0.0], [1.5, 1.6, 1.25]])
    assert changed.tolist() == [[True, False, False], [False, False, False]]


def test_token_mis_masks_above_c_and_keeps_the_ratio_below():
    w, changed = correction_weights(OLD, BEHAV, MASK, mode="mis", level="token", threshold=C)
    # ρ · 1[ρ <= 2]: the ratio-3 token is dropped, the others keep their ratio
    assert close(w, [[0.0, 0.6, 0.0], [1.5, 1.6, 1.25]])
    assert changed.tolist() == [[True, False, False], [False, False, False]]


def test_none_is_one_on_every_trained_token():
    w, changed = correction_weights(OLD, BEHAV, MASK, mode="none", threshold=C)
    assert torch.equal(w, MASK.float())
    assert not changed.any()


# -- sequence level --------------------------------------------------------------------------------
def test_sequence_tis_and_mis_use_the_product_over_trained_tokens():
    # row 0: 3 * 0.6 = 1.8 (the masked 100 is left out); row 1: 1.5 * 1.6 * 1.25 = 3
    w, changed = correction_weights(OLD, BEHAV, MASK, mode="tis", level="sequence", threshold=C)
    assert close(w, [[1.8, 1.8, 0.0], [2.0, 2.0, 2.0]])
    assert changed.tolist() == [[False, False, False], [True, True, True]]
    w, changed = correction_weights(OLD, BEHAV, MASK, mode="mis", level="sequence", threshold=C)
    assert close(w, [[1.8, 1.8, 0.0], [0.0, 0.0, 0.0]])
    assert changed.tolist() == [[False, False, False], [True, True, True]]


def test_correction_counts_in_the_stats():
    corr = correction_weights(OLD, BEHAV, MASK, mode="tis", level="sequence", threshold=C)
    figs = mismatch_stats(OLD, BEHAV, MASK, threshold=C, correction=corr).figures()
    assert figs["rollout_correction_frac"] == pytest.approx(3 / 5)  # row 1's three tokens
    assert figs["rollout_correction_weight_mean"] == pytest.approx((1.8 * 2 + 2.0 * 3) / 5)


def test_extreme_ratios_stay_finite():
    old = torch.tensor([[0.0, 0.0, 0.0]])
    behav = torch.tensor([[-60.0, -60.0, 0.0]])  # log ρ = 60 per token, 120 over the sequence
    mask = torch.ones(1, 3, dtype=torch.bool)
    for mode in ("tis", "mis"):
        for level in ("token", "sequence"):
            w, _ = correction_weights(old, behav, mask, mode=mode, level=level, threshold=C)
            assert torch.isfinite(w).all()
    w, _ = correction_weights(old, behav, mask, mode="tis", level="sequence", threshold=C)
    assert w.tolist() == [[2.0, 2.0, 2.0]]
    assert math.isfinite(mismatch_figures(old, behav, mask)["rollout_mismatch_kl_max"])


def test_weights_carry_no_gradient():
    old = OLD.clone().requires_grad_(True)
    w, _ = correction_weights(old, BEHAV, MASK, mode="tis", threshold=C)
    assert not w.requires_grad


def test_unknown_mode_or_level_raises():
    with pytest.raises(ValueError, match="rollout_correction"):
        correction_weights(OLD, BEHAV, MASK, mode="clip")
    with pytest.raises(ValueError, match="rollout_correction_level"):
        correction_weights(OLD, BEHAV, MASK, mode="tis", level="geometric")


# -- config ----------------------------------------------------------------------------------------
def test_config_defaults_are_off_and_valid():
    cfg = PolicyLossConfig()
    assert (cfg.rollout_correction, cfg.rollout_correction_level) == ("none", "token")
    assert cfg.rollout_correction_threshold == 2.0
    assert cfg.problems() == []
    assert (
        ClipLossConfig(rollout_correction="mis", rollout_correction_level="sequence").problems()
        == []
    )


def test_config_problems_name_each_field():
    cfg = ClipLossConfig(
        rollout_correction="clip", rollout_correction_level="geo", rollout_correction_threshold=1.0
    )
    problems = [p.under("loss") for p in cfg.problems()]
    assert [p.path for p in problems] == [
        "loss.rollout_correction",
        "loss.rollout_correction_level",
        "loss.rollout_correction_threshold",
    ]
    text = str(problems[0])
    assert text.startswith(
        "[loss.rollout_correction] got 'clip'; expected one of ['none', 'tis', 'mis']"
    )
    assert "Fix: set loss.rollout_correction to one of" in text
    assert "Fix: set loss.rollout_correction_threshold above 1" in str(problems[2])


def test_command_line_overrides_reach_the_loss_and_are_validated():
    from framework.cli.app import load_config
    from framework.config import ConfigError

    cfg = load_config(
        "train", ["loss.rollout_correction=tis", "loss.rollout_correction_level=sequence"]
    )
    assert (cfg.loss.rollout_correction, cfg.loss.rollout_correction_level) == ("tis", "sequence")
    with pytest.raises(ConfigError) as info:
        load_config("train", ["loss=gspo", "loss.rollout_correction=clip"])
    assert "[loss.rollout_correction] got 'clip'" in str(info.value)


def test_generate_decoder_is_reported_for_a_correction():
    generate, loop = SimpleNamespace(decoder="generate"), SimpleNamespace(decoder="loop")
    assert rollout_source_problems("none", generate) == []
    assert rollout_source_problems("tis", loop) == []
    assert rollout_source_problems("tis", SimpleNamespace(name="vllm")) == []
    [problem] = rollout_source_problems("mis", generate)
    assert problem.path == "loss.rollout_correction"
    assert "rollout.decoder=generate" in str(problem)


# -- every registered loss applies token_weights ---------------------------------------------------
def _loss_inputs(weights=None):
    gen = torch.Generator().manual_seed(0)
    logp = (-torch.rand(4, 5, generator=gen) - 0.1).requires_grad_(True)
    return PolicyLossInputs(
        logprobs=logp,
        old_logprobs=logp.detach(),  # on policy: ratio 1
        advantages=torch.tensor([1.0, -1.0, 0.5, -0.5]),
        token_mask=torch.tensor(
            [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0]]
        ),
        group_index=torch.tensor([0, 0, 1, 1]),
        token_weights=weights,
        # what the trainer gives the losses that ask: entropies (hapo, d3s), turns (seeupo), the
        # run's progress (d3s, at its start: half of the tokens dropped)
        entropy=torch.rand(4, 5, generator=gen),
        turn_index=torch.zeros(4, 5, dtype=torch.long),
        extras={"training_progress": 0.0},
    )


def _grad(fn, inputs):
    out = fn(inputs)
    (g,) = torch.autograd.grad(out.loss, inputs.logprobs)
    return g


def test_every_registered_loss_scales_its_policy_gradient_by_the_token_weights():
    """On policy, weights w multiply each token's gradient by w: the trainer's correction reaches
    every loss the same way (a newly registered loss that ignores ``token_weights`` fails here)."""
    from framework.registry import POLICY_LOSSES, load_components

    load_components(plugins=False)
    weights = torch.tensor([[2.0, 0.5, 0.0, 1.0, 1.0]] * 4)
    names = POLICY_LOSSES.names()
    assert {"cispo", "disco", "etr", "gspo", "nsr", "ppo_clip"} <= set(names)
    for name in names:
        fn = POLICY_LOSSES.bind(POLICY_LOSSES.get(name).config_cls(name=name))
        base = _grad(fn, _loss_inputs())
        assert base.abs().sum() > 0, name
        assert torch.allclose(_grad(fn, _loss_inputs(weights)), base * weights, atol=1e-6), name


def test_the_mismatch_of_two_fp32_scorings_does_not_round_to_zero():
    # two fp32 scorings of the same weights differ by ~1e-7 per token; k3 ~ δ²/2 ~ 5e-15 must
    # survive (float32 arithmetic gives exactly 0, which would read as "no mismatch at all")
    old = torch.tensor([[-10.7707186, -2.0]])
    behav = old + torch.tensor([[2.0e-7, -4.0e-7]])
    mask = torch.ones_like(old, dtype=torch.bool)
    figures = mismatch_figures(old, behav, mask)
    delta = (old - behav).double()
    expected = ((delta**2) / 2).mean().item()
    assert figures["rollout_mismatch_kl_mean"] == pytest.approx(expected, rel=0.05)
    assert figures["rollout_mismatch_kl_max"] > 0
