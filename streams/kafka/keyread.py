"""A bounded read of one key's records: only the partitions the key can be
in, only records of that key, only the last ``limit`` of them, from at most
the last ``scan`` records of each partition (end offsets captured at start).

Which partition a key is in depends on the producer's partitioner: murmur2
(the Java client, aiokafka, ``murmur2_random``) or CRC32 (librdkafka's
default, which the SDK's producer and ``fencewatch verify`` use). Both
candidates are read (one partition when they agree).
"""

from __future__ import annotations

import time
import zlib
from collections import deque
from dataclasses import dataclass

from streams.errors import BrokerError, BrokerUnreachable
from streams.kafka.connection import KafkaConnection, check_reachable
from streams.kafka.errors import (
    first_metadata,
    from_kafka_error,
    kafka_errors,
    topic_unavailable,
)

__all__ = ["KeyRead", "KeyRecord", "key_partitions", "murmur2", "read_key"]


@dataclass(frozen=True, slots=True)
class KeyRecord:
    value: bytes | None
    partition: int
    offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class KeyRead:
    """The last records of the key (partition, then offset order), how many
    of the key's records were seen, and whether the scan began past a
    partition's log start (older records were not read)."""

    records: tuple[KeyRecord, ...]
    matched: int
    partitions: tuple[int, ...]
    scan_cut: bool

    @property
    def truncated(self) -> bool:
        return self.matched > len(self.records) or self.scan_cut


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (the Java client's ``Utils.murmur2``), as a signed 32-bit int."""
    m, r, mask = 0x5BD1E995, 24, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    rest = length % 4
    tail = 4 * n4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def key_partitions(key: bytes, n_partitions: int) -> tuple[int, ...]:
    """The partitions murmur2 and CRC32 partitioners put ``key`` in."""
    return tuple(
        sorted({(murmur2(key) & 0x7FFFFFFF) % n_partitions, zlib.crc32(key) % n_partitions})
    )


def read_key(
    connection: KafkaConnection,
    topic: str,
    key: bytes,
    *,
    limit: int,
    scan: int,
    max_bytes: int | None = None,
    max_seconds: float | None = None,
) -> KeyRead:
    """The key's last ``limit`` records among the last ``scan`` records of
    each candidate partition, and of them only as many of the last as fit
    ``max_bytes`` of values (the console's memory bound). Client failures
    leave as BrokerError; a read past ``max_seconds`` stops as one too
    (code ``_TIMED_OUT``), since a partial read would show a wrong timeline."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    check_reachable(connection)
    consumer = Consumer(
        connection.librdkafka(
            **{
                "group.id": "fencewatch-console-replay",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
            }
        )
    )
    kept: deque[KeyRecord] = deque(maxlen=limit)
    kept_bytes = 0
    matched = 0
    cut = False
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    try:
        with kafka_errors(f"reading {topic}"):
            # In slices: a refused login ends the wait at once (first_metadata).
            meta = first_metadata(
                consumer,
                connection.bootstrap_servers,
                connection.connect_timeout,
                f"reading {topic}",
                topic,
            )
            tmeta = meta.topics.get(topic)
            if tmeta is None or tmeta.error is not None or not tmeta.partitions:
                raise topic_unavailable(
                    topic, connection.bootstrap_servers, tmeta.error if tmeta is not None else None
                )
            parts = key_partitions(key, len(tmeta.partitions))
            for p in parts:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=connection.connect_timeout, cached=False
                )
                start = max(low, high - scan)
                cut = cut or start > low
                if start >= high:
                    continue
                consumer.assign([TopicPartition(topic, p, start)])
                while True:
                    if deadline is not None and time.monotonic() > deadline:
                        raise BrokerError(
                            f"reading {topic}/{p}: stopped after {max_seconds:g} s "
                            "(the replay's time bound)",
                            code="_TIMED_OUT",
                            retriable=True,
                        )
                    msg = consumer.poll(connection.connect_timeout)
                    if msg is None:
                        raise BrokerUnreachable(
                            f"reading {topic}/{p}: timed out (no record within "
                            f"{connection.connect_timeout:g} s)",
                            code="_TIMED_OUT",
                            retriable=True,
                        )
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            break
                        if err.retriable():
                            continue
                        raise from_kafka_error(err, f"reading {topic}/{p}")
                    offset = msg.offset() or 0
                    if msg.key() == key:
                        matched += 1
                        ts_type, ts = msg.timestamp()
                        value = msg.value()
                        if len(kept) == limit:
                            kept_bytes -= len(kept[0].value or b"")
                        kept.append(KeyRecord(value, p, offset, ts if ts_type else -1))
                        kept_bytes += len(value or b"")
                        while max_bytes is not None and kept_bytes > max_bytes and len(kept) > 1:
                            kept_bytes -= len(kept.popleft().value or b"")
                    if offset + 1 >= high:
                        break
                consumer.unassign()
    finally:
        consumer.close()
    return KeyRead(tuple(kept), matched, parts, cut)
