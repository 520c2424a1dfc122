"""Two evaluations of one policy with the same settings write the same files, byte for byte, also
when one of them was interrupted and resumed from its journal.

A rollout's draws are seeded per sample, but its logits are not bit-for-bit independent of the
batch it decodes in (the matrix kernels and the attention sum in an order that depends on the
batch's rows and padding), so a resumed evaluation whose remaining rollouts decoded beside other
rollouts than in an uninterrupted one drew other tokens (issue 74: one E-GRPO policy scored Pass@1
0.094 and 0.079; the first 25 questions, the first batch in flight, agreed sample for sample, and
67 of the other 73 did not). Evaluations now run in waves that start from an empty decoder state,
and a resumed one takes only whole waves from its journal.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framework.data.schema import QAItem
from framework.eval.harness import rollout_records
from framework.eval.judge import RuleJudge, RuleJudgeConfig
from framework.eval.records import write_records
from tests.unit.rollout.fakes import FakeRetriever


def rollout_rows(*args, **kwargs):
    """The ``samples.jsonl`` rows of :func:`rollout_records` (:meth:`EvalRecord.to_row`)."""
    return [r.to_row() for r in rollout_records(*args, **kwargs)]


#: prompts of different lengths, so that a batch's padding depends on which questions share it
ITEMS = [
    QAItem(
        f"q{i}",
        f"Who {'really ' * (i % 4)}directed film number {i}?",
        (f"d{i}",),
        None,
        1,
        None,
        "t",
    )
    for i in range(6)
]
K = 2
RULE = RuleJudge(cfg=RuleJudgeConfig(name="rule"))


class Interrupted(Exception):
    pass


@pytest.fixture(scope="module")
def tiny():
    """A 2-layer random Llama with SmolLM2's tokenizer, 256 wide: wide enough that its bf16
    matrix products round differently at different row counts on a CPU (the default 64 barely
    does), loaded once for the module."""
    from framework.rollout.policy import PolicyConfig, load_policy

    return load_policy(PolicyConfig(source="tiny", tiny_hidden=256))


def evaluate(tiny, dtype: str, out: Path, *, journal=None, stop_after=None, waves=None):
    """One evaluation in a backend of its own (as a new process would have): ``samples.jsonl`` and
    ``records.jsonl.gz`` written as seekrl-eval writes them; ``stop_after`` questions judged, it
    raises as a kill would, leaving its journal."""
    from framework.rollout.config import AgentConfig
    from framework.rollout.engine import AgentLoop
    from framework.rollout.hf_backend import (
        SamplingConfig,
        TransformersBackend,
        TransformersBackendConfig,
    )

    model, tok = tiny
    cfg = TransformersBackendConfig(sampling=SamplingConfig(temperature=1.0), compute_dtype=dtype)
    backend = TransformersBackend(cfg=cfg, model=model, tokenizer=tok)
    agent = AgentConfig(max_turns=2, max_new_tokens_per_turn=32, max_total_tokens=1024)
    loop = AgentLoop(backend, FakeRetriever(), agent)
    judged = []

    def judge(inputs):
        if stop_after is not None and len(judged) == stop_after:
            raise Interrupted
        judged.append(inputs)
        return RULE(inputs)

    rows = rollout_rows(
        loop, ITEMS, K, judge, dataset="d", batch_questions=2, journal=journal, seed=3, waves=waves
    )
    out.mkdir(parents=True)
    with (out / "samples.jsonl").open("w") as fh:  # as framework.eval.report.write_outputs does
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    write_records(out / "records.jsonl.gz", rows)
    return rows


@pytest.mark.slow
def test_a_resumed_evaluation_writes_the_files_of_an_uninterrupted_one(tiny, tmp_path):
    """bf16 rollouts, as the evaluations of issue 74 ran: 6 questions in waves of 2, evaluated
    whole twice and killed after 3 questions, then resumed (the first wave from the journal)."""
    whole = evaluate(tiny, "bfloat16", tmp_path / "whole")
    # the rows tell the samples apart token by token (the random policy's records alone do not)
    assert len({r["response_digest"] for r in whole}) == len(ITEMS) * K
    evaluate(tiny, "bfloat16", tmp_path / "again")
    journal = tmp_path / "journal.jsonl"
    with pytest.raises(Interrupted):
        evaluate(tiny, "bfloat16", tmp_path / "killed", journal=journal, stop_after=3)
    waves: dict[str, int] = {}
    evaluate(tiny, "bfloat16", tmp_path / "resumed", journal=journal, waves=waves)
    assert waves == {"waves": 3, "from_journal": 1, "questions_from_journal": 2}
    for name in ("samples.jsonl", "records.jsonl.gz"):
        want = (tmp_path / "whole" / name).read_bytes()
        for run in ("again", "resumed"):
            assert (tmp_path / run / name).read_bytes() == want, f"{run}/{name}"
