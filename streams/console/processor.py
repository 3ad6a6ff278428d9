"""Whether the live processor makes progress, as the console sees it from
outside: its consumer group's committed offsets against the events topic's
end, every few seconds (issue 42 item 3).

Why from outside, and why this way. ``/health`` of each worker says
``stalled`` (:mod:`streams.live.liveness`), but a worker that is frozen
(SIGSTOP, a suspended VM), dead or wedged cannot say anything, and the
console is where an operator looks. The group's committed offsets are the
processor's progress whatever its engine: each transaction commits them
with its outputs. They are read with a consumer of the processor's group
id that never subscribes (``Consumer.committed()`` only: it never joins the
group, so it cannot take a partition or cause a rebalance), not with the
AdminClient's group calls: those crash the process when the coordinator
moves (librdkafka issues 5040 and 5397; :mod:`streams.kafka.coordinator`).

Per partition: the **lag** (the end of the events topic minus the
committed offset; from the partition's start when nothing is committed
there) and how long the committed offset **has not moved while the lag is
above 0**. A partition still for ``stall_after`` seconds (the worker's own
rule, ``--stall-after``) is stalled. What the console cannot know from
outside: when the offset last moved before the console started (a spell
starts at the console's first look), and whether a worker is busy restoring
its state (a long restore shows as stalled here while ``/health`` says
recovering).

Bounds: at most :data:`MAX_PARTITIONS` partitions are watched (the lowest
numbers; the state says how many the topic has), and the message names at
most :data:`MAX_NAMED` of them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_EVERY_S",
    "MAX_NAMED",
    "MAX_PARTITIONS",
    "NOT_COMMITTED",
    "PartitionProgress",
    "ProcessorState",
    "ProcessorWatch",
    "stall_message",
]

#: Seconds between two looks at the group's offsets.
DEFAULT_EVERY_S = 5.0
#: Partitions of the events topic watched at most (the lowest numbers).
MAX_PARTITIONS = 1024
#: Stalled partitions the message names at most (the rest are counted).
MAX_NAMED = 16
#: The message while the group has no committed offset on any partition.
NOT_COMMITTED = "processor has not committed yet"


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    partition: int
    #: The group's committed offset (None: nothing committed on this partition).
    committed: int | None
    #: The partition's end (high watermark).
    end: int
    lag: int
    #: Seconds the committed offset has not moved while the lag was above 0
    #: (0 with no lag).
    still_s: float


@dataclass(frozen=True, slots=True)
class ProcessorState:
    """The last look (``looked`` False: none yet)."""

    looked: bool = False
    #: Some partition has a committed offset.
    committed: bool = False
    stalled: bool = False
    #: The stalled partitions, lowest first.
    stalled_partitions: tuple[int, ...] = ()
    #: The stalled partitions' lag, summed.
    stalled_lag: int = 0
    #: The shortest time without a commit among the stalled partitions.
    stalled_s: float = 0.0
    #: The lag of every watched partition, summed.
    lag: int = 0
    #: The longest time without a commit of a partition with lag.
    still_s: float = 0.0
    partitions: tuple[PartitionProgress, ...] = ()
    #: Partitions the events topic has (only MAX_PARTITIONS are watched).
    partitions_total: int = 0
    #: Wall-clock time of the look (ms since the epoch; 0: none yet).
    looked_ms: int = 0
    #: What the console shows (None: nothing to show).
    message: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "looked": self.looked,
            "committed": self.committed,
            "stalled": self.stalled,
            "stalled_partitions": list(self.stalled_partitions),
            "stalled_lag": self.stalled_lag,
            "stalled_for_s": round(self.stalled_s, 1),
            "lag": self.lag,
            "still_for_s": round(self.still_s, 1),
            "partitions_watched": len(self.partitions),
            "partitions_total": self.partitions_total,
            "looked_ms": self.looked_ms or None,
            "message": self.message,
            "partitions": [
                {
                    "partition": p.partition,
                    "committed": p.committed,
                    "end": p.end,
                    "lag": p.lag,
                    "still_for_s": round(p.still_s, 1),
                }
                for p in self.partitions
            ],
        }


def stall_message(partitions: tuple[int, ...], lag: int, still_s: float) -> str:
    """``processor stalled: partitions 0,3 with lag 1,204, nothing committed
    for 95 s`` (at most :data:`MAX_NAMED` partitions named)."""
    named = ",".join(str(p) for p in partitions[:MAX_NAMED])
    if len(partitions) > MAX_NAMED:
        named += f" and {len(partitions) - MAX_NAMED} more"
    which = "partitions" if len(partitions) > 1 else "partition"
    return (
        f"processor stalled: {which} {named} with lag {lag:,}, "
        f"nothing committed for {still_s:.0f} s"
    )


class ProcessorWatch:
    """The spells without progress, one look after another (:meth:`observe`,
    from the console's follower thread); :attr:`state` for the pages
    (thread-safe: a look replaces the state whole)."""

    def __init__(
        self,
        group: str,
        stall_after: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        if not stall_after > 0:
            raise ValueError("the stall threshold must be more than 0 seconds")
        self.group = group
        self.stall_after = stall_after
        self._clock = clock
        self._wall_ms = wall_ms
        #: partition -> (committed offset at the last look, start of its spell).
        self._seen: dict[int, tuple[int | None, float]] = {}
        self._lock = threading.Lock()
        self._state = ProcessorState()

    @property
    def state(self) -> ProcessorState:
        return self._state

    def observe(
        self, offsets: Mapping[int, tuple[int | None, int, int]], partitions_total: int
    ) -> ProcessorState:
        """One look: per partition, (committed offset or None, start, end).
        A spell without progress starts when the committed offset moves, or
        while there is nothing to do (no lag); partitions not in ``offsets``
        are forgotten."""
        with self._lock:
            now = self._clock()
            seen: dict[int, tuple[int | None, float]] = {}
            rows = []
            for p in sorted(offsets)[:MAX_PARTITIONS]:
                committed, start, end = offsets[p]
                lag = max(0, end - (start if committed is None else committed))
                before = self._seen.get(p)
                since = (
                    before[1] if before is not None and before[0] == committed and lag > 0 else now
                )
                seen[p] = (committed, since)
                rows.append(PartitionProgress(p, committed, end, lag, now - since))
            self._seen = seen
            stalled = [r for r in rows if r.lag > 0 and r.still_s >= self.stall_after]
            stalled_ids = tuple(r.partition for r in stalled)
            stalled_lag = sum(r.lag for r in stalled)
            stalled_s = min((r.still_s for r in stalled), default=0.0)
            any_committed = any(r.committed is not None for r in rows)
            if stalled:
                message: str | None = stall_message(stalled_ids, stalled_lag, stalled_s)
            else:
                message = None if any_committed else NOT_COMMITTED
            self._state = ProcessorState(
                looked=True,
                committed=any_committed,
                stalled=bool(stalled),
                stalled_partitions=stalled_ids,
                stalled_lag=stalled_lag,
                stalled_s=stalled_s,
                lag=sum(r.lag for r in rows),
                still_s=max((r.still_s for r in rows), default=0.0),
                partitions=tuple(rows),
                partitions_total=partitions_total,
                looked_ms=self._wall_ms(),
                message=message,
            )
            return self._state
