"""The synth command on a slice of the shipped summaries, and the train app reading its output."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from framework.data.schema import QAItem, read_dataset, write_split
from framework.data.synthesis import SPLITS, quotas_for
from framework.rewards.entity import MATCH_CHOICES, EntityRewardConfig
from framework.rewards.entity_match import entity_match_rate

REPO = Path(__file__).resolve().parents[2]
SIZES = {"train": 120, "validation": 20, "test": 30}


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "framework", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
    )


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory) -> Path:
    """Synthesized splits over the first 1,500 summaries, answerability checked with BM25."""
    root = tmp_path_factory.mktemp("synth")
    proc = cli(
        "synth",
        "dataset.corpus.limit=1500",
        *(f"dataset.{s}_size={n}" for s, n in SIZES.items()),
        "dataset.answerability.retriever=bm25",
        f"dataset.cache_dir={root}/cache",
        f"dataset.output_dir={root}/out",
        f"hydra.run.dir={root}/run",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (root / "stdout.txt").write_text(proc.stdout)
    return root / "out"


@pytest.fixture(scope="module")
def synth_small_dir(tmp_path_factory) -> Path:
    """``dataset=synth_small`` as shipped (2,000 summaries, 40 / 10 / 10, no answerability check)."""
    from framework.cli.app import load_config
    from framework.data.datasets import synthesize

    root = tmp_path_factory.mktemp("synth_small")
    overrides = [f"dataset.output_dir={root}/out", f"dataset.cache_dir={root}/cache"]
    cfg = load_config("synth", ["dataset=synth_small", "dataset.progress=false", *overrides])
    return synthesize(cfg.dataset, log=lambda *a: None)


def reward_configs() -> list[EntityRewardConfig]:
    """Every matching setting a user can give ``reward=e_grpo``."""
    return [
        EntityRewardConfig(name="e_grpo", match=m, lowercase=low, strip_punctuation=strip)
        for m, low, strip in itertools.product(MATCH_CHOICES, (False, True), (False, True))
    ]


@pytest.mark.slow
def test_splits_report_and_files(synth_dir):
    for split, n in SIZES.items():
        jsonl = read_dataset(synth_dir / f"{split}.jsonl")
        assert read_dataset(synth_dir / f"{split}.parquet") == jsonl
        assert (
            len(jsonl) >= n * 0.5
        )  # min_fill: a 1,500-article slice cannot always fill small splits
        assert {it.hops for it in jsonl} <= {1, 2, 3, 4}
        for it in jsonl:
            assert it.entities and len(it.entities) == it.hops + 1 == len(it.chain)
            assert it.golden_answers[0] == it.chain[-1]
            assert it.extra["answerable"] is True
    report = (synth_dir / "quality_report.md").read_text()
    assert "Answerability" in report and "Answer-uniqueness rejections" in report
    data = json.loads((synth_dir / "quality_report.json").read_text())
    assert data["answerability"]["retriever"] == "bm25" and 0 < data["answerability"]["rate"] <= 1
    assert json.loads((synth_dir / "graph_stats.json").read_text())["articles"] == 1500


def test_splits_share_no_answer_and_no_chain(synth_dir):
    splits = {s: read_dataset(synth_dir / f"{s}.jsonl") for s in SIZES}
    answers = {s: {it.chain[-1] for it in items} for s, items in splits.items()}
    chains = {s: {it.chain for it in items} for s, items in splits.items()}
    for a in SIZES:
        for b in SIZES:
            if a < b:
                assert not answers[a] & answers[b], (a, b)
                assert not chains[a] & chains[b], (a, b)
    assert len(chains["train"]) == len(splits["train"])  # no repeated chain within a split


@pytest.mark.slow  # over 10 s on 2 cores (subprocess apps or several tiny runs)
def test_train_app_reads_the_synthesized_splits(synth_dir, tmp_path):
    proc = cli(
        "train",
        "dry_run=true",
        "dataset=files",
        f"dataset.train={synth_dir}/train.jsonl",
        f"dataset.validation={synth_dir}/validation.parquet",
        f"hydra.run.dir={tmp_path}/run",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "dataset    files" in proc.stdout and "data               train " in proc.stdout


@pytest.mark.slow  # a synthesis and a train start: about 14 s
def test_entity_reward_refuses_a_dataset_without_entities(tmp_path):
    plain = [
        QAItem(f"nq-{i}", f"who wrote book {i}?", (f"author {i}",), None, None, None, "nq")
        for i in range(3)
    ]
    write_split(plain, tmp_path, "train")
    args = [
        "dry_run=true",
        "dataset=files",
        f"dataset.train={tmp_path}/train.jsonl",
        "dataset.validation=null",
    ]
    proc = cli("train", *args, f"hydra.run.dir={tmp_path}/run")  # default algorithm: e_grpo
    assert proc.returncode == 2
    assert (
        "reward=e_grpo needs ground-truth entities" in proc.stderr and "train.jsonl" in proc.stderr
    )
    # GRPO needs no entities, but the default cold-start SFT's expert cannot follow plain questions
    proc = cli("train", "algorithm=grpo", *args, f"hydra.run.dir={tmp_path}/run2")
    assert proc.returncode == 2 and proc.stderr.startswith("[warm_start.sft] "), proc.stderr
    no_sft = ["algorithm=grpo", "warm_start.sft=false"]
    proc = cli("train", *no_sft, *args, f"hydra.run.dir={tmp_path}/run3")
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow  # over 10 s on 2 cores (subprocess apps or several tiny runs)
def test_too_few_linked_entities_is_a_clear_error(tmp_path):
    proc = cli(
        "synth",
        "dataset.corpus.limit=25",
        "dataset.answerability.enabled=false",
        f"dataset.output_dir={tmp_path}/out",
        f"hydra.run.dir={tmp_path}/run",
    )
    assert proc.returncode == 1
    assert "[dataset.train_size] got" in proc.stderr and "Fix:" in proc.stderr


@pytest.mark.parametrize("which", ["synth_dir", "synth_small_dir"])
def test_no_question_gives_a_hidden_entity_away(which, request):
    """Under every reward setting, restating a question finds its anchor and nothing it hides."""
    out = request.getfixturevalue(which)
    configs = reward_configs()
    for split in SPLITS:
        for it in read_dataset(out / f"{split}.jsonl"):
            for cfg in configs:
                hidden = entity_match_rate(it.question, it.entities[1:], cfg)
                assert hidden == 0.0, (it.question, it.entities[1:], cfg)
                assert entity_match_rate(it.question, it.entities[:1], cfg) == 1.0


def test_hop_counts_equal_quotas_or_the_shortfall_is_reported(synth_dir):
    report = json.loads((synth_dir / "quality_report.json").read_text())
    manifest = json.loads((synth_dir / "manifest.json").read_text())
    stdout = (synth_dir.parent / "stdout.txt").read_text()
    short = {(s["split"], s["hops"]): s for s in report["shortfall"]}
    assert manifest["shortfall"] == report["shortfall"]
    for split, n in SIZES.items():
        got = Counter(it.hops for it in read_dataset(synth_dir / f"{split}.jsonl"))
        for hops, wanted in quotas_for(n, report["settings"]["hop_weights"]).items():
            if (split, hops) not in short:
                assert got[hops] == wanted, (split, hops)
                continue
            s = short[(split, hops)]
            assert (s["got"], s["wanted"]) == (got[hops], wanted) and got[hops] < wanted
            assert s["why"]
            line = f"[dataset] {split} {hops}-hop quota not filled: got {got[hops]} of {wanted}: "
            assert line + s["why"] in stdout


def test_synth_small_hop_mix_is_exact(synth_small_dir):
    manifest = json.loads((synth_small_dir / "manifest.json").read_text())
    assert manifest["shortfall"] == []
    report = json.loads((synth_small_dir / "quality_report.json").read_text())
    weights = report["settings"]["hop_weights"]
    for split in SPLITS:
        items = read_dataset(synth_small_dir / f"{split}.jsonl")
        size = report["settings"][f"{split}_size"]
        quota = {h: n for h, n in quotas_for(size, weights).items() if n}
        assert dict(Counter(it.hops for it in items)) == quota, split
