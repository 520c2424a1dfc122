"""``seekrl-serve``: the configured retriever behind Search-R1's ``/retrieve`` contract.

    seekrl-serve                         # FAISS over the shipped summaries on 127.0.0.1:8000
    seekrl-serve retriever=bm25 port=8001
    curl -X POST http://127.0.0.1:8000/retrieve -H 'Content-Type: application/json' \\
         -d '{"queries": ["2001: A Space Odyssey"], "topk": 3, "return_scores": true}'
"""

from __future__ import annotations

import sys

from framework.cli.app import run_app
from framework.registry import RETRIEVERS
from framework.retrieval.config import ServeConfig
from framework.retrieval.server import serve as run_server
from framework.retrieval.types import RetrievalError


def serve(cfg: ServeConfig) -> None:
    """Open (or build) the index, then serve it until interrupted."""
    try:
        retriever = RETRIEVERS.bind(cfg.retriever)()
    except RetrievalError as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(1) from None
    try:
        run_server(
            retriever,
            cfg.host,
            cfg.port,
            default_topk=cfg.default_topk,
            max_body_bytes=cfg.max_body_bytes,
            limits=cfg.retriever.limits,
            allow_remote=cfg.allow_remote,
        )
    except OSError as exc:
        print(f"[serve.port] {exc}. Fix: choose a free port (port=...).", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        retriever.close()


def main() -> None:
    run_app("serve", serve)


if __name__ == "__main__":
    main()
