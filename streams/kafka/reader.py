"""Read a Kafka topic once, from a start bound to an end bound, for the audit
(SPEC §6: ``fencewatch audit --topic``); and the one vocabulary of records
and positions that this bounded read and the tail (:mod:`streams.kafka.tail`)
share: :class:`TopicRecord`, and the bounds :data:`BEGINNING`, :data:`END`,
:class:`Offset`, :class:`PartitionOffsets` and :class:`Timestamp`.

::

    conn = KafkaConnection("127.0.0.1:9092")
    for key, value, partition, offset in iter_topic(conn, "ownership.events"):
        replay.feed(value, key=key, offset=offset, source=f"{topic}/{partition}")

* All partitions are assigned (no consumer group, nothing committed).
* The end is a snapshot taken at start: by default each partition's high
  watermark then, so a topic that keeps growing still gives a finite read.
* Records come in per-partition offset order; partitions interleave, which
  does not matter to the detector because a workflow key lives in one
  partition.
* ``isolation.level`` is ``read_committed``: records of aborted transactions
  are never audited. A partition whose last records are control markers (or
  an open transaction) ends at partition EOF instead of waiting.
* Arrival position for the detector is the partition offset; the ``source``
  of an invalid entry is ``topic/partition``.
* A broker that goes away mid-read is waited for: the read carries on when
  it is back within ``timeout`` of the last record (a restart), else
  :class:`~streams.kafka.errors.BrokerUnreachable` is raised, saying whether
  the broker still accepts connections. The caller knows how far each
  partition got (the offsets it was given), so it can report that much.
* ``on_truncated`` is told of every partition whose log starts above where
  the read was asked to start (records deleted by retention or
  ``delete_records``): evidence the audit can never see.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from streams.kafka.connection import KafkaConnection, check_reachable
from streams.kafka.errors import (
    BrokerUnreachable,
    first_metadata,
    from_kafka_error,
    kafka_errors,
    topic_unavailable,
)

__all__ = [
    "BEGINNING",
    "END",
    "Bound",
    "Offset",
    "PartitionOffsets",
    "Timestamp",
    "TopicRecord",
    "Truncated",
    "iter_topic",
    "resolve_bound",
]


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """One record, of a bounded read or a tail. Unpacks as ``key, value,
    partition, offset`` (the common loop); the timestamp is read by name."""

    key: bytes | None
    value: bytes | None
    partition: int
    offset: int
    #: The record's Kafka timestamp (broker or producer time), epoch ms; -1 if none.
    timestamp_ms: int = -1

    def __iter__(self) -> Iterator[Any]:
        return iter((self.key, self.value, self.partition, self.offset))


@dataclass(frozen=True, slots=True)
class Offset:
    """The same offset in every partition (clamped to what the partition holds)."""

    value: int


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """An offset per partition (``{partition: offset}``, each clamped like
    :class:`Offset`): where a partial audit stopped, to resume it. A
    partition not named starts at its log start (as an end: its high
    watermark)."""

    offsets: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Truncated:
    """A partition whose log starts above where the read was asked to start:
    ``missing`` records (offsets ``asked`` to ``log_start - 1``, bounded by
    the end) were deleted before the read and can never be audited."""

    partition: int
    asked: int
    log_start: int
    missing: int


@dataclass(frozen=True, slots=True)
class Timestamp:
    """The first record whose timestamp is >= ``ms`` (epoch milliseconds)."""

    ms: int


@dataclass(frozen=True, slots=True)
class _Edge:
    name: str


#: Each partition's log start.
BEGINNING = _Edge("beginning")
#: Each partition's high watermark, snapshotted when the read starts: as an
#: end, a finite read of a growing topic; as a start, only records produced later.
END = _Edge("end")

Bound = Offset | PartitionOffsets | Timestamp | _Edge

#: librdkafka retries a lost broker at most this often (default 10 s): a
#: broker back from a restart is found within a second.
_RECONNECT_BACKOFF_MAX_MS = 1000
#: How long librdkafka waits to fetch again once the prefetch queue is full.
_FETCH_QUEUE_BACKOFF_MS = 10


def iter_topic(
    conn: KafkaConnection,
    topic: str,
    *,
    start: Bound = BEGINNING,
    end: Bound = END,
    config: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    on_plan: Callable[[dict[int, int], dict[int, int]], None] | None = None,
    on_truncated: Callable[[list[Truncated]], None] | None = None,
    only_partitions: Collection[int] | None = None,
) -> Iterator[TopicRecord]:
    """Yield the records of ``topic`` with ``start <= position < end`` per
    partition (end exclusive; a :class:`Timestamp` end stops before the first
    record at or after it). ``conn``: the brokers and their security;
    ``config`` adds librdkafka settings; ``timeout`` bounds each wait
    (default: the connection's connect timeout); ``only_partitions`` reads
    those partitions of the topic alone (default: every partition).

    Raises :class:`~streams.kafka.errors.TopicMissing` for an unknown topic,
    :class:`~streams.kafka.errors.BrokerUnreachable` (at once, naming the
    address and cause) when no broker accepts a connection, and other
    :class:`~streams.errors.BrokerError` for broker failures.
    ``on_plan(begin, end)``, when given, is called once with
    the resolved offsets per partition before the first record (for a
    progress display); ``on_truncated(parts)`` once, before the first record,
    with the partitions whose history before the start bound is gone (an
    empty list when none is; never called for a :class:`Timestamp` start,
    where what the deleted records' times were is unknown).

    A broker lost mid-read is waited for up to ``timeout`` since the last
    record (so a restart is ridden out); past that,
    :class:`~streams.kafka.errors.BrokerUnreachable` names the broker and
    the cause."""
    from confluent_kafka import OFFSET_END, Consumer, KafkaError, TopicPartition

    if timeout is None:
        timeout = conn.connect_timeout
    check_reachable(conn)
    conf: dict[str, Any] = {
        "group.id": "fencewatch-audit-reader",  # required by the client; never joined
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
    }
    # Tuning a --kafka-config setting may change (the rest is how this reader works).
    tuning = {
        # Bounded prefetch: at most ~8 MiB queued in the client.
        "queued.max.messages.kbytes": 8192,
        # Once that queue is full, librdkafka waits fetch.queue.backoff.ms
        # (1,000 ms by default) before it fetches again, although a read
        # drains 8 MiB in a fraction of that: a bare read of 400,000 audit
        # events took 3.6-4.0 s at the default, 1.8-2.1 s at 10 ms (the
        # changelog restore's setting, docs/performance.md).
        "fetch.queue.backoff.ms": _FETCH_QUEUE_BACKOFF_MS,
        "reconnect.backoff.max.ms": _RECONNECT_BACKOFF_MAX_MS,
    }
    conf.update({k: v for k, v in tuning.items() if k not in conn.extra})
    conf = conn.librdkafka(**conf)
    conf.update(config or {})
    with kafka_errors("client settings"):  # a setting the client refuses (--kafka-config)
        consumer = Consumer(conf)
    try:
        meta = first_metadata(
            consumer, conn.bootstrap_servers, conn.connect_timeout, f"topic {topic}", topic
        )
        tmeta = meta.topics.get(topic)
        if tmeta is None or tmeta.error is not None or not tmeta.partitions:
            error = tmeta.error if tmeta is not None else None
            raise topic_unavailable(topic, conn.bootstrap_servers, error)
        partitions = sorted(
            p for p in tmeta.partitions if only_partitions is None or p in only_partitions
        )
        lows: dict[int, int] = {}
        highs: dict[int, int] = {}
        with kafka_errors(f"offsets of {topic}"):
            for p in partitions:
                lo, hi = consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=timeout, cached=False
                )
                lows[p], highs[p] = lo, hi
            begin = resolve_bound(consumer, topic, partitions, start, lows, highs, timeout)
            stop = resolve_bound(
                consumer, topic, partitions, end, lows, highs, timeout, is_end=True
            )
        if on_plan is not None:
            on_plan(dict(begin), dict(stop))
        if on_truncated is not None and not isinstance(start, Timestamp):
            on_truncated(_truncated(partitions, start, end, lows, highs))
        pending = {p for p in partitions if begin[p] < stop[p]}
        if not pending:
            return
        consumer.assign([TopicPartition(topic, p, begin[p]) for p in sorted(pending)])
        # Every record up to the end snapshot exists, so a silence as long as
        # `timeout` means the broker is gone; shorter ones (a restart) are
        # waited out, the client reconnecting by itself.
        last = time.monotonic()
        while pending:
            left = last + timeout - time.monotonic()
            if left <= 0:
                raise _lost(conn, topic, timeout)
            msg = consumer.poll(left)
            if msg is None:
                continue
            err = msg.error()
            p = msg.partition()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    pending.discard(p)
                    continue
                failure = from_kafka_error(err, f"reading {topic}")
                if isinstance(failure, BrokerUnreachable) or failure.retriable:
                    continue  # the client retries; the deadline decides
                raise failure
            last = time.monotonic()
            offset = msg.offset()
            if p is None or offset is None or p not in pending:
                continue
            if offset >= stop[p]:
                pending.discard(p)
                consumer.incremental_unassign([TopicPartition(topic, p, OFFSET_END)])
                continue
            ts_type, ts = msg.timestamp()
            yield TopicRecord(msg.key(), msg.value(), p, offset, ts if ts_type else -1)
            if offset + 1 >= stop[p]:
                pending.discard(p)
                consumer.incremental_unassign([TopicPartition(topic, p, OFFSET_END)])
    finally:
        consumer.close()


def _lost(conn: KafkaConnection, topic: str, timeout: float) -> BrokerUnreachable:
    """The broker went quiet for ``timeout`` mid-read: say whether it still
    accepts connections (a crash, or a network fault) or not."""
    try:
        check_reachable(conn)
    except BrokerUnreachable as exc:
        return BrokerUnreachable(
            f"{exc} (no record from {topic} for {timeout:g} s)", code=exc.code, retriable=True
        )
    return BrokerUnreachable(
        f"no record from {topic} for {timeout:g} s though broker {conn.bootstrap_servers} "
        "accepts connections (it may be overloaded or restarting)",
        code="_TIMED_OUT",
        retriable=True,
    )


def _truncated(
    partitions: list[int],
    start: Bound,
    end: Bound,
    lows: Mapping[int, int],
    highs: Mapping[int, int],
) -> list[Truncated]:
    """The partitions whose log starts above the start bound: how many
    records of the asked range were deleted before the read."""
    out = []
    for p in partitions:
        if isinstance(start, Offset):
            asked = start.value
        elif isinstance(start, PartitionOffsets):
            asked = start.offsets.get(p, 0)
        else:
            asked = 0
        if isinstance(end, Offset):
            until = end.value
        elif isinstance(end, PartitionOffsets):
            until = end.offsets.get(p, highs[p])
        else:
            until = highs[p]
        missing = min(lows[p], until) - asked
        if missing > 0:
            out.append(Truncated(p, asked, lows[p], missing))
    return out


def resolve_bound(
    consumer: Any,
    topic: str,
    partitions: list[int],
    bound: Bound,
    lows: dict[int, int],
    highs: dict[int, int],
    timeout: float,
    *,
    is_end: bool = False,
) -> dict[int, int]:
    """The offset per partition that ``bound`` names, given the watermarks
    (a :class:`Timestamp` asks the broker through ``consumer``). Raises the
    client's ``KafkaException``; the caller translates it."""
    from confluent_kafka import TopicPartition

    if bound == BEGINNING:
        return dict(lows)
    if bound == END:
        return dict(highs)
    if isinstance(bound, Offset):
        if bound.value < 0:
            raise ValueError("offset bound must be >= 0")
        return {p: min(max(bound.value, lows[p]), highs[p]) for p in partitions}
    if isinstance(bound, PartitionOffsets):
        if any(v < 0 for v in bound.offsets.values()):
            raise ValueError("offset bound must be >= 0")
        edge = highs if is_end else lows
        return {
            p: min(max(bound.offsets[p], lows[p]), highs[p]) if p in bound.offsets else edge[p]
            for p in partitions
        }
    if isinstance(bound, Timestamp):
        asked = [TopicPartition(topic, p, bound.ms) for p in partitions]
        found = consumer.offsets_for_times(asked, timeout=timeout)
        # -1: no record at or after the time: everything is before it.
        return {tp.partition: highs[tp.partition] if tp.offset < 0 else tp.offset for tp in found}
    raise TypeError(f"not a bound: {bound!r}")
