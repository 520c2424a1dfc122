"""Synthesis stopped part way (Ctrl-C, SIGTERM, a kill while writing the manifest) leaves no output
that a rerun would take as finished, and the rerun writes the questions an uninterrupted run does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from framework.data import datasets
from framework.data.datasets import synth_dataset, synth_ready, synthesize
from framework.data.schema import read_dataset
from framework.data.synthesis import SPLITS, QuestionSynthesizer
from tests.unit.data.test_synthesis import grid_articles, synth_cfg, write_corpus

REPO = Path(__file__).resolve().parents[3]


def quiet(*args: object) -> None:
    pass


@pytest.fixture
def cfg(tmp_path: Path):
    return synth_cfg(tmp_path, write_corpus(tmp_path / "corpus.jsonl", grid_articles()))


def splits(out: Path) -> dict:
    return {s: read_dataset(out / f"{s}.jsonl") for s in SPLITS}


def test_a_rerun_cut_while_writing_splits_is_not_taken_as_finished(cfg, monkeypatch):
    out = synthesize(cfg, log=quiet)
    reference = splits(out)
    assert synth_ready(cfg)
    write_split = datasets.write_split

    def cut_at_validation(items, directory, split):
        if split == "validation":
            raise KeyboardInterrupt  # train.jsonl is new, validation and test are not written
        return write_split(items, directory, split)

    monkeypatch.setattr(datasets, "write_split", cut_at_validation)
    with pytest.raises(KeyboardInterrupt):
        synthesize(cfg, log=quiet)  # seekrl-synth always synthesizes, over earlier output
    assert not (out / "manifest.json").exists() and not synth_ready(cfg)

    monkeypatch.setattr(datasets, "write_split", write_split)
    assert synth_dataset("train", cfg=cfg) == reference["train"]  # synthesized again
    assert synth_ready(cfg) and splits(out) == reference


def test_interrupted_generation_leaves_no_manifest(cfg, monkeypatch):
    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(QuestionSynthesizer, "generate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        synthesize(cfg, log=quiet)
    assert not synth_ready(cfg)
    assert not (cfg.directory() / "manifest.json").exists()


def test_a_kill_while_writing_the_manifest_leaves_none(cfg, monkeypatch):
    write_text = Path.write_text

    def killed_mid_write(self, data, *args, **kwargs):
        if self.name.startswith("manifest.json"):
            write_text(self, data[: len(data) // 2], *args, **kwargs)
            raise KeyboardInterrupt  # the process dies with half the manifest on disk
        return write_text(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", killed_mid_write)
    with pytest.raises(KeyboardInterrupt):
        synthesize(cfg, log=quiet)
    monkeypatch.setattr(Path, "write_text", write_text)
    assert not (cfg.directory() / "manifest.json").exists()  # only manifest.json.tmp
    assert not synth_ready(cfg)


DRIVER = """
import os, time
from framework.data.synthesis import QuestionSynthesizer

generate = QuestionSynthesizer.generate


def slow(self, *args, **kwargs):
    print("generating", flush=True)
    time.sleep(120)  # SIGTERM arrives here
    return generate(self, *args, **kwargs)


QuestionSynthesizer.generate = slow
from framework.cli.synth import main

main()
"""


@pytest.mark.slow
def test_sigterm_during_synthesis_stops_in_seconds_without_a_manifest(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl", grid_articles())
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        str(driver),
        "dataset.corpus.source=jsonl",
        f"dataset.corpus.path={corpus}",
        "dataset.train_size=8",
        "dataset.validation_size=3",
        "dataset.test_size=3",
        "dataset.hop_weights=[0.5,0.5]",
        "dataset.answerability.enabled=false",
        f"dataset.output_dir={out}",
        f"dataset.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        for line in proc.stdout:  # Hydra's log lines and the graph summary come first
            if line.strip() == "generating":
                break
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        stopped_s = time.monotonic() - sent
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert stopped_s < 5.0
    assert "[synth] interrupted; no manifest.json was written" in err
    assert (out / "graph_stats.json").is_file() and not (out / "manifest.json").exists()
    print(f"\nSIGTERM during synthesis: exit 130 after {stopped_s:.2f} s, no manifest")
