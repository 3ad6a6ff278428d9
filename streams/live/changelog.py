"""Read a state changelog directly with a read_committed librdkafka consumer,
up to each partition's last stable offset: the restore of both engines (the
faust engine's fast memory restore, :mod:`streams.live.faust.fast_restore`, and the
rdkafka engine, :mod:`streams.live.rdkafka.engine`). One reader, so both
engines apply the same committed records in the same order.

Not the bounded reader of :mod:`streams.kafka.reader` (which ``fencewatch
migrate`` uses for its events tail): restore speed is the engines' start
time, and this loop's batched ``consume`` with a 64 MiB prefetch read 300,000
changelog-sized records 1.6 to 4 times faster than ``iter_topic``'s
per-record ``poll`` on the shared 2-core machine (2026-12-02, two rounds).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streams.errors import BrokerError
from streams.kafka.errors import from_kafka_error, kafka_errors
from streams.live.heap import release_free_heap

__all__ = [
    "CHANGELOG_SUFFIX",
    "SOURCE_POSITION_HEADER",
    "LoadResult",
    "changelog_topic",
    "load_changelog",
    "load_state",
    "source_position_header",
]

_BATCH = 10_000
#: faust names a table's changelog ``<app-id>-<table>-changelog``; the table
#: is ``owner-state`` (streams.live.faust.app.TABLE_NAME). Both engines use it.
CHANGELOG_SUFFIX = "-owner-state-changelog"
#: A header the rdkafka engine puts on one changelog record per source
#: partition and batch (or commit): the events partition's position after
#: the batch, the next offset to process, which the record's transaction
#: commits at least (ASCII decimal; the changelog partition is the source
#: partition). Not the dead letters' ``fencewatch-source-offset``, which is
#: an event's own offset, one less. A restore that finds a transaction
#: open on the changelog reads it to tell a departed worker's transaction,
#: which can no longer commit, from a committed one whose markers are still
#: on their way (ChangelogRestore.restore). The faust engine and readers that
#: do not know it ignore it.
SOURCE_POSITION_HEADER = "fencewatch-source-position"


def source_position_header(offset: int) -> list[tuple[str, bytes]]:
    """The headers of a changelog record whose transaction commits its source
    partition at ``offset`` or beyond."""
    return [(SOURCE_POSITION_HEADER, str(offset).encode())]


def changelog_topic(app_id: str) -> str:
    """The state changelog topic of ``app_id`` (the same for both engines)."""
    return app_id + CHANGELOG_SUFFIX


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What one direct read of changelog partitions did."""

    ends: dict[int, int]  # partition -> end offset (LSO) read up to, exclusive
    records: int  # committed records read and applied
    #: partition -> the highest SOURCE_POSITION_HEADER among the records read
    #: (only when asked: ``positions=True``); absent where no record had one.
    positions: dict[int, int] = field(default_factory=dict)


def load_changelog(
    client_config: Mapping[str, Any],
    topic: str,
    starts: Mapping[int, int | None],
    apply: Callable[[int, bytes, bytes | None], None],
    *,
    timeout: float = 120.0,
    positions: bool = False,
) -> LoadResult:
    """Read ``topic``'s partitions ``starts`` (partition -> first offset, or
    ``None`` for the beginning) with read_committed up to each partition's end
    offset taken before reading, calling ``apply(partition, key, value)`` per
    keyed record in offset order. ``positions``: also the highest
    :data:`SOURCE_POSITION_HEADER` per partition (:attr:`LoadResult.positions`).

    Raises :class:`~streams.errors.BrokerError` on a broker failure or when
    the end is not reached within ``timeout`` seconds."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError
    from confluent_kafka import TopicPartition as CTP

    conf: dict[str, Any] = {
        "group.id": "fencewatch-restore",  # required by the client; never joined
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        # Prefetch generously (bounded at 64 MiB): with librdkafka's defaults
        # the consumer waits on the fetcher (several times slower, docs/live.md).
        "queued.min.messages": 1_000_000,
        "queued.max.messages.kbytes": 65536,
        # Once that queue is full, librdkafka waits fetch.queue.backoff.ms
        # (1,000 ms by default) before it fetches again, although this loop
        # drains the queue in a fraction of that: 300,000 changelog records
        # (195 MB) took 1.8-1.9 s with 9-10 empty consume() calls in half the
        # rounds, 0.86-0.97 s with 2 at 5 ms (2026-12-03, 4 rounds each).
        "fetch.queue.backoff.ms": 10,
    }
    conf.update(client_config)
    conf["isolation.level"] = "read_committed"  # never anything else: aborted data stays out
    records = 0
    seen: dict[int, int] = {}
    consumer = Consumer(conf)
    try:
        with kafka_errors(f"changelog {topic}"):
            ends: dict[int, int] = {}
            assign: list[Any] = []
            for p, start in starts.items():
                # Under read_committed the high watermark returned is the LSO.
                lo, hi = consumer.get_watermark_offsets(CTP(topic, p), timeout=30, cached=False)
                ends[p] = hi
                first = OFFSET_BEGINNING if start is None else start
                # Nothing to read (an empty partition, the usual first start)
                # is not assigned: waiting for its end took ~1.1 s a restore.
                if (lo if start is None else start) < hi:
                    assign.append(CTP(topic, p, first))
            pending = {tp.partition for tp in assign}
            if pending:
                consumer.assign(assign)
            deadline = time.monotonic() + timeout
            while pending:
                if time.monotonic() > deadline:
                    raise BrokerError(
                        f"changelog {topic}: end not reached in {timeout:.0f} s "
                        f"(partitions {sorted(pending)})",
                        code="TIMEOUT",
                        retriable=True,
                    )
                batch = consumer.consume(num_messages=_BATCH, timeout=0.1)
                for m in batch:
                    part, offset = m.partition(), m.offset()
                    err = m.error()
                    if part is None or offset is None:  # client-level error without a partition
                        if err is not None:
                            raise from_kafka_error(err, f"changelog {topic}")
                        continue
                    p = part
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            if offset >= ends[p]:
                                pending.discard(p)
                            continue
                        raise from_kafka_error(err, f"changelog {topic}[{p}]")
                    if p not in pending or offset >= ends[p]:
                        pending.discard(p)  # past the snapshot: faust's recovery reads it
                        continue
                    key = m.key()
                    if key is not None:  # faust cannot key a table by None either
                        apply(p, key, m.value())
                        records += 1
                    if positions:
                        _note_position(seen, p, m.headers())
                    if offset >= ends[p] - 1:
                        pending.discard(p)
                if not batch and pending:
                    # Aborted records and transaction markers at the tail are
                    # never delivered; the position still moves past them.
                    for tp in consumer.position([CTP(topic, p) for p in pending]):
                        if tp.offset >= ends[tp.partition]:
                            pending.discard(tp.partition)
            return LoadResult(ends, records, seen)
    finally:
        consumer.close()
        # The prefetch buffers and each record's objects are freed now: their
        # pages go back to the OS instead of staying resident (streams.live.heap).
        release_free_heap()


def load_state(
    client_config: Mapping[str, Any],
    topic: str,
    starts: Mapping[int, int | None],
    *,
    timeout: float = 120.0,
    positions: bool = False,
) -> tuple[dict[bytes, bytes], LoadResult]:
    """:func:`load_changelog` into a dict: the latest value of each key (a
    delete removes it), and what the read did."""
    state: dict[bytes, bytes] = {}

    def apply(_p: int, key: bytes, value: bytes | None) -> None:
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value

    result = load_changelog(
        client_config, topic, starts, apply, timeout=timeout, positions=positions
    )
    return state, result


def _note_position(seen: dict[int, int], partition: int, headers: Any) -> None:
    """``seen[partition]`` raised to the record's source position header, if
    it has one that reads as a number (anything else is ignored: a record
    without one only makes the restore wait, as before the header)."""
    if not headers:
        return
    for name, value in headers:
        if name == SOURCE_POSITION_HEADER and value:
            try:
                offset = int(value)
            except ValueError:
                continue
            if offset > seen.get(partition, -1):
                seen[partition] = offset
