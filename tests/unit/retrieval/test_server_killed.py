"""A retrieval server killed with SIGKILL in the middle of a rollout: the agent loop stops with
:class:`RetrieverUnavailable` after the client's retries, in bounded time, instead of hanging or
feeding the model "search failed" observations."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from framework.retrieval.http import HttpRetriever, HttpRetrieverConfig
from framework.retrieval.types import RetrievalError, RetrieverUnavailable
from framework.rollout.config import AgentConfig
from framework.rollout.engine import AgentLoop
from tests.unit.rollout.fakes import FakeBackend, FakeTokenizer, search_call

REPO = Path(__file__).resolve().parents[3]
SERVE = """
import sys, time
from tests.unit.retrieval.server_fakes import FakeRetriever, running_server

with running_server(FakeRetriever(delay_s=float(sys.argv[1]))) as (url, _):
    print(url, flush=True)
    time.sleep(600)
"""
#: client settings: 3 attempts, waiting 0.1 s then 0.2 s between them
RETRIES, BACKOFF_S = 3, 0.1


def serve(delay_s: float) -> tuple[subprocess.Popen, str]:
    """A server process over the six-passage fake; its URL once it accepts connections."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(delay_s)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    url = proc.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), url
    return proc, url


def loop_over(url: str, scripts: list[list[str]]) -> tuple[AgentLoop, HttpRetriever]:
    cfg = HttpRetrieverConfig(
        name="http", url=url, timeout_s=10.0, retries=RETRIES, backoff_s=BACKOFF_S
    )
    retriever = HttpRetriever(cfg=cfg)
    backend = FakeBackend(FakeTokenizer(), scripts)
    return AgentLoop(backend, retriever, AgentConfig(system_prompt="Tools.")), retriever


def test_server_killed_between_turns_stops_the_loop_with_a_clear_error():
    proc, url = serve(delay_s=0.0)
    scripts = [[search_call("Paris capital"), search_call("Nile river"), "<answer>x</answer>"]] * 2
    loop, retriever = loop_over(url, scripts)
    turns = 0

    def kill_after_first_turn(done: int, total: int) -> None:
        nonlocal turns
        turns += 1
        if turns == 1:  # the first searches were answered: now the server dies
            assert "Paris" in loop.backend.tokenizer.decode(loop.backend.known[0])
            proc.kill()
            proc.wait()

    try:
        start = time.monotonic()
        with pytest.raises(RetrieverUnavailable) as info:
            loop.run(["q0", "q1"], 1, progress=kill_after_first_turn)
        elapsed = time.monotonic() - start
    finally:
        proc.kill()
        retriever.close()
    message = str(info.value)
    assert f"cannot reach {url}/retrieve after {RETRIES} attempts" in message
    assert "Fix: start one with `seekrl-serve`" in message
    assert isinstance(info.value, RetrievalError)  # what train / eval / sft report and exit on
    assert elapsed < 5.0  # retries of a refused connection: backoff 0.1 + 0.2 s, no hang
    print(f"\nkilled between turns: RetrieverUnavailable after {elapsed:.2f} s")


def test_server_killed_during_a_request_stops_the_loop_with_a_clear_error():
    proc, url = serve(delay_s=3.0)  # every search takes 3 s: the kill lands inside one
    loop, retriever = loop_over(url, [[search_call("Paris capital"), "<answer>x</answer>"]])
    killer = threading.Timer(1.0, proc.kill)
    try:
        start = time.monotonic()
        killer.start()
        with pytest.raises(RetrieverUnavailable) as info:
            loop.run(["q0"], 1)
        elapsed = time.monotonic() - start
    finally:
        killer.cancel()
        proc.kill()
        proc.wait()
        retriever.close()
    message = str(info.value)
    assert f"cannot reach {url}/retrieve after {RETRIES} attempts" in message
    # the request in flight lost its connection; the retries found nobody listening
    assert "ConnectError" in message
    assert 1.0 <= elapsed < 6.0
    print(f"\nkilled mid-request: RetrieverUnavailable after {elapsed:.2f} s")
