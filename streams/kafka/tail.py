r"""A positioned topic reader for consumers that follow a topic and may keep a
durable position: ``fencewatch findings`` and the findings consumer API.

* Every partition of the topic is *assigned* (never a group subscription):
  a consumer group, when named, only stores the position (offset commits
  work without group membership), so two followers with one group name do not
  split the partitions between them, and a restart resumes at once, without a
  rebalance. The partitions are those the topic has when the reader starts.
* ``isolation.level=read_committed``: records of aborted transactions are
  never returned.
* The start is the group's committed offset where there is one, else the
  ``start`` bound, in the bounded reader's vocabulary
  (:mod:`streams.kafka.reader`): :data:`BEGINNING` (log start), :data:`END`
  (the end when the reader starts: only new records), a :class:`Timestamp`,
  an :class:`Offset` or :class:`PartitionOffsets`. Records are
  :class:`TopicRecord`\ s.
* ``stop_at_end``: the read ends at the high watermarks captured at start (a
  partition whose last records are transaction markers ends at its EOF).
* Client exceptions leave as :class:`~streams.errors.BrokerError`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

from streams.kafka.clients import fetch_committed
from streams.kafka.connection import KafkaConnection, check_reachable
from streams.kafka.errors import (
    first_metadata,
    from_kafka_error,
    kafka_errors,
    topic_unavailable,
)
from streams.kafka.reader import BEGINNING, Bound, TopicRecord, resolve_bound

__all__ = ["TopicTail"]


def _record_maker() -> Callable[[bytes | None, bytes | None, int, int, int], TopicRecord]:
    """``TopicRecord(...)`` for the tail's own reads, by the slots' own
    setters: a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__`` (0.55 CPU µs a record on a quiet host, 0.33 this
    way; the follower makes one per finding). Every field, in declaration
    order; a test compares the two for every field."""
    names = [f.name for f in fields(TopicRecord)]
    if names != ["key", "value", "partition", "offset", "timestamp_ms"]:
        raise AssertionError(f"TopicRecord's fields changed ({names}): update _record_maker")
    s_key, s_value, s_partition, s_offset, s_timestamp = [
        getattr(TopicRecord, n).__set__ for n in names
    ]
    new = object.__new__

    def make(
        key: bytes | None, value: bytes | None, partition: int, offset: int, timestamp_ms: int
    ) -> TopicRecord:
        r: TopicRecord = new(TopicRecord)
        s_key(r, key)
        s_value(r, value)
        s_partition(r, partition)
        s_offset(r, offset)
        s_timestamp(r, timestamp_ms)
        return r

    return make


_new_record = _record_maker()


class TopicTail:
    """Reads ``topic`` from its start positions; :meth:`poll` returns one
    record at a time, :meth:`consume` a batch. Not thread-safe: one thread
    polls and commits."""

    def __init__(
        self,
        conn: KafkaConnection,
        topic: str,
        *,
        group: str | None = None,
        start: Bound = BEGINNING,
        stop_at_end: bool = False,
        timeout: float = 30.0,
    ) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.topic = topic
        self.group = group
        self._timeout = timeout
        self._commit_results: list[tuple[int, int, str | None]] = []
        # Asynchronous commits sent and not answered yet (settle_commits).
        self._commits_in_flight = 0
        self._reading = kafka_errors(f"reading {topic}")
        # An unreachable address fails here in the connect timeout, naming it.
        check_reachable(conn)
        self._conn = conn
        conf: dict[str, Any] = {
            # The client wants a group id even when nothing is committed; this
            # one is never joined (partitions are assigned) nor committed to.
            "group.id": group or "fencewatch-findings-reader",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": stop_at_end,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            # Bounded prefetch: at most ~8 MiB queued in the client.
            "queued.max.messages.kbytes": 8192,
            # Never joined, so this bounds only how long a commit waits for a
            # coordinator: with the broker down a synchronous commit (at
            # close) failed after librdkafka's 45 s default, and close waited
            # that long for the asynchronous ones.
            "session.timeout.ms": int(max(6.0, conn.connect_timeout) * 1000),
            # Where asynchronous commits report: one that failed is committed
            # again, one that was stored needs no commit at close
            # (commit_results).
            "on_commit": self._on_commit,
        }
        with kafka_errors("configuring the consumer"):
            self._consumer = Consumer(conn.librdkafka(**conf))
        try:
            with kafka_errors(f"topic {topic}"):
                self._open(start, stop_at_end, TopicPartition)
        except BaseException:
            self._consumer.close()
            raise

    def _open(self, start: Bound, stop_at_end: bool, tp: Any) -> None:
        c, topic, timeout = self._consumer, self.topic, self._timeout
        meta = first_metadata(
            c, self._conn.bootstrap_servers, self._conn.connect_timeout, f"topic {topic}", topic
        )
        tmeta = meta.topics.get(topic)
        if tmeta is None or tmeta.error is not None or not tmeta.partitions:
            error = tmeta.error if tmeta is not None else None
            raise topic_unavailable(topic, self._conn.bootstrap_servers, error)
        self.partitions: list[int] = sorted(tmeta.partitions)
        lows: dict[int, int] = {}
        highs: dict[int, int] = {}
        for p in self.partitions:
            lows[p], highs[p] = c.get_watermark_offsets(tp(topic, p), timeout=timeout, cached=False)
        begin = resolve_bound(c, topic, self.partitions, start, lows, highs, timeout)
        if self.group is not None:
            for t in fetch_committed(c, [tp(topic, p) for p in self.partitions], timeout):
                if t.offset >= 0:
                    # A committed position below the log start (retention) resumes at the start.
                    begin[t.partition] = max(t.offset, lows[t.partition])
        self.start_positions: dict[int, int] = dict(begin)
        #: The end snapshot of a bounded read (None when following).
        self.end_positions: dict[int, int] | None = dict(highs) if stop_at_end else None
        self._pending = (
            {p for p in self.partitions if begin[p] < highs[p]}
            if stop_at_end
            else set(self.partitions)
        )
        if self._pending:
            c.assign([tp(topic, p, begin[p]) for p in sorted(self._pending)])

    @property
    def finished(self) -> bool:
        """A bounded read has reached every partition's end snapshot."""
        return self.end_positions is not None and not self._pending

    def poll(self, timeout: float) -> TopicRecord | None:
        """The next record, or None when none came within ``timeout`` (or the
        bounded read is finished)."""
        while not self.finished:
            with self._reading:
                msg = self._consumer.poll(timeout)
            if msg is None:
                return None
            rec = self._record(msg)
            if rec is not None:
                return rec
        return None

    def consume(self, max_records: int, timeout: float) -> list[TopicRecord]:
        """Up to ``max_records`` records, waiting at most ``timeout`` for the
        first: what the client has fetched, in one or two calls (``poll`` per
        record costs a hand-off between librdkafka and Python each; at 2,000
        findings/s that was a visible share of the follower's CPU). Empty when
        none came (or the bounded read is finished)."""
        out: list[TopicRecord] = []
        deadline = time.monotonic() + timeout
        c = self._consumer
        while not out and not self.finished:
            with self._reading:
                # What is there now; else wait for one record and take what
                # came with it. Not consume(n, timeout): it waits until n
                # records came or the timeout passed, a latency of up to the
                # timeout on a topic that is not busy.
                msgs = c.consume(max_records, 0)
                if not msgs:
                    first = c.poll(max(deadline - time.monotonic(), 0.0))
                    if first is None:
                        return out
                    msgs = [first]
                    if max_records > 1:
                        msgs += c.consume(max_records - 1, 0)
            for msg in msgs:
                # An error raised here drops the records before it in this
                # batch, never acknowledged: a restart reads them again.
                rec = self._record(msg)
                if rec is not None:
                    out.append(rec)
            # A batch of only end markers or retriable errors: wait again for
            # records, within what is left of the timeout.
            if time.monotonic() >= deadline:
                break
        return out

    def _record(self, msg: Any) -> TopicRecord | None:
        """``msg`` as a record, or None: an end-of-partition marker (the
        partition is done), a retriable error, or a record outside the read
        (an unassigned partition, past the end positions). Raises on any
        other client error."""
        err = msg.error()
        p = msg.partition()
        if err is not None:
            from confluent_kafka import KafkaError

            if err.code() == KafkaError._PARTITION_EOF:
                self._done(p)
                return None
            if err.retriable():
                return None
            raise from_kafka_error(err, f"reading {self.topic}")
        offset = msg.offset()
        if p is None or offset is None or p not in self._pending:
            return None
        ends = self.end_positions
        ts_type, ts = msg.timestamp()
        if ends is None:  # following: no end to check
            return _new_record(msg.key(), msg.value(), p, offset, ts if ts_type else -1)
        if offset >= ends[p]:
            self._done(p)
            return None
        rec = _new_record(msg.key(), msg.value(), p, offset, ts if ts_type else -1)
        if offset + 1 >= ends[p]:
            self._done(p)
        return rec

    def _done(self, p: int | None) -> None:
        if p in self._pending:
            from confluent_kafka import OFFSET_END, TopicPartition

            self._pending.discard(p)
            self._consumer.incremental_unassign([TopicPartition(self.topic, p, OFFSET_END)])

    def commit(self, positions: Mapping[int, int], *, asynchronous: bool) -> None:
        """Store ``positions`` (partition -> next offset to read) as the
        group's position. A no-op without a group."""
        from confluent_kafka import TopicPartition

        if self.group is None or not positions:
            return
        tps = [TopicPartition(self.topic, p, o) for p, o in sorted(positions.items())]
        with kafka_errors(f"committing the position of group {self.group}"):
            if asynchronous:
                self._consumer.commit(offsets=tps, asynchronous=True)
                self._commits_in_flight += 1
            else:
                self._consumer.commit(offsets=tps, asynchronous=False)

    def _on_commit(self, err: Any, partitions: list[Any]) -> None:
        # Served by poll() on the polling thread (librdkafka's callback).
        self._commits_in_flight = max(0, self._commits_in_flight - 1)
        for tp in partitions:
            if tp.topic == self.topic:
                failure = err if err is not None else tp.error
                reason = None if failure is None else str(failure)
                self._commit_results.append((tp.partition, tp.offset, reason))

    def commit_results(self) -> list[tuple[int, int, str | None]]:
        """The asynchronous commits answered since the last call, as
        (partition, offset, None if stored else the reason it was not)."""
        done, self._commit_results = self._commit_results, []
        return done

    def settle_commits(self) -> None:
        """Wait (at most the connect timeout) for the answers to the
        asynchronous commits still in flight, so that :meth:`commit_results`
        says which were stored. For a close: a record read meanwhile is
        dropped, never handed out, so its position is not committed."""
        deadline = time.monotonic() + self._conn.connect_timeout
        while self._commits_in_flight > 0:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._consumer.poll(min(left, 0.1))

    def close(self) -> None:
        self._consumer.close()
