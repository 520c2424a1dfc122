"""experiment=search_r1 (Search-R1's published GRPO settings) and experiment=search_r1_cpu (the same
recipe at CPU size), composed and, for the CPU one, run end to end with seekrl-eval after it."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from framework.cli.app import load_config
from framework.config import ConfigError
from framework.data.schema import QAItem, read_dataset
from framework.data.search_r1 import write_search_r1_split

#: what experiment=search_r1 requires (``${required:}``), as its header command passes it
REQUIRED = ("dataset.train", "dataset.validation", "rollout.policy.path", "retriever.url")


def search_r1_file(path: Path, sources=("nq",), per_source: int = 2) -> Path:
    """A Search-R1-layout parquet file with ``per_source`` questions of each data_source."""
    items = [
        QAItem(f"{src}_{i}", f"who wrote book {i}?", (f"author {i}",), None, None, None, src)
        for src in sources
        for i in range(per_source)
    ]
    return write_search_r1_split(items, path, "test")


def required_values(tmp_path: Path) -> list[str]:
    """Stand-ins for the data, the model folder and the server URL of experiment=search_r1."""
    model = tmp_path / "Qwen2.5-3B"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    train = search_r1_file(tmp_path / "train.parquet")
    test = search_r1_file(tmp_path / "test.parquet", ("nq", "hotpotqa"))
    return [
        f"dataset.train={train}",
        f"dataset.validation={test}",
        f"rollout.policy.path={model}",
        "retriever.url=http://127.0.0.1:8000/retrieve",  # as Search-R1's script writes it
    ]


def cpu_values(tmp_path: Path) -> list[str]:
    """Stand-ins for the three files experiment=search_r1_cpu reads (seekrl-synth writes them)."""
    return [
        f"dataset.{split}={search_r1_file(tmp_path / f'{split}.parquet')}"
        for split in ("train", "validation", "test")
    ]


def test_search_r1_refuses_a_run_without_its_data_model_and_server():
    with pytest.raises(ConfigError) as info:
        load_config("train", ["experiment=search_r1"])
    assert sorted(p.path for p in info.value.problems) == sorted(REQUIRED)
    assert "[dataset.train] got '???'; expected a value. Fix: pass dataset.train=" in str(
        info.value
    )


def test_search_r1_has_search_r1s_published_settings(tmp_path):
    # PeterGriffinJin/Search-R1 train_grpo.sh (Qwen2.5-3B, EM) and verl's ppo_trainer.yaml defaults
    cfg = load_config("train", ["experiment=search_r1", *required_values(tmp_path)])
    assert cfg.algorithm == "grpo" and cfg.advantage.name == "grpo"
    assert cfg.advantage.scale_by_std and cfg.advantage.unbiased_std
    assert cfg.advantage.epsilon == 1e-6
    assert (cfg.reward.name, cfg.reward.metric) == ("outcome", "em")
    assert (cfg.sampler.questions_per_step, cfg.sampler.group_size) == (512, 5)
    assert (cfg.loss.name, cfg.loss.clip_low, cfg.loss.clip_high) == ("ppo_clip", 0.2, 0.2)
    assert cfg.loss.agg == "token_mean"
    assert (cfg.kl.name, cfg.kl.coef, cfg.kl.cap) == ("k3", 0.001, 10.0)  # low_var_kl
    o = cfg.optim
    assert (o.lr, o.warmup_steps, o.schedule) == (1e-6, 286, "constant")  # int(0.285 * 1005)
    assert (o.weight_decay, o.grad_clip, o.policy_epochs) == (0.01, 1.0, 1)
    # 2560 rollouts in mini-batches of whole groups: 10 optimiser steps, as verl's 256 gives
    rollouts = cfg.sampler.questions_per_step * cfg.sampler.group_size
    groups_per_mini = o.mini_batch_size // cfg.sampler.group_size
    assert -(-cfg.sampler.questions_per_step // groups_per_mini) == rollouts // 256 == 10
    a = cfg.agent
    assert (a.protocol, a.max_turns, a.max_tool_calls) == ("search_r1", 3, 2)
    assert (a.max_new_tokens_per_turn, a.max_total_tokens, a.search_k) == (500, 4096, 3)
    assert a.max_observation_tokens == 500  # max_obs_length
    s = cfg.rollout.sampling
    assert (cfg.rollout.name, s.temperature, s.top_p, s.top_k) == ("vllm", 1.0, 0.95, 0)
    assert cfg.rollout.gpu_memory_utilization == 0.3  # one GPU, not 8 (docs/recipes.md)
    assert (cfg.rollout.policy.source, cfg.rollout.policy.device) == ("path", "cuda")
    assert cfg.retriever.name == "http"
    t = cfg.trainer
    assert (t.accelerator, t.precision) == ("gpu", "bf16-mixed")
    assert (t.max_steps, t.val_every_n_steps, t.checkpoint_every_n_steps) == (1005, 50, 100)
    assert (t.val_questions, t.val_samples) == (0, 1)
    assert cfg.dataset.name == "files" and not cfg.warm_start.sft


def test_search_r1_cpu_is_search_r1_at_cpu_size(tmp_path):
    values = required_values(tmp_path)
    gpu = load_config("train", ["experiment=search_r1", *values])
    cpu = load_config("train", ["experiment=search_r1_cpu", *cpu_values(tmp_path)])
    assert cpu.loss == gpu.loss and cpu.kl == gpu.kl and cpu.advantage == gpu.advantage
    assert cpu.reward == gpu.reward and cpu.algorithm == gpu.algorithm
    assert cpu.sampler.group_size == gpu.sampler.group_size
    assert cpu.rollout.sampling == gpu.rollout.sampling
    for name in ("protocol", "max_turns", "max_tool_calls", "search_k", "max_observation_tokens"):
        assert getattr(cpu.agent, name) == getattr(gpu.agent, name), name
    for name in ("lr", "schedule", "weight_decay", "grad_clip", "policy_epochs"):
        assert getattr(cpu.optim, name) == getattr(gpu.optim, name), name
    assert not cpu.warm_start.sft
    # the packaged policy, the local FAISS index over the shipped corpus, this CPU
    assert (cpu.rollout.name, cpu.rollout.policy.source) == ("transformers", "smollm2")
    assert (cpu.retriever.name, cpu.retriever.corpus.source) == ("faiss", "wiki_offline")
    assert cpu.trainer.accelerator == "cpu"


def test_search_r1_cpu_reads_the_files_seekrl_synth_exports():
    # the recipe's header: seekrl-synth dataset=synth_demo export_search_r1=data/search_r1
    from framework.cli.app import compose

    raw = compose("train", ["experiment=search_r1_cpu"])
    for split in ("train", "validation", "test"):
        assert raw.dataset[split] == f"data/search_r1/{split}.parquet"


@pytest.mark.slow  # SmolLM2-135M: 2 steps of 5 rollouts, then 6 questions evaluated
def test_search_r1_cpu_trains_then_evaluates_per_data_source(tmp_path):
    from framework.cli.app import run_app
    from framework.cli.synth import synth
    from framework.cli.train import train
    from framework.eval.run import evaluate

    # the recipe's first command, on the small question set (seconds, no answerability index)
    data = tmp_path / "search_r1"
    synth_argv = ["dataset=synth_small", f"export_search_r1={data}"]
    run_app("synth", synth, argv=[*synth_argv, f"hydra.run.dir={tmp_path / 'synth'}"])
    run = tmp_path / "train"
    run_app(
        "train",
        train,
        argv=[
            "experiment=search_r1_cpu",
            *(f"dataset.{s}={data}/{s}.parquet" for s in ("train", "validation", "test")),
            "retriever.corpus.limit=500",  # a small index, built in seconds
            "trainer.max_steps=2",
            "trainer.val_every_n_steps=0",
            "trainer.val_questions=2",
            "sampler.questions_per_step=1",
            "agent.max_new_tokens_per_turn=32",
            "final_eval.enabled=false",
            f"hydra.run.dir={run}",
        ],
    )
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and not summary["interrupted"]
    rollouts = [json.loads(x) for x in (run / "trajectories" / "step-000001.jsonl").open()]
    assert len(rollouts) == 5  # one question x Search-R1's 5 rollouts
    train_ids = {item.id for item in read_dataset(data / "train.parquet")}
    for r in rollouts:  # the exported file's questions, in Search-R1's turn budget
        assert r["question_id"] in train_ids
        assert r["stats"]["turns"] <= 3 and r["stats"]["tool_calls"] <= 2

    # Search-R1's merged test file: several data_source values in one parquet
    exported = read_dataset(data / "test.parquet")
    sources = ("nq", "hotpotqa", "bamboogle")
    merged = [
        replace(item, data_source=sources[i % 3], id=f"test_{i}")
        for i, item in enumerate(exported[:6])
    ]
    test_file = write_search_r1_split(merged, tmp_path / "merged" / "test.parquet", "test")
    out = tmp_path / "eval"
    got = run_app(
        "eval",
        evaluate,
        argv=[
            f"checkpoint={run}",
            "dataset=synth_small",  # not evaluated (files= is given): the cached small set
            f"files=[{test_file}]",
            "questions=0",
            "samples_per_question=1",
            "agent.protocol=search_r1",
            "agent.max_turns=3",
            "agent.max_tool_calls=2",
            "agent.max_new_tokens_per_turn=32",
            "retriever.corpus.limit=500",
            f"hydra.run.dir={out}",
        ],
    )
    assert set(got["datasets"]) == {"test"}  # the file only, named by its stem
    assert [r["data_source"] for r in got["by_source"]["rows"]] == list(sources)
    assert got["by_source"]["macro"]["sources"] == 3
    rows = list(csv.DictReader((out / "by_source.csv").open()))
    assert [r["data_source"] for r in rows] == [*sources, "macro average"]
