"""The health monitors in a real training run: a retriever that returns nothing stops the run
after its first step, with a checkpoint and a message naming the retriever.

The policy is the tiny random model, but its rollouts are scripted (a test backend that always
searches), because a random model almost never writes a well-formed tool call; everything else
(agent loop, tools, reward, update, Lightning, checkpoints, TensorBoard) is the real run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from framework.registry import RETRIEVERS, ROLLOUT_BACKENDS
from framework.retrieval.types import RetrieverConfigBase
from framework.rollout.hf_backend import TransformersBackend, TransformersBackendConfig
from framework.types import Generation

# importing test_train registers its test reward, test_length_mod
from tests.integration.test_train import TINY, tags

SEARCH = (
    "<think>I should look this up.</think>\n"
    '<tool_call>{"name": "search", "arguments": {"queries": ["who wrote it"]}}</tool_call>'
)


@dataclass
class AlwaysSearchConfig(TransformersBackendConfig):
    pass


@ROLLOUT_BACKENDS.register("test_always_search", config=AlwaysSearchConfig)
class AlwaysSearchBackend(TransformersBackend):
    """The tiny policy's backend, except that every turn is the same search call."""

    def generate(self, sequences, max_new_tokens, stop):
        ids = self.tokenizer.encode(SEARCH, add_special_tokens=False)
        self.calls += 1
        return [Generation(list(ids[:n]), "stop") for n in max_new_tokens]


@dataclass
class EmptyRetrieverConfig(RetrieverConfigBase):
    pass


@RETRIEVERS.register("test_empty", config=EmptyRetrieverConfig)
class EmptyRetriever:
    """A retriever whose index holds nothing: every query gets no passage."""

    def __init__(self, *, cfg: EmptyRetrieverConfig) -> None:
        self.cfg = cfg

    def search(self, queries, k):
        return [[] for _ in queries]

    def document(self, *, doc_id=None, title=None):
        raise LookupError(title or doc_id)

    def close(self) -> None:
        pass


#: the run both tests make: the scripted searching policy against the empty retriever
SEARCHING_AN_EMPTY_INDEX = (
    "retriever=test_empty",
    "rollout=test_always_search",
    "rollout.policy.source=tiny",
    "reward=test_length_mod",
    "agent.max_new_tokens_per_turn=64",
    "final_eval.enabled=false",
)


def run_in_process(run_dir: Path, *overrides: str):
    from framework.cli.app import run_app
    from framework.cli.train import train

    argv = [o for o in TINY if not o.startswith("retriever=")]
    return run_app("train", train, argv=[*argv, *overrides, f"hydra.run.dir={run_dir}"])


def test_a_retriever_returning_nothing_stops_the_run_with_a_checkpoint_naming_it(tmp_path, capsys):
    from framework.lightning.health import HEALTH_STOPPED

    run = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        run_in_process(
            run,
            *SEARCHING_AN_EMPTY_INDEX,
            "trainer.max_steps=3",
            "trainer.checkpoint_every_n_steps=0",
        )
    assert exit_info.value.code == HEALTH_STOPPED
    err = capsys.readouterr().err
    assert "stopped by a health monitor after step 1" in err
    assert "[health.retrieval_empty] retriever 'test_empty' returned nothing useful" in err
    assert "6 got no result" not in err  # distinct queries per turn: one query, 6 rollouts
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 1
    assert summary["stopped_by"]["monitor"] == "retrieval_empty"
    assert "'test_empty'" in summary["stopped_by"]["message"]
    assert sorted(p.name for p in (run / "checkpoints").glob("step-*.ckpt")) == ["step-000001.ckpt"]
    # its policy is exported all the same, from the step it stopped after
    assert summary["policy"] == {
        "path": str(run / "policy"),
        "step": 1,
        "dtype": "float32",  # TINY's
        "source": "the run's weights after its last step (stopped by health monitor "
        "retrieval_empty)",
    }
    assert json.loads((run / "policy" / "seekrl_export.json").read_text()) == summary["policy"]
    scalars = tags(run)["scalars"]
    for name in (
        "health/retrieval_empty/bad_rate",
        "health/retrieval_empty/alarm",
        "health/gradient/grad_norm",
        "health/reward_collapse/alarm",
        "retrieval/queries",
        "retrieval/empty",
    ):
        assert name in scalars, (name, sorted(scalars))
    assert not [n for n in scalars if n.startswith("val/")]  # a stopped run does not validate


def test_the_same_run_with_the_monitor_warning_only_trains_every_step(tmp_path, capsys):
    run = tmp_path / "run"
    run_in_process(
        run,
        *SEARCHING_AN_EMPTY_INDEX,
        "trainer.max_steps=2",
        "health.monitors.retrieval_empty.stop=false",
        "trainer.val_questions=1",
    )
    err = capsys.readouterr().err
    assert err.count("warning: [health.retrieval_empty]") == 1  # once, when it starts ringing
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["stopped_by"] is None
