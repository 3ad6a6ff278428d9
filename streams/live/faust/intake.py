"""The events topic's records, taken from faust's fetcher in batches.

Why: faust-streaming 0.15.3 moves every record through its per-message path
(fetcher -> ``Service.wait_first`` per record -> conductor -> channel queue ->
stream iterator -> event -> sensors -> agent). Measured
(``bench/live_faust_floor.py``, figures in docs/live.md), faust doing
*nothing* with the records tops out below the throughput target before any
work is done. So the fetcher's ``getmany`` (already replaced by
:mod:`streams.live.faust.seam`) hands records of the events topic to an
:class:`Intake` instead of yielding them to the conductor, and the live
runtime takes them from there in batches.

What faust still does: group membership and assignment, pausing partitions
during recovery, the per-partition transactional producers and the commit
(which computes offsets from what :meth:`faust.transport.consumer.Consumer.ack`
recorded). What :meth:`Intake.accept` keeps of faust's per-record path is the
bookkeeping the commit depends on, done as faust's ``_drain_messages`` does
it: the read offset per partition (records below it are redeliveries and are
dropped) and the gaps between consecutive offsets (transaction markers of a
transactional input), which faust must know to commit past them.

Records are not registered as faust's "unacked" messages: faust's revocation
waits for those without a time limit, and a batch dropped because of a
rebalance is never acked. The commit gate (:mod:`streams.live.faust.txn`) is what
keeps a commit from splitting a batch.

Bound: at most :attr:`Intake.maxsize` records wait here; when it is full the
fetcher waits (it stops fetching, so the broker keeps the rest).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from streams.live.faust import seam as faust_seam

__all__ = ["Intake", "TapMessage"]


class TapMessage:
    """One record of the events topic, with what faust's ``Consumer.ack``
    reads (``tp``, ``topic``, ``offset``, ``acked``). Weak-referenceable
    because ``Consumer.ack`` discards it from a ``WeakSet``."""

    __slots__ = (
        "__weakref__",
        "acked",
        "generation_id",
        "key",
        "offset",
        "partition",
        "timestamp",
        "topic",
        "tp",
        "value",
    )

    def __init__(
        self,
        tp: Any,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        generation_id: int,
        timestamp: int | None = None,
    ) -> None:
        self.tp = tp
        self.topic: str = tp.topic
        self.partition: int = tp.partition
        self.offset = offset
        self.key = key
        self.value = value
        self.generation_id = generation_id
        #: The record's Kafka timestamp (ms): the status topic's times.
        self.timestamp = timestamp
        self.acked = False


class Intake:
    """A bounded FIFO of :class:`TapMessage` between faust's fetcher and the
    batch processor; per-partition order is the fetch order."""

    def __init__(self, topics: frozenset[str], *, maxsize: int = 4000) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be >= 1")
        self.topics = topics
        self.maxsize = maxsize
        self._items: deque[TapMessage] = deque()
        self._not_empty = asyncio.Event()
        self._not_full = asyncio.Event()
        self._not_full.set()

    def __len__(self) -> int:
        return len(self._items)

    def offer(self, consumer: Any, tp: Any, record: Any, generation_id: int) -> bool:
        """:meth:`accept` without awaiting, for the common case: ``False``
        (nothing done) when the record needs a gap noted or the intake is
        full, and the caller must ``await accept(...)`` instead. Saves a
        coroutine per record on the fetcher's path."""
        offset: int = record.offset
        read_offset = faust_seam.read_offsets(consumer)
        r_offset = read_offset.get(tp)
        if r_offset is not None:
            if offset < r_offset:
                return True  # already taken (faust drops these too)
            if r_offset and offset - r_offset > 1:
                return False
        if len(self._items) >= self.maxsize:
            return False
        self._items.append(
            TapMessage(tp, offset, record.key, record.value, generation_id, record.timestamp)
        )
        self._not_empty.set()
        read_offset[tp] = offset
        return True

    async def accept(self, consumer: Any, tp: Any, record: Any, generation_id: int) -> None:
        """Take ``record`` (an aiokafka ConsumerRecord of ``tp``) from faust's
        fetcher, with the read-offset and gap bookkeeping of faust's
        ``Consumer._drain_messages``; waits while the intake is full."""
        offset: int = record.offset
        read_offset = faust_seam.read_offsets(consumer)
        r_offset = read_offset.get(tp)
        if r_offset is not None and offset < r_offset:
            return  # already taken (faust drops these too)
        if r_offset and offset - r_offset > 1:
            # Offsets without a record (transaction markers): faust commits
            # past them only if it knows the gap.
            await faust_seam.add_gap(consumer, tp, r_offset + 1, offset)
        while len(self._items) >= self.maxsize:
            self._not_full.clear()
            await self._not_full.wait()
        self._items.append(
            TapMessage(tp, offset, record.key, record.value, generation_id, record.timestamp)
        )
        self._not_empty.set()
        read_offset[tp] = offset

    async def wait(self) -> None:
        """Until at least one record is waiting."""
        while not self._items:
            self._not_empty.clear()
            await self._not_empty.wait()

    def take(self, n: int) -> list[TapMessage]:
        """Up to ``n`` records, oldest first."""
        items = self._items
        count = min(n, len(items))
        out = [items.popleft() for _ in range(count)]
        if len(items) < self.maxsize:
            self._not_full.set()
        return out

    def clear(self) -> None:
        self._items.clear()
        self._not_full.set()
