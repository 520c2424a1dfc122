"""Pack what a machine without network needs to run this checkout, in parts of at most --max-mib.

    python3 tools/offline_bundle.py .offline                    # for Python 3.12, parts <= 60 MiB
    python3 tools/offline_bundle.py .offline --bench --encoder-fp16
    python3 tools/offline_bundle.py .offline --bench --no-encoder   # the GPU check: ~24 MiB
    python3 tools/offline_bundle.py .offline --no-wheels        # assets and cache only

For a machine that already has torch, transformers and lightning (a lent GPU box, an air-gapped
cluster node) but cannot reach a package index or a model hub. The bundle holds:

- wheels of the project's other runtime needs (``--bench``: TRL and its own), at the versions
  installed here, for ``--python`` (``pip download``; antlr4, which publishes no wheel, is built);
- the asset packages as bare folders, found by name without an install: the Wikipedia summaries
  (English only) and the MiniLM sentence encoder (``--encoder-fp16`` halves it to 45 MB: the index
  is then rebuilt there, since its key follows the weights; ``--no-encoder`` leaves it out, for
  runs that need no dense retrieval and no new synthesized data: ``tools/gpu_check.sh``, whose
  bundle must fit one 64 MiB transfer with the checkout);
- a cache for ``$SEEKRL_CACHE``: SmolLM2's tokenizer (no weights: ``rollout.policy.source=shape``
  or ``tiny`` policies) and every synthesized dataset cached here.

Each part is a folder ``part-N`` with its share of the files and the same ``env.sh``. On the other
machine, from the checkout, ``source part-N/env.sh`` for each part present (any order, any number
of calls: a part installed once is skipped) installs it into ``$SEEKRL_OFFLINE`` (default
``/tmp/seekrl-offline``) and exports ``PYTHONPATH`` and ``SEEKRL_CACHE``. Parts exist because some
transports cap what one transfer carries (the device machine of this project's sessions: 64 MiB).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: runtime needs missing from a machine that has torch, transformers and lightning
WHEELS = ("hydra-core", "omegaconf", "antlr4-python3-runtime", "faiss-cpu", "bm25s", "gguf")
#: what tools/bench/train_step.py adds (TRL and what it imports that such a machine lacks)
BENCH_WHEELS = ("trl", "datasets", "dill", "multiprocess")
#: published as a source distribution only: built here (pure Python)
BUILD_HERE = ("antlr4-python3-runtime",)
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
)
TOKENIZER_FILES = (
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
)
MIB = 1024 * 1024

ENV_SH = r"""# source this file from the checkout on the offline machine (tools/offline_bundle.py made it)
_part="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export SEEKRL_OFFLINE="${SEEKRL_OFFLINE:-/tmp/seekrl-offline}"
mkdir -p "$SEEKRL_OFFLINE/site" "$SEEKRL_OFFLINE/cache" "$SEEKRL_OFFLINE/done"
if [ ! -f "$SEEKRL_OFFLINE/done/$(basename "$_part")" ]; then
  if ls "$_part"/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SEEKRL_OFFLINE/site" "$_part"/*.whl || return 1
  fi
  for f in "$_part"/site-*.tgz; do [ -f "$f" ] && tar xzf "$f" -C "$SEEKRL_OFFLINE/site"; done
  for f in "$_part"/cache-*.tgz; do [ -f "$f" ] && tar xzf "$f" -C "$SEEKRL_OFFLINE/cache"; done
  touch "$SEEKRL_OFFLINE/done/$(basename "$_part")"
fi
case ":${PYTHONPATH:-}:" in
  *":$SEEKRL_OFFLINE/site:"*) ;;
  *) export PYTHONPATH="$SEEKRL_OFFLINE/site:$PWD${PYTHONPATH:+:$PYTHONPATH}" ;;
esac
export SEEKRL_CACHE="$SEEKRL_OFFLINE/cache" HF_HUB_OFFLINE=1
"""


@dataclass(frozen=True)
class Item:
    """One file of the bundle, with its size in bytes."""

    path: Path
    size: int


def pack(items: list[Item], max_bytes: int) -> list[list[Item]]:
    """Items into parts of at most ``max_bytes`` each: first fit, largest first.

    Raises:
        ValueError: an item alone is larger than a part may be.
    """
    too_big = [i for i in items if i.size > max_bytes]
    if too_big:
        worst = max(too_big, key=lambda i: i.size)
        raise ValueError(
            f"[--max-mib] got {max_bytes / MIB:.0f}; expected at least {worst.size / MIB:.1f} "
            f"(the size of {worst.path.name}). Fix: raise --max-mib, or pass --encoder-fp16 for the "
            "sentence encoder."
        )
    parts: list[list[Item]] = []
    room: list[int] = []
    for item in sorted(items, key=lambda i: (-i.size, i.path.name)):
        for k, free in enumerate(room):
            if item.size <= free:
                parts[k].append(item)
                room[k] -= item.size
                break
        else:
            parts.append([item])
            room.append(max_bytes - item.size)
    return parts


def tgz(out: Path, members: dict[str, Path | bytes]) -> Path:
    """A gzip tar of ``members`` (name in the archive -> file, or the bytes of one)."""
    with tarfile.open(out, "w:gz") as tar:
        for name, src in sorted(members.items()):
            if isinstance(src, bytes):
                info = tarfile.TarInfo(name)
                info.size = len(src)
                tar.addfile(info, io.BytesIO(src))
            else:
                tar.add(src, arcname=name)
    return out


def package_folder(name: str) -> Path:
    from framework.paths import package_dir

    folder = package_dir(name)
    if folder is None:
        raise SystemExit(
            f"[asset] got no installed package '{name}'; expected the asset packages here. "
            "Fix: bash tools/setup.sh"
        )
    return folder


def encoder_items(work: Path, fp16: bool) -> list[Path]:
    """The MiniLM package folder (its model, weights in fp16 with ``fp16``) as one archive."""
    from framework.retrieval.encoder import MINILM_PACKAGE

    src = package_folder(MINILM_PACKAGE) / "model"
    members: dict[str, Path | bytes] = {f"{MINILM_PACKAGE}/__init__.py": b""}
    for f in src.rglob("*"):
        if f.is_file() and f.name != "README.md":
            members[f"{MINILM_PACKAGE}/model/{f.relative_to(src).as_posix()}"] = f
    if fp16:
        from safetensors.torch import load_file, save_file

        weights = src / "model.safetensors"
        half = work / "minilm-fp16.safetensors"
        tensors = {
            k: (v.half() if v.is_floating_point() else v).contiguous()
            for k, v in load_file(weights).items()
        }
        save_file(tensors, half, metadata={"format": "pt"})
        members[f"{MINILM_PACKAGE}/model/model.safetensors"] = half
    return [tgz(work / "site-encoder.tgz", members)]


def asset_items(work: Path, cache: Path) -> list[Path]:
    """The Wikipedia summaries (a bare package folder) and the cache (tokenizer, datasets)."""
    from framework.retrieval.corpus import WIKI_FILE, WIKI_PACKAGE
    from framework.rollout.policy import smollm2_folder

    wiki = package_folder(WIKI_PACKAGE)
    site = tgz(
        work / "site-wiki.tgz",
        {
            f"{WIKI_PACKAGE}/__init__.py": b"",
            f"{WIKI_PACKAGE}/{'/'.join(WIKI_FILE)}": wiki.joinpath(*WIKI_FILE),
        },
    )
    model = smollm2_folder(str(cache))
    if not (model / "tokenizer.json").is_file():
        raise SystemExit(
            f"[cache] got no SmolLM2 tokenizer in {model}; expected the converted model there. "
            "Fix: run any seekrl command that loads SmolLM2 once (seekrl-train, for one)."
        )
    members: dict[str, Path | bytes] = {
        f"models/{model.name}/{name}": model / name
        for name in TOKENIZER_FILES
        if (model / name).is_file()
    }
    for data in sorted((cache / "data").glob("*/manifest.json")):
        for f in data.parent.iterdir():
            if f.is_file():
                members[f"data/{data.parent.name}/{f.name}"] = f
    return [site, tgz(work / "cache-assets.tgz", members)]


def wheel_specs(bench: bool) -> list[str]:
    """``name==version`` of each wheel: the version installed here, else the project's pin (the
    ``bench`` extra pins TRL), else the newest (said on stderr)."""
    import re

    text = (REPO / "pyproject.toml").read_text()  # the pins are quoted "name==version" entries
    pins = {n.lower(): v for n, v in re.findall(r'"([A-Za-z0-9_.-]+)==([^";\s]+)"', text)}
    specs = []
    for name in WHEELS + (BENCH_WHEELS if bench else ()):
        try:
            specs.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            if name in pins:
                specs.append(f"{name}=={pins[name]}")
            else:
                print(
                    f"offline_bundle: {name} is not installed here; taking its newest",
                    file=sys.stderr,
                )
                specs.append(name)
    return specs


def wheel_items(work: Path, python: str, specs: list[str]) -> list[Path]:
    """Wheels of ``specs`` for ``python``."""
    wheels = work / "wheels"
    wheels.mkdir(exist_ok=True)
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    for spec in specs:
        if spec.split("==")[0] in BUILD_HERE:
            cmd = [*pip, "wheel", "--no-deps", "-w", str(wheels), spec]
        else:
            plat = [a for p in PLATFORMS for a in ("--platform", p)]
            cmd = [*pip, "download", "--no-deps", "--only-binary=:all:", "-d", str(wheels)]
            cmd += ["--python-version", python, "--implementation", "cp", *plat, spec]
        subprocess.run(cmd, check=True)
    return sorted(wheels.glob("*.whl"))


def write_parts(out: Path, files: list[Path], max_mib: float) -> list[Path]:
    """``out/part-N`` folders holding ``files`` (moved) and ``env.sh`` each."""
    reserve = len(ENV_SH.encode())
    parts = pack([Item(f, f.stat().st_size) for f in files], int(max_mib * MIB) - reserve)
    folders = []
    for n, part in enumerate(parts, 1):
        folder = out / f"part-{n}"
        folder.mkdir(parents=True)
        for item in part:
            shutil.move(str(item.path), folder / item.path.name)
        (folder / "env.sh").write_text(ENV_SH)
        folders.append(folder)
    return folders


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out", help="a new folder for the parts")
    p.add_argument("--python", default="3.12", help="the other machine's Python (X.Y)")
    p.add_argument("--max-mib", type=float, default=60.0, help="most MiB a part may hold")
    p.add_argument("--bench", action="store_true", help="add TRL for tools/bench/train_step.py")
    encoder = p.add_mutually_exclusive_group()
    encoder.add_argument(
        "--encoder-fp16", action="store_true", help="MiniLM weights in fp16 (45 MB)"
    )
    encoder.add_argument(
        "--no-encoder",
        action="store_true",
        help="no MiniLM (BM25 only, the cached datasets only: faiss and hybrid retrievers and "
        "new synthesized data need it)",
    )
    p.add_argument("--no-wheels", action="store_true", help="assets and cache only")
    p.add_argument("--cache", default=None, help="the cache to copy from (default: $SEEKRL_CACHE)")
    args = p.parse_args()

    from framework.paths import cache_root

    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        raise SystemExit(
            f"[out] got {out}, which is not empty; expected a new folder. Fix: remove it."
        )
    specs = [] if args.no_wheels else wheel_specs(args.bench)
    work = out / ".work"
    work.mkdir(parents=True)
    try:
        files = asset_items(work, cache_root(args.cache))
        if not args.no_encoder:
            files += encoder_items(work, args.encoder_fp16)
        files += wheel_items(work, args.python, specs)
        folders = write_parts(out, files, args.max_mib)
    except BaseException as e:
        shutil.rmtree(out, ignore_errors=True)  # no half-made bundle to mistake for a whole one
        if isinstance(e, ValueError):
            raise SystemExit(str(e)) from None
        raise
    shutil.rmtree(work)
    for folder in folders:
        size = sum(f.stat().st_size for f in folder.iterdir()) / MIB
        print(f"{folder}: {size:.1f} MiB ({', '.join(sorted(f.name for f in folder.iterdir()))})")
    print(
        f"On the other machine, from the checkout: for p in {out}/part-*; do source $p/env.sh; done"
    )


if __name__ == "__main__":
    main()
