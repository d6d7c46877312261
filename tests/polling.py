"""Waiting for an effect without sleeping a guessed time: poll a predicate until a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(pred: Callable[[], object], what: str, timeout: float = 10.0, every: float = 0.005) -> None:
    """Return once ``pred()`` is true; fail naming ``what`` after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)
