"""Whether a live worker makes progress: the ``stalled`` of ``/health`` and
what ``fencewatch run``'s supervisor restarts the engine on
(:mod:`streams.live.supervisor`).

A worker is **stalled** when it holds partitions with lag, is not restoring
state, and has committed nothing for ``stall_after`` seconds: its findings
are not being published, whatever the process's threads are doing (a wedged
librdkafka call, a loop that spins on an error, brokers away). Its loop
itself may also stop turning (a call that never returns): ``loop_age``.

A pause of the whole process (SIGSTOP, a suspended VM, a long GC stop) is not
a stall of the worker's own making: when the clock jumps by more than
:data:`FREEZE_GAP_S` between two looks, the counts start again, so a worker
thawed after a freeze gets the time to rejoin and commit before anything
restarts it (the paused-worker tests freeze workers for 30 s and more).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["FREEZE_GAP_S", "Liveness"]

#: Two looks (each second or so) further apart than this: the process was
#: frozen in between.
FREEZE_GAP_S = 5.0


class Liveness:
    """Progress of one worker: commits (:meth:`committed`), turns of its loop
    (:meth:`turned`), and the verdict (:meth:`assess`). Thread-safe: the
    engine records, the /health server and the supervisor's reporter look."""

    def __init__(self, stall_after: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_after = stall_after
        self._clock = clock
        self._lock = threading.Lock()
        now = clock()
        #: Start of the current spell without progress (moved forward by a
        #: commit, by having nothing to do, and by a freeze).
        self._since = now
        self._committed_at = 0.0
        self._loop_at = now
        self._looked_at = now

    def committed(self) -> None:
        """A commit completed (its outputs are published)."""
        self._committed_at = self._clock()

    def turned(self) -> None:
        """The engine's loop went round once more (called at least every second)."""
        self._loop_at = self._clock()

    def assess(
        self, *, partitions: Sequence[int], lag: int | None, recovering: bool
    ) -> dict[str, Any]:
        """The liveness fields of ``/health``: ``stalled`` (bool),
        ``stalled_for`` and ``loop_age`` (seconds, one decimal)."""
        with self._lock:
            now = self._clock()
            if now - self._looked_at > FREEZE_GAP_S:
                # Frozen: what did not happen meanwhile could not have.
                self._since = self._loop_at = now
            self._looked_at = now
            if not partitions or recovering or not lag:
                self._since = now  # nothing to do, or busy restoring
            elif self._committed_at > self._since:
                self._since = self._committed_at
            stalled_for = now - self._since
            loop_age = max(0.0, now - self._loop_at)
        return {
            "stalled": stalled_for >= self.stall_after,
            "stalled_for": round(stalled_for, 1),
            "loop_age": round(loop_age, 1),
        }
