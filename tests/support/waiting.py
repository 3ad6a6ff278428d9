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


def blocked_reading(pid: int, fd: int = 0) -> bool:
    """Whether process ``pid``'s main thread is blocked in ``read(fd, ...)`` (Linux,
    x86-64/arm64 syscall numbers): it has consumed what it was given and waits for more.
    What a test of a reader waits for before it interrupts it."""
    try:
        fields = open(f"/proc/{pid}/syscall").read().split()  # noqa: SIM115
    except OSError:
        return False
    # read is syscall 0 on x86-64 and 63 on arm64; the first argument is the fd.
    return len(fields) > 1 and fields[0] in ("0", "63") and int(fields[1], 16) == fd
