"""Screen v2's machinery (framework/eval/screen.py, framework/config/inert.py, issue 74): inert arms
known from the config, compute columns and matched comparisons, the replicated baseline's noise
band, and Holm / Benjamini-Hochberg adjusted readings."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from framework.cli.app import load_config
from framework.eval.records import EvalRecord, write_records
from framework.registry import load_components
from framework.study.archive import StudyArchive
from framework.study.arms import inert_reason, screen_arms, study_jobs
from framework.study.compute import arm_compute, reference_arms, run_compute, spends_more
from framework.study.runs import STUDY_TRAIN_ARGS
from framework.study.schema import StudyConfig
from framework.study.screen import (
    ALPHA,
    CANDIDATE,
    IDENTICAL,
    benjamini_hochberg,
    holm,
    noise_band,
    screen_rows,
)
from framework.study.screen_render import screen_markdown
from framework.study.summary import summarize_study
from tests.unit.study.test_screen import _Archive  # the archive fake the v1 tests read

load_components(plugins=False)

#: the screen's setting (study=screen, v1) and screen v2's (PPO mini-batches of one group)
V1 = ["experiment=learn_cpu", "sampler.start_hops=2"]
V2 = [*V1, "optim.mini_batch_size=8"]


# -- multiplicity -----------------------------------------------------------------------------------
def test_holm_and_benjamini_hochberg_by_hand():
    """p = 0.01, 0.04, 0.03, 0.005 (m = 4). Sorted: 0.005, 0.01, 0.03, 0.04.
    Holm: 4 x 0.005 = 0.02; 3 x 0.01 = 0.03; 2 x 0.03 = 0.06; 1 x 0.04 = 0.04, raised to the
    running maximum 0.06. Back in order: 0.03, 0.06, 0.06, 0.02.
    BH: 4/1 x 0.005 = 0.02; 4/2 x 0.01 = 0.02; 4/3 x 0.03 = 0.04; 4/4 x 0.04 = 0.04, each lowered
    to the running minimum from the top (none is). Back in order: 0.02, 0.04, 0.04, 0.02."""
    p = [0.01, 0.04, 0.03, 0.005]
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    # capped at 1: Holm 2 x 0.5 = 1, then max(1, 0.6); BH 2/2 x 0.6 = 0.6, then min(2 x 0.5, 0.6)
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    assert benjamini_hochberg([0.5, 0.6]) == pytest.approx([0.6, 0.6])
    # ties: Holm 2 x 0.02 = 0.04, max(0.04, 0.02); BH 0.02, min(2 x 0.02, 0.02)
    assert holm([0.02, 0.02]) == pytest.approx([0.04, 0.04])
    assert benjamini_hochberg([0.02, 0.02]) == pytest.approx([0.02, 0.02])
    # one test is adjusted to itself; no test, nothing
    assert holm([0.03]) == benjamini_hochberg([0.03]) == [0.03]
    assert holm([]) == benjamini_hochberg([]) == []


def _summary(diffs):
    """A summary whose comparisons are ``diffs`` (arm -> (diff, ci, p)), every arm seed 0."""
    figures = {"seeds": [0], "pass@1": 0.5, "pass@1_ci": [0.4, 0.6], "tool_calls": 1.0}
    return {
        "arms": {a: figures for a in ["base", *diffs]},
        "versus_baseline": {
            a: {"Pass@1": {"diff": d, "ci": ci, "p_value": p, "detectable": 0.05}}
            for a, (d, ci, p) in diffs.items()
        },
    }


def test_a_candidate_needs_holms_adjusted_p():
    """Four comparisons with raw p 0.01, 0.04, 0.03, 0.005, every interval above 0: Holm keeps
    0.03 and 0.02 (candidates) and not 0.06 (above before adjustment only); an arm identical to
    the baseline is no comparison (m stays 4); a difference below with Holm p < 0.05 reads below."""
    up = [0.01, 0.05]
    diffs = {
        "a": (0.05, up, 0.01),
        "b": (0.04, up, 0.04),
        "c": (0.04, up, 0.03),
        "d": (0.06, up, 0.005),
        "same": (0.0, [0.0, 0.0], 1.0),
    }
    recs = [EvalRecord(dataset="d", question_id="q1", sample=0, correct=True)]
    curves = {"rollout/reward": [[1, 0.5]]}
    runs = {(a, 0): {"curves": curves if a in ("base", "same") else {"x": [[1, 1.0]]}} for a in
            ["base", *diffs]}  # fmt: skip
    archive = _Archive(runs, {(a, 0): recs for a in ["base", *diffs]})
    rows = {r["arm"]: r for r in screen_rows(_summary(diffs), archive, ["base", *diffs], "base")}
    assert [rows[a]["p_holm"] for a in "abcd"] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert [rows[a]["p_bh"] for a in "abcd"] == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert rows["a"]["verdict"] == rows["d"]["verdict"] == CANDIDATE
    assert rows["b"]["verdict"] == "above the baseline before adjustment only (Holm p = 0.060)"
    assert rows["same"]["verdict"] == IDENTICAL and rows["same"]["p_holm"] is None
    assert rows["base"]["verdict"] == "baseline" and rows["base"]["p_holm"] is None
    table = screen_markdown(_cfg(), list(rows.values()))
    assert "| 0.010, 0.030, 0.020 |" in table and "| 0.040, 0.060, 0.040 |" in table
    assert "adjusted over the table's 4 comparisons against the baseline" in table
    assert f"A candidate needs Holm's p below {ALPHA:g}" in table
    # below the baseline after adjustment, and before it only
    # (Holm: 3 x 0 = 0; 2 x 0.03 = 0.06; 1 x 0.04, raised to 0.06)
    down = {
        "x": (-0.09, [-0.12, -0.06], 0.0),
        "y": (-0.04, [-0.08, -0.01], 0.04),
        "z": (-0.04, [-0.08, -0.01], 0.03),
    }
    arms = ["base", *down]
    archive = _Archive(runs, {(a, 0): recs for a in arms})
    rows = {r["arm"]: r for r in screen_rows(_summary(down), archive, arms, "base")}
    assert rows["x"]["verdict"] == "below the baseline"  # Holm: 2 x 0 = 0
    assert rows["y"]["verdict"] == "below the baseline before adjustment only (Holm p = 0.060)"


def _cfg(**kw):
    fields = dict(
        name="s",
        baseline="base",
        arms={},
        overrides=[],
        eval=SimpleNamespace(questions=4, split="validation", samples_per_question=1),
    )
    return SimpleNamespace(**{**fields, **kw})


# -- inert at these settings -----------------------------------------------------------------------
def _train(*overrides):
    return load_config("train", [*overrides, *STUDY_TRAIN_ARGS])


@pytest.mark.slow
def test_inert_rules_on_the_screens_settings():
    """v1's one on-policy step per batch: the ratio-based losses are GRPO (as its runs of CISPO and
    GSPO came out, to the bit); ETR too, by rounding only (whole-group micro-batches); NSR and
    DisCO are not. DPPO prunes nothing at groups of 8; uniform with start_hops is hop_curriculum.
    v2's two mini-batches take the ratio off 1: the losses act, DPPO and uniform stay inert."""
    base = _train(*V1, "algorithm=grpo")
    for loss in ("cispo", "gspo", "etr"):
        why = inert_reason(_train(*V1, "algorithm=grpo", f"loss={loss}"), base)
        assert why.startswith(f"loss={loss}: one policy epoch, one mini-batch per batch"), why
        assert "importance ratio is exactly 1" in why
        assert ("rounding only" in why) == (loss == "etr")
    for loss in ("nsr", "disco"):
        assert inert_reason(_train(*V1, "algorithm=grpo", f"loss={loss}"), base) is None
    # PPO-clip's own bounds do not act on policy either
    assert "ratio is exactly 1" in inert_reason(
        _train(*V1, "algorithm=grpo", "loss.clip_high=0.5"), base
    )
    dppo = inert_reason(_train(*V1, "algorithm=dppo"), base)
    assert dppo.startswith("advantage=dppo: binary rewards in groups of 8: the smallest nonzero")
    assert "1/(G-1) = 0.143" in dppo and "threshold 0.1" in dppo
    uniform = inert_reason(_train(*V1, "algorithm=grpo", "sampler=uniform"), base)
    assert uniform.startswith("sampler=uniform: with sampler.start_hops=2, uniform walks")
    # what the rules cannot know, or what acts: trained
    assert inert_reason(_train(*V1, "algorithm=dagrpo"), base) is None  # texts decide at 0.9
    assert "no two texts" in inert_reason(
        _train(*V1, "algorithm=dagrpo", "advantage.threshold=1.0"), base
    )
    for acts in (
        ["algorithm=dppo", "advantage.threshold=0.2"],  # above 1/7: prunes
        ["algorithm=dppo", "sampler.group_size=16"],  # 1/15 < 0.1: prunes (and another G)
        ["algorithm=dppo", "reward.metric=f1"],  # graded rewards
        ["algorithm=dppo", "advantage.scale_by_std=false"],  # not the baseline's GRPO
        ["algorithm=grpo", "optim.policy_epochs=2"],  # the reference: more compute
        ["algorithm=grpo", "loss=cispo", "optim.policy_epochs=2"],  # off policy
        ["algorithm=grpo", "kl.coef=0.01"],  # a section without a rule
    ):
        assert inert_reason(_train(*V1, *acts), base) is None, acts
    assert inert_reason(_train(*V1, "algorithm=grpo"), base) == "its train config is the baseline's"

    base2 = _train(*V2, "algorithm=grpo")
    assert inert_reason(_train(*V2, "algorithm=grpo", "loss=cispo"), base2) is None
    assert inert_reason(_train(*V2, "algorithm=dppo"), base2).startswith("advantage=dppo")
    assert inert_reason(_train(*V2, "algorithm=grpo", "sampler=uniform"), base2)
    # a mini-batch as large as the step's 2 x 8 rollouts is one mini-batch
    whole = ["optim.mini_batch_size=16"]
    assert inert_reason(
        _train(*V1, *whole, "algorithm=grpo", "loss=cispo"), _train(*V1, *whole, "algorithm=grpo")
    )


def _loss_grads(loss, cfg, lp, adv, mask, groups):
    from framework.types import PolicyLossInputs

    x = lp.clone().requires_grad_(True)
    inputs = PolicyLossInputs(x, x.detach(), adv, mask, group_index=groups)  # on policy
    loss(inputs, cfg=cfg).loss.backward()
    return x.grad


def test_on_policy_the_ratio_losses_have_ppo_clips_gradient():
    """What on_policy_ratio_inert claims: with the behaviour log-probs the current ones (ratio 1),
    CISPO's, GSPO's and ETR's gradients are PPO-clip's under the same aggregation; NSR's is not."""
    from framework.registry import POLICY_LOSSES

    gen = torch.Generator().manual_seed(0)
    lp = -torch.rand(6, 5, generator=gen, dtype=torch.float64)
    adv = torch.randn(6, generator=gen, dtype=torch.float64)
    mask = torch.ones(6, 5, dtype=torch.bool)
    mask[2, 3:] = False
    groups = torch.tensor([0, 0, 0, 1, 1, 1])

    def grads(name, **fields):
        entry = POLICY_LOSSES.get(name)
        cfg = entry.config_cls(name=name, **fields)
        return _loss_grads(entry.target, cfg, lp, adv, mask, groups)

    for agg in ("seq_mean_token_mean", "token_mean"):
        ppo = grads("ppo_clip", agg=agg)
        for name in ("cispo", "gspo", "etr"):
            torch.testing.assert_close(grads(name, agg=agg), ppo, rtol=1e-12, atol=1e-14)
    assert not torch.allclose(grads("nsr"), grads("ppo_clip"))


def test_dppo_prunes_nothing_below_one_over_g_minus_one():
    """What dppo_inert claims, on every group of 8 binary rewards (k = 0..8 correct): below 1/7 the
    advantages are GRPO's exactly; above it, a one-apart group's majority is low-signal."""
    from framework.algorithms.advantages.dppo import DPPOAdvantageConfig, dppo_advantage
    from framework.algorithms.advantages.grpo import GRPOAdvantageConfig, grpo_advantage
    from framework.types import AdvantageInputs

    rewards = torch.tensor([float(i < k) for k in range(9) for i in range(8)])
    groups = torch.arange(9).repeat_interleave(8)
    inputs = AdvantageInputs(rewards, groups, token_mask=torch.ones(72, 2, dtype=torch.bool))
    for scale in (True, False):
        grpo = grpo_advantage(inputs, cfg=GRPOAdvantageConfig(name="grpo", scale_by_std=scale))
        low = DPPOAdvantageConfig(name="dppo", threshold=0.14, scale_by_std=scale)
        assert torch.equal(dppo_advantage(inputs, cfg=low), grpo)
        high = DPPOAdvantageConfig(name="dppo", threshold=0.15, scale_by_std=scale)
        assert not torch.equal(dppo_advantage(inputs, cfg=high), grpo)


def test_a_rule_is_not_inherited():
    """NSR's config is PPO-clip's with a weight: it must not pass for PPO-clip."""
    from framework.algorithms.losses.base import on_policy_ratio_inert
    from framework.algorithms.losses.nsr import NSRLossConfig
    from framework.algorithms.losses.ppo_clip import ClipLossConfig
    from framework.config.inert import declared_rule

    assert declared_rule(ClipLossConfig) is on_policy_ratio_inert
    assert declared_rule(NSRLossConfig) is None


# -- compute -----------------------------------------------------------------------------------------
def test_a_runs_compute_from_its_logged_figures_or_its_config():
    logged = {
        "compute": {
            "train/generated_rollouts": [[1, 16.0], [2, 24.0]],
            "train/generated_tokens": [[1, 8000.0], [2, 10000.0]],
            "train/optimizer_steps": [[1, 2.0], [2, 2.0]],
        }
    }
    assert run_compute(logged) == {
        "rollouts": 20.0,
        "generated_tokens": 9000.0,
        "optimizer_steps": 2.0,
        "from_config": False,
    }
    # logged before the step's totals: trained rollouts, tokens per rollout x rollouts, the
    # mini-batches' optimiser steps
    older = {
        "compute": {
            "train/rollouts": [[1, 16.0], [2, 8.0]],
            "rollout/generated_tokens": [[1, 500.0], [2, 400.0]],
            "loss/optimizer_steps": [[1, 2.0], [2, 2.0]],
        }
    }
    assert run_compute(older) == {
        "rollouts": 12.0,
        "generated_tokens": (16 * 500 + 8 * 400) / 2,
        "optimizer_steps": 2.0,
        "from_config": False,
    }
    # recorded before any: its config's policy epochs, on whole batches with a staged loss aside
    config = {"config": {"optim": {"policy_epochs": 2}, "loss": {"name": "ppo_clip"}}}
    assert run_compute(config) == {
        "rollouts": None,
        "generated_tokens": None,
        "optimizer_steps": 2.0,
        "from_config": True,
    }
    staged = {"config": {"optim": {"policy_epochs": 1}, "loss": {"name": "seeupo"}}}
    assert run_compute(staged)["optimizer_steps"] is None  # one step per turn: not in the config
    minis = {"config": {"optim": {"policy_epochs": 1, "mini_batch_size": 8}, "loss": {"name": "x"}}}
    assert run_compute(minis)["optimizer_steps"] is None
    assert run_compute({})["optimizer_steps"] is None
    archive = _Archive({("a", 0): logged, ("a", 1): config}, {})
    both = arm_compute(archive, "a", [0, 1, 2])  # seed 2 has no record
    assert both == {
        "rollouts": 20.0,
        "generated_tokens": 9000.0,
        "optimizer_steps": 2.0,
        "from_config": True,
    }
    assert arm_compute(archive, "a", [5]) is None


def test_what_spends_more_than_the_baseline():
    base = {"rollouts": 16.0, "generated_tokens": 8000.0, "optimizer_steps": 2.0}
    assert spends_more(base, base) == []
    assert spends_more({**base, "optimizer_steps": 4.0}, base) == [
        "4.0 optimiser steps per batch against 2.0"
    ]
    # rollouts: 5% more is within the tolerance, more than that is not
    assert spends_more({**base, "rollouts": 16.8}, base) == []
    assert spends_more({**base, "rollouts": 24.0}, base) == ["24.0 rollouts per step against 16.0"]
    # tokens: a policy's longer answers (up to 50% more) are its outcome; more is compute
    assert spends_more({**base, "generated_tokens": 12000.0}, base) == []
    assert spends_more({**base, "generated_tokens": 12001.0}, base) == [
        "12001 generated tokens per step against 8000"
    ]
    # a figure either lacks is not compared
    assert spends_more({"optimizer_steps": 4.0, "rollouts": None}, {"rollouts": 16.0}) == []
    assert spends_more(None, base) == []


def test_reference_arms_are_the_baseline_at_other_optim_settings():
    arms = {
        "grpo": ["algorithm=grpo"],
        "grpo-epochs2": ["algorithm=grpo", "optim.policy_epochs=2"],
        "loss-llds": ["algorithm=grpo", "loss=llds", "optim.policy_epochs=2"],
        "llds": ["algorithm=llds"],
    }
    assert reference_arms(arms, "grpo") == {
        "grpo-epochs2": "the baseline with optim.policy_epochs=2"
    }


# -- a screen's rows from an archive: noise band, matching, inert rows ---------------------------------
#: per question (q1..q4) whether its one sample was right, per (arm, seed)
CORRECT = {
    ("base", 0): [1, 0, 0, 0],  # 0.25
    ("base", 1): [1, 1, 0, 0],  # 0.50
    ("base", 2): [0, 0, 0, 0],  # 0.00
    ("near", 0): [1, 1, 1, 0],  # 0.75: +0.50 on base seed 0
    ("far", 0): [1, 1, 1, 1],  # 1.00: +0.75
    ("ref", 0): [1, 1, 0, 0],  # the baseline at 2 epochs
    ("costly", 0): [1, 1, 1, 0],  # 2 epochs: against ref, +0.25
    ("pricey", 0): [1, 0, 1, 0],  # twice the rollouts, no reference: unmatched
}
STEPS = {"ref": 2.0, "costly": 2.0}
ROLLOUTS = {"pricey": 32.0}


def _archive(root):
    arc = root / "archive"
    (arc).mkdir(parents=True)
    (arc / "study_config.json").write_text("{}")
    for (arm, seed), marks in CORRECT.items():
        rows = [
            {"dataset": "d", "question_id": f"q{i + 1}", "sample": 0, "correct": bool(c),
             "tool_calls": 1, "turns": 2, "status": "ok", "response_tokens": 100}
            for i, c in enumerate(marks)
        ]  # fmt: skip
        write_records(arc / "eval" / arm / f"seed{seed}.jsonl.gz", rows)
        run = {
            "status": "done",
            "curves": {"rollout/accuracy": [[1, float(sum(marks)) / 4 + seed], [2, 0.1]]},
            "compute": {
                "train/generated_rollouts": [[1, ROLLOUTS.get(arm, 16.0)]],
                "train/generated_tokens": [[1, 8000.0]],
                "train/optimizer_steps": [[1, STEPS.get(arm, 1.0)]],
            },
        }
        path = arc / "training" / arm / f"seed{seed}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(run))
    return StudyArchive(arc)


def test_the_noise_band_matching_and_inert_rows(tmp_path):
    """Baseline seeds 0, 1, 2 score 0.25, 0.50, 0.00 (range 0.5, SD 0.25: deviations 0, +0.25,
    -0.25, variance 0.125 / 2); their paired differences +0.25 (1 - 0), -0.25 (2 - 0), -0.50
    (2 - 1), the widest 0.50. `near` (+0.50 on seed 0) is within it, `far` (+0.75) is not.
    `costly` takes 2 optimiser steps as `ref` (the baseline at 2 epochs) does: compared with it
    (+0.25). `pricey` generates 32 rollouts a step against 16, and no reference does: unmatched.
    `idle` is inert: listed, not trained, no comparison."""
    archive = _archive(tmp_path)
    arms = ["base", "ref", "near", "far", "costly", "pricey", "idle"]
    cfg = _cfg(
        arms={a: ["algorithm=base"] for a in arms} | {"ref": ["algorithm=base", "optim.x=2"]},
        seeds=[0],
        baseline_seeds=[0, 1, 2],
        bootstrap=500,
        inert_arms={"idle": "a reason"},
    )
    summary = summarize_study(archive, arms, [0, 1, 2], "base", 500)
    rows = {r["arm"]: r for r in screen_rows(summary, archive, arms, "base", cfg=cfg)}
    band = rows["base"]["noise_band"]
    assert band["seeds"] == [0, 1, 2] and band["pass@1"] == pytest.approx([0.25, 0.5, 0.0])
    assert band["range"] == pytest.approx(0.5) and band["sd"] == pytest.approx(0.25)
    assert band["sd"] == pytest.approx(statistics.stdev([0.25, 0.5, 0.0]))
    assert [p["seeds"] for p in band["pairs"]] == [[0, 1], [0, 2], [1, 2]]
    assert [p["diff"] for p in band["pairs"]] == pytest.approx([0.25, -0.25, -0.5])
    assert band["widest"] == pytest.approx(0.5)
    # a method's comparison pairs it with the baseline's run of its own seed, not the pool
    near, far = rows["near"], rows["far"]
    assert near["minus_baseline"]["diff"] == pytest.approx(0.5)  # pooled base would be +0.5833
    assert summary["versus_baseline"]["near"]["Pass@1"]["diff"] == pytest.approx(0.75 - 0.75 / 3)
    assert near["within_noise"] is True and far["within_noise"] is False
    assert far["minus_baseline"]["diff"] == pytest.approx(0.75)
    # compute, and the comparison at matched compute
    assert near["compute"] == {
        "rollouts": 16.0,
        "generated_tokens": 8000.0,
        "optimizer_steps": 1.0,
        "from_config": False,
    }
    costly = rows["costly"]
    assert costly["compared_with"] == "ref" and costly["unmatched"] is None
    assert costly["minus_baseline"]["diff"] == pytest.approx(0.25)
    assert costly["within_noise"] is None  # against a reference, not the baseline's seeds
    assert costly["verdict"].endswith("at matched compute (against `ref`)")
    pricey = rows["pricey"]
    assert pricey["compared_with"] == "base" and pricey["unmatched"] == (
        "spends more than the baseline: 32.0 rollouts per step against 16.0; no reference arm "
        "spends as much"
    )
    assert pricey["verdict"].endswith(f"; unmatched ({pricey['unmatched']})")
    assert rows["ref"]["reference"] == "the baseline with optim.x=2"
    assert rows["ref"]["verdict"].startswith("reference: the baseline with optim.x=2")
    assert rows["ref"]["p_holm"] is None  # no method: not in the family
    # the family: near, far, costly, pricey (not the baseline, the reference or the inert arm)
    assert sum(r["p_holm"] is not None for r in rows.values()) == 4
    idle = rows["idle"]
    assert (
        idle["pass@1"] is None
        and idle["verdict"] == "inert at these settings, not trained (a reason)"
    )

    table = screen_markdown(cfg, list(rows.values()))
    assert (
        "## Screening table (6 methods evaluated, 1 inert at these settings, baseline `base`)"
        in table
    )
    assert "Seeds [0], one per method, and [0, 1, 2] for the baseline `base`" in table
    assert (
        "| within seed noise |" in table
        and "| rollouts / step | generated tokens / step |" in table
    )
    assert "| +0.500 [" in table and "| yes | 1.00 |" in table
    assert "| 16.0 | 8000 | 1.0 |" in table and "| 32.0 | 8000 | 1.0 |" in table
    assert "vs `ref` |" in table
    assert (
        "| `idle` |  | not trained |" in table
        and "| inert at these settings, not trained (a reason) |" in table
    )
    assert (
        "Noise band: the baseline `base` trained with seeds [0, 1, 2], alike but for the seed, has "
        "Pass@1 0.250 (seed 0), 0.500 (seed 1), 0.000 (seed 2): range 0.500, SD 0.250."
    ) in table
    assert "seed 1 minus seed 0 +0.250 [" in table and "the widest of these (0.500)" in table
    assert "Inert at these settings: `idle`." in table
    assert "more than 5% more rollouts or more than 50% more generated tokens" in table
    # the table's columns line up with its header in every row
    lines = [x for x in table.splitlines() if x.startswith("| ")]
    assert len({x.count("|") for x in lines}) == 1


def test_one_baseline_seed_gives_no_noise_band(tmp_path):
    archive = _archive(tmp_path)
    arms = ["base", "near"]
    cfg = _cfg(arms={a: [] for a in arms}, seeds=[0], bootstrap=200)
    summary = summarize_study(archive, arms, [0], "base", 200)
    rows = screen_rows(summary, archive, arms, "base", cfg=cfg)
    assert rows[0]["noise_band"] is None and rows[1]["within_noise"] is None
    assert noise_band(archive, "base", [0], 200) is None
    table = screen_markdown(cfg, rows)
    assert "within seed noise" not in table and "Noise band" not in table
    assert "Seeds [0], one per method:" in table


# -- the study: config, arms, jobs -----------------------------------------------------------------------
def test_a_replicated_baseline_needs_three_seeds_including_the_studys():
    def fields(**kw):
        return [p.path for p in StudyConfig(arms={"grpo": []}, **kw).problems()]

    assert "baseline_seeds" not in fields()  # [] = the study's seeds (screen v1: one)
    assert "baseline_seeds" not in fields(seeds=[0], baseline_seeds=[0, 1, 2])
    assert "baseline_seeds" in fields(seeds=[0], baseline_seeds=[0, 1])  # two: one difference
    assert "baseline_seeds" in fields(seeds=[3], baseline_seeds=[0, 1, 2])  # seed 3 unpaired
    assert "baseline_seeds" in fields(seeds=[0], baseline_seeds=[0, 1, 1])
    v2 = load_config("study", ["study=screen_v2"])
    assert v2.screen and v2.baseline_seeds == [0, 1, 2] and v2.matched_baselines
    assert v2.publish == "" and v2.archive_to == ""  # the rerun belongs to issue 79
    assert "baseline_seeds" in [p.path for p in replace(v2, baseline_seeds=[0, 1]).problems()]


def test_jobs_run_the_baselines_seeds_first_and_no_inert_arm():
    cfg = StudyConfig(
        arms={"grpo": [], "a": [], "b": [], "idle": []},
        seeds=[0, 1],
        baseline_seeds=[0, 1, 2, 3],
        inert_arms={"idle": "why"},
    )
    assert study_jobs(cfg) == [
        ("grpo", 0), ("grpo", 2), ("grpo", 3), ("a", 0), ("b", 0), ("grpo", 1), ("a", 1), ("b", 1)
    ]  # fmt: skip
    plain = StudyConfig(arms={"grpo": [], "a": []}, seeds=[0, 1])
    assert study_jobs(plain) == [("grpo", 0), ("a", 0), ("grpo", 1), ("a", 1)]


@pytest.mark.slow
def test_the_arms_of_screen_v2():
    """Screen v2's arms: the baseline at 2 epochs right after the baseline (the off-policy losses
    and the two-epoch bundles take 2), SeeUPO on whole batches (it trains turn by turn); the slow
    test below composes and validates every arm with 2 optimiser steps per batch (SeeUPO aside)."""
    study = load_config("study", ["study=screen_v2"])
    arms = screen_arms(study.baseline, overrides=study.overrides, matched=True)
    assert list(arms)[:2] == ["grpo", "grpo-epochs2"]
    assert arms["grpo-epochs2"] == ["algorithm=grpo", "optim.policy_epochs=2"]
    assert arms["seeupo"] == ["algorithm=seeupo", "optim.mini_batch_size=0"]
    assert arms["llds"] == ["algorithm=llds"]  # its bundle's 2 epochs: matched by grpo-epochs2
    assert "grpo-epochs2" not in screen_arms(study.baseline, overrides=study.overrides)


@pytest.mark.slow  # composes all 43 arms: about 30 s
def test_every_arm_of_screen_v2_validates_with_two_optimiser_steps_per_batch():
    study = load_config("study", ["study=screen_v2"])
    arms = screen_arms(study.baseline, overrides=study.overrides, matched=True)
    for arm, args in arms.items():
        cfg = load_config("train", [*study.overrides, *args, *STUDY_TRAIN_ARGS])
        assert cfg.sampler.start_hops == 2, arm
        if arm != "seeupo":
            assert cfg.optim.mini_batch_size == 8 and cfg.sampler.group_size == 8, arm
