"""sigterm_as_interrupt: SIGTERM raises KeyboardInterrupt inside the block, and only there."""

from __future__ import annotations

import os
import signal
import time

import pytest

from framework.interrupt import sigterm_as_interrupt


def test_sigterm_raises_keyboard_interrupt_inside_and_the_old_handler_comes_back():
    seen: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"), sigterm_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # cut short by the handler
        os.kill(os.getpid(), signal.SIGTERM)  # outside the block: the earlier handler
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_only_the_first_sigterm_interrupts_so_the_stages_cleanup_runs_to_its_end():
    # a study killed outright sends its child one SIGTERM per thread of its that ends
    cleaned = False
    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # cut short by the handler
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # the next one, during the cleanup
            time.sleep(0.1)  # (a handler runs between bytecodes: give it the chance)
            cleaned = True
    assert cleaned
