"""Waiting for other processes (workers, the queue runner) to get somewhere."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float, what: str) -> None:
    """Poll `predicate` every 0.1 s; fail the test naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)
