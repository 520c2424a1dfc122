"""The schemas of the apps that build and serve an index: ``seekrl-index`` (:class:`IndexConfig`)
and ``seekrl-serve`` (:class:`ServeConfig`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import MISSING

from framework.config import option
from framework.config.app import RUN_DIR
from framework.problems import Problem, check, check_range
from framework.retrieval.types import remote_problem


@dataclass
class IndexConfig:
    """The ``index`` app: build (or reuse) the configured retriever's corpus store and index, or
    adopt a prebuilt FAISS index file (``adopt=``)."""

    seed: int = 0
    run_dir: str = RUN_DIR
    retriever: Any = MISSING
    smoke_query: str | None = option(
        "2001: A Space Odyssey", "query run once after building; null skips"
    )
    adopt: str | None = option(
        None,
        "prebuilt FAISS index file to adopt instead of building (row i = passage i of "
        "retriever.corpus, as Search-R1's e5_Flat.index and wiki-18.jsonl); linked, not copied",
    )
    adopt_sample: int = option(
        16, "rows whose stored vector is checked against the encoder; 0 skips the check (warns)"
    )
    adopt_min_cosine: float = option(
        0.8, "least cosine between a sampled row's stored vector and its passage encoded now"
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.adopt_sample, "adopt_sample", low=0)
        out += check_range(self.adopt_min_cosine, "adopt_min_cosine", low=-1.0, high=1.0)
        if self.adopt is not None:
            out += check(
                Path(self.adopt).expanduser().is_file(),
                "adopt",
                self.adopt,
                "an existing FAISS index file",
                "point adopt= at the index file (e.g. e5_Flat.index)",
            )
            name = getattr(self.retriever, "name", None)
            out += check(
                name == "faiss",
                "adopt",
                self.adopt,
                f"retriever=faiss (adopting a FAISS index), not {name}",
                "drop the retriever= override, or set retriever=faiss",
            )
        return out


@dataclass
class ServeConfig:
    """The ``serve`` app: the configured retriever behind Search-R1's ``/retrieve`` contract."""

    run_dir: str = RUN_DIR
    retriever: Any = MISSING
    host: str = option("127.0.0.1", "bind address (loopback by default)")
    port: int = 8000
    allow_remote: bool = option(False, "allow a non-loopback host (exposes the index)")
    default_topk: int = option(3, "topk when a request gives none")
    max_body_bytes: int = option(1_000_000, "largest request body")

    def problems(self) -> list[Problem]:
        out = check_range(self.port, "port", low=1, high=65535)
        out += check_range(self.default_topk, "default_topk", low=1)
        out += check_range(self.max_body_bytes, "max_body_bytes", low=1024)
        loopback = self.host in ("127.0.0.1", "localhost", "::1") or self.host.startswith("127.")
        out += check(
            loopback or self.allow_remote,
            "host",
            self.host,
            "a loopback address unless allow_remote=true",
            "keep host=127.0.0.1, or set allow_remote=true to expose the server on purpose",
        )
        remote = remote_problem(
            self.retriever,
            "the server serves an index on this machine",
            f"serve a local index; the {getattr(self.retriever, 'name', '')} backend is a client "
            "of a server",
        )
        out += [remote] if remote is not None else []
        return out
