"""Expert trajectories on the small corpus, and a tiny-model SFT run that lowers its loss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framework.rollout.parser import parse_turn

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def small():
    """Items of the small synthesized dataset, the BM25 retriever and SmolLM2's tokenizer."""
    from framework.cli.app import load_config
    from framework.registry import DATASETS, RETRIEVERS
    from framework.rollout.policy import load_tokenizer

    cfg = load_config(
        "sft", ["dataset=synth_small", "retriever=bm25", "rollout.policy.source=tiny"]
    )
    items = DATASETS.bind(cfg.dataset)("train")
    retriever = RETRIEVERS.bind(cfg.retriever)()
    yield cfg, items, retriever, load_tokenizer(cfg.rollout.policy)
    retriever.close()


def test_expert_trajectories_parse_and_quote_the_retriever(small):
    from framework.sft.expert import ExpertConfig, expert_trajectories

    cfg, items, retriever, tok = small
    kept, report = expert_trajectories(items, retriever, tok, cfg.agent, ExpertConfig(seed=1))
    assert report.requested == len(items) and report.kept == len(kept) >= len(items) // 2
    assert report.kept + sum(report.dropped.values()) == report.requested
    assert len(report.hops_kept) >= 2  # multi-hop chains are followed too
    for item, t in kept:
        assert t.status == "ok" and t.answer == item.golden_answers[0]
        assert t.token_ids[: t.prompt_len] == _prompt(tok, cfg.agent, item.question)
        for seg in t.segments:
            if seg.kind == "tool_response":
                assert all(m == 0 for m in t.loss_mask[seg.start : seg.end])
        # every model turn parses: tool calls accepted by the parser, or the final answer
        turns = _model_turns(tok, t)
        for text in turns[:-1]:
            parsed = parse_turn(text)
            assert parsed.calls and not parsed.errors and parsed.malformed is None, text
        assert parse_turn(turns[-1]).answer == item.golden_answers[0]
        # every name the expert writes in its thinking was first shown by the retriever
        observations = ""
        for text, obs in zip(turns, [*_observations(tok, t), ""], strict=False):
            for mention in item.extra["mentions"]:
                if f"mentions {mention}" in text or f"{mention} appears" in text:
                    assert mention in observations, (mention, text)
            observations += obs
    # the observation of the first search is exactly the retriever's answer
    item, t = kept[0]
    first_call = parse_turn(_model_turns(tok, t)[0]).calls[0]
    hits = retriever.search(list(first_call.queries), cfg.agent.search_k)
    for hit in hits[0]:
        assert hit.title in _observations(tok, t)[0]


def _prompt(tok, agent, question):
    messages = [
        {"role": "system", "content": agent.system_prompt},
        {"role": "user", "content": question},
    ]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "input_ids") else ids
    return [int(i) for i in ids]


def _spans(t, value):
    out, start = [], None
    for i in range(t.prompt_len, len(t.token_ids) + 1):
        inside = i < len(t.token_ids) and t.loss_mask[i] == value
        if inside and start is None:
            start = i
        if not inside and start is not None:
            out.append((start, i))
            start = None
    return out


def _model_turns(tok, t):
    return [tok.decode(t.token_ids[a:b]) for a, b in _spans(t, 1)]


def _observations(tok, t):
    return [tok.decode(t.token_ids[a:b]) for a, b in _spans(t, 0)]


@pytest.mark.slow  # expert trajectories and an SFT run: about 25 s
def test_tiny_sft_run_lowers_its_loss_and_writes_a_loadable_policy(tmp_path):
    from framework.cli.app import run_app
    from framework.cli.sft import sft

    run = tmp_path / "run"
    summary = run_app(
        "sft",
        sft,
        argv=[
            "dataset=synth_small",
            "retriever=bm25",
            "rollout.policy.source=tiny",
            "expert.questions=32",
            "optim.epochs=3",
            "optim.lr=3e-3",
            "optim.batch_size=4",
            "eval_questions=2",
            f"hydra.run.dir={run}",
        ],
    )
    assert summary["expert"]["kept"] >= 12
    assert summary["optimizer_steps"] >= 9
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    losses = []
    for f in (run / "tensorboard").glob("events.out.tfevents.*"):
        ea = EventAccumulator(str(f))
        ea.Reload()
        if "sft/loss" in ea.Tags()["scalars"]:
            losses += [e.value for e in ea.Scalars("sft/loss")]
    assert len(losses) >= 3 and losses[-1] < 0.8 * losses[0], losses
    assert (run / "expert" / "report.md").is_file()
    rows = (run / "expert" / "trajectories.jsonl").read_text().splitlines()
    assert len(rows) == summary["expert"]["kept"] and "<tool_call>" in json.loads(rows[0])["text"]
    assert summary["before"]["questions"] == 2 and "format_valid" in summary["after"]

    from framework.rollout.policy import PolicyConfig, load_policy

    load_policy(PolicyConfig(source="path", path=str(run / "policy")))


DRIVER = """
import os, signal, sys
import framework.lightning.callbacks as callbacks
from framework.sft.module import SFTModule

kill_at, term_at = int(os.environ.get("KILL_AT", 0)), int(os.environ.get("TERM_AT", 0))
replace = os.replace


def dying_replace(src, dst):  # SIGKILL with the checkpoint written but not yet renamed
    if kill_at and str(dst).endswith(f"step-{kill_at:06d}.ckpt"):
        os.kill(os.getpid(), signal.SIGKILL)
    replace(src, dst)


callbacks.os.replace = dying_replace
step = SFTModule.training_step


def terminated_step(self, batch, batch_idx):  # SIGTERM arrives during step term_at
    if term_at and self.trainer.global_step == term_at - 1:
        os.kill(os.getpid(), signal.SIGTERM)
    return step(self, batch, batch_idx)


SFTModule.training_step = terminated_step
from framework.cli.sft import main

main()
"""


@pytest.mark.slow  # four tiny SFT runs, about 2 minutes on 2 cores (.ci/run runs the slow set)
def test_sft_survives_sigkill_mid_checkpoint_and_sigterm_and_resumes_exactly(tmp_path):
    import os
    import subprocess
    import sys

    from safetensors.torch import load_file

    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    args = [
        "dataset=synth_small",
        "retriever=bm25",
        "rollout.policy.source=tiny",
        "expert.questions=16",
        "optim.epochs=2",
        "optim.lr=3e-3",
        "optim.batch_size=4",
        "eval_questions=0",
        "trainer.checkpoint_every_n_steps=2",
    ]

    def sft(run, **env):
        cmd = [sys.executable, str(driver), *args, f"hydra.run.dir={run}"]
        full_env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **env}
        return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=full_env)

    run = tmp_path / "run"
    proc = sft(run, KILL_AT="4")  # killed while its second checkpoint is being written
    assert proc.returncode == -9, proc.stderr[-3000:]
    ckpts = run / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["step-000002.ckpt", "step-000004.ckpt.tmp"]
    proc = sft(run, TERM_AT="5")  # resumes after step 2, then SIGTERM: finish step 5, save, stop
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert "[sft] resuming after step 2/" in proc.stdout, proc.stdout[-3000:]
    assert (ckpts / "step-000005.ckpt").is_file() and not (run / "policy").exists()
    proc = sft(run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[sft] resuming after step 5/" in proc.stdout
    assert not ckpts.exists()  # the exported policy replaces them
    reference = tmp_path / "reference"
    proc = sft(reference)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = load_file(run / "policy" / "model.safetensors")
    want = load_file(reference / "policy" / "model.safetensors")
    assert got.keys() == want.keys()
    for name in want:  # the resumed run trained exactly the uninterrupted run's steps
        assert (got[name] - want[name]).abs().max() < 1e-6, name
    summary = json.loads((run / "summary.json").read_text())
    assert (
        summary["optimizer_steps"]
        == json.loads((reference / "summary.json").read_text())["optimizer_steps"]
    )
