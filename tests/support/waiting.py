"""Waiting on what another thread or process did, never on the clock alone.

A test that sleeps and then asserts races the thing it watches: too short a
sleep fails on a busy machine, too long a one wastes the suite's time.
:func:`wait_until` polls the condition itself and returns as soon as it holds;
its timeout only bounds a failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["wait_until"]


def wait_until(
    condition: Callable[[], object], *, timeout: float, what: str, every: float = 0.02
) -> float:
    """Poll ``condition`` until it is true; return the seconds it took. Fails the
    test with ``what`` when ``timeout`` passes first."""
    start = time.monotonic()
    deadline = start + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not seen within {timeout:g} s")
        time.sleep(every)
    return time.monotonic() - start
