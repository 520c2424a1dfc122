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
            "expert.questions=24",
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
