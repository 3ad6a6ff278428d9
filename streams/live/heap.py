"""Give the C heap's free pages back to the operating system once a restore
is done, and once a live worker goes quiet after work (:class:`IdleTrim`).

A restore reads the whole changelog through librdkafka (a 64 MiB prefetch)
and builds a Python object per record on the way; what it keeps is the
table. glibc keeps most of what was freed in its heap, between the values
the table kept, so the worker's resident memory after a restore depended
on how the reads happened to interleave: 837-1,221 B per idle key over
eight starts of the same build on the same 300,000-key changelog, against
819-831 B with the free pages released (bench/live_restore.py, 2026-12-04;
docs/performance.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import sys
from collections.abc import Callable

__all__ = ["IDLE_TRIM_S", "IdleTrim", "release_free_heap"]

log = logging.getLogger(__name__)

#: Seconds without a processed event before a worker that worked gives its
#: free heap back (a burst's churn of states and batches leaves glibc holding
#: pages it will not return by itself: 591 -> 424 MB resident after 2,000,000
#: events of 250,000 keys, docs/performance.md).
IDLE_TRIM_S = 10.0


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, looked up once; ``None`` where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.malloc_trim  # absent from musl: AttributeError
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    trim: Callable[[int], int] = fn
    return trim


def release_free_heap() -> bool:
    """Return the heap's free pages to the operating system (glibc's
    ``malloc_trim(0)``, which also releases whole free pages between live
    allocations). Best effort: ``False`` where the C library has no such
    call (not Linux, or musl); never raises."""
    trim = _malloc_trim()
    if trim is None:
        return False
    try:
        trim(0)
    except Exception as exc:  # a foreign call must never stop a worker
        log.debug("malloc_trim failed: %r", exc)
        return False
    return True


class IdleTrim:
    """When a live worker should give its free heap back: once per quiet
    spell, :data:`IDLE_TRIM_S` after the last processed event, and only if
    it processed something since the last time (an idle worker is not
    walked every spell; a busy one never is, as ``malloc_trim`` holds the
    allocator's lock while it walks the heap, 25 ms for ~200 MB)."""

    __slots__ = ("_dirty", "_last", "_quiet_since", "quiet_s")

    def __init__(self, quiet_s: float = IDLE_TRIM_S) -> None:
        self.quiet_s = quiet_s
        self._last = 0
        self._quiet_since = 0.0
        self._dirty = False

    def due(self, processed: int, now: float) -> bool:
        """Called now and then with the count of events processed so far:
        whether to release the free heap now."""
        if processed != self._last:
            self._last = processed
            self._quiet_since = now
            self._dirty = True
            return False
        if self._dirty and now - self._quiet_since >= self.quiet_s:
            self._dirty = False
            return True
        return False
