"""Wait for a condition by polling it, instead of sleeping a fixed time that is too long on a
quiet machine and too short on a loaded one."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["POLL_S", "wait_until"]

T = TypeVar("T")

# How often the tests ask a real process how it is doing: often enough that a test ends within
# a tenth of a second of what it waits for, seldom enough not to load a 2-core machine.
POLL_S = 0.1


def wait_until(predicate: Callable[[], T], timeout_s: float, interval_s: float = POLL_S,
               *, what: str | Callable[[], str] = "the condition") -> T:
    """Call `predicate` every `interval_s` until it returns something true, and return that;
    fail naming `what` (a text, or a function giving one, e.g. a log tail) after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            detail = what() if callable(what) else what
            raise AssertionError(f"waited {timeout_s:g} s for {detail}, in vain")
        time.sleep(interval_s)
