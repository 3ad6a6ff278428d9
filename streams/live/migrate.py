"""``fencewatch migrate --partitions N``: lay the processor's state out again
after the events topic grew (see :mod:`streams.live.partitions` for why the
processor refuses to run until this is done).

With every worker of the app stopped:

1. the state as of the group's committed offsets: the state changelog read
   with read_committed (the changelog and the offsets are written in the same
   transactions, so they agree);
2. the *tail*: the events the processor had not committed on the old
   partitions (up to their end now) are processed here, by the same
   :class:`~streams.live.processor.Processor`, against that state: a key
   that moved finishes its old partition's events before its new partition's
   (the order the producers wrote them in);
3. a backup of the resulting state is written to a local file (each line a
   key and its stored value, base64), then the changelog is deleted and made
   again with the new partition count (its topic settings copied);
4. one transaction: the tail's findings, dead letters and status records,
   every key's state in the changelog partition its events now use (the
   producers' partitioner: ``murmur2`` like Java and aiokafka, or
   ``consistent`` like librdkafka and the fencewatch SDK), and the group's
   offsets of the old partitions moved to their end. The new partitions keep
   no committed offset: the processor reads them from the beginning.

Then the workers start on the new layout. If step 4 fails after step 3, the
backup file holds the state (its path is in the error).
"""

from __future__ import annotations

import base64
import json
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streams.errors import BrokerError, MigrationError
from streams.kafka.coordinator import describe_group
from streams.kafka.errors import kafka_errors
from streams.live.changelog import load_state
from streams.live.processor import OutRecord, SourceRecord, encoded, processor_for
from streams.live.settings import LiveSettings

__all__ = [
    "PARTITIONERS",
    "MigrateReport",
    "MigrationError",
    "consistent_partition",
    "migrate_state",
    "murmur2_partition",
]

_CHUNK = 500


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (Java client ``Utils.murmur2``), as an unsigned 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(length // 4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = length & ~3
    extra = length % 4
    if extra == 3:
        h ^= data[rest + 2] << 16
    if extra >= 2:
        h ^= data[rest + 1] << 8
    if extra >= 1:
        h ^= data[rest]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The Java client's (and aiokafka's, librdkafka ``murmur2_random``'s) partition of ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def consistent_partition(key: bytes, partitions: int) -> int:
    """librdkafka's default (``consistent_random``) partition of ``key``: CRC32 mod count."""
    return zlib.crc32(key) % partitions


PARTITIONERS: dict[str, Callable[[bytes, int], int]] = {
    "murmur2": murmur2_partition,
    "consistent": consistent_partition,
}


@dataclass(frozen=True, slots=True)
class MigrateReport:
    """What a migration did."""

    changelog: str
    was: int
    now: int
    keys: int
    tail_events: int
    findings: int
    backup: Path | None


def _conf(settings: LiveSettings, **extra: Any) -> dict[str, Any]:
    return settings.connection.librdkafka(**extra)


def _read_tail(
    settings: LiveSettings, starts: dict[int, int], timeout: float
) -> tuple[dict[int, list[SourceRecord]], dict[int, int]]:
    """Committed events of the old partitions from ``starts`` (-1: the log
    start) to their end now, and those ends: the bounded reader's read."""
    from streams.kafka.reader import END, PartitionOffsets, iter_topic

    topic = settings.events_topic
    out: dict[int, list[SourceRecord]] = {p: [] for p in starts}
    ends: dict[int, int] = {}

    def plan(_begin: dict[int, int], end: dict[int, int]) -> None:
        ends.update(end)

    records = iter_topic(
        settings.connection,
        topic,
        start=PartitionOffsets({p: max(o, 0) for p, o in starts.items()}),
        end=END,
        config={"group.id": f"{settings.app_id}-migrate-reader"},  # never joined
        timeout=timeout,
        on_plan=plan,
        only_partitions=starts,
    )
    for r in records:
        out[r.partition].append(
            SourceRecord(topic, r.partition, r.offset, r.key, r.value, r.timestamp_ms)
        )
    return out, ends


def _committed(settings: LiveSettings, partitions: range, timeout: float) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    from streams.kafka.clients import fetch_committed

    consumer = Consumer(
        _conf(
            settings,
            **{
                "group.id": settings.app_id,
                "enable.auto.commit": False,
                # Asks for stable offsets: waits out a transaction still open.
                "isolation.level": "read_committed",
            },
        )
    )
    try:
        tps = fetch_committed(
            consumer, [TopicPartition(settings.events_topic, p) for p in partitions], timeout
        )
        return {tp.partition: int(tp.offset) for tp in tps}
    finally:
        consumer.close()


def migrate_state(
    settings: LiveSettings,
    *,
    partitions: int,
    partitioner: str = "murmur2",
    changelog: str,
    backup_dir: Path,
    timeout_s: float = 120.0,
    log: Callable[[str], None] = lambda _line: None,
) -> MigrateReport:
    """Migrate ``changelog`` (the state of ``settings.app_id``) to
    ``partitions`` partitions (module docstring). Raises
    :class:`MigrationError` / :class:`~streams.errors.BrokerError`."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    place = PARTITIONERS.get(partitioner)
    if place is None:
        raise ValueError(f"partitioner must be one of {sorted(PARTITIONERS)}, got {partitioner!r}")
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    from streams.kafka.admin import TopicAdmin

    topics = TopicAdmin(settings.connection)
    topics.probe()  # an unreachable broker: one line naming it and the cause
    counts = topics.partitions([settings.events_topic, changelog])
    events = counts.get(settings.events_topic)
    if events is None:
        raise MigrationError(f"topic {settings.events_topic} not found", code="UNKNOWN_TOPIC")
    if events != partitions:
        raise MigrationError(
            f"topic {settings.events_topic} has {events} partitions, --partitions says "
            f"{partitions}: grow the topic first, then migrate to its count",
            code="PARTITIONS_MISMATCH",
        )
    was = counts.get(changelog)
    if was is None or was == partitions:
        state_word = "no state changelog" if was is None else f"{changelog} already has {was}"
        log(f"nothing to migrate: {state_word}")
        return MigrateReport(changelog, was or 0, partitions, 0, 0, 0, None)
    if was > partitions:
        raise MigrationError(
            f"{changelog} has {was} partitions, more than the events topic's {partitions}: "
            "Kafka cannot remove partitions; recreate the events topic instead",
            code="PARTITIONS_MISMATCH",
        )
    # A worker that just stopped may still count as a member until its session
    # times out: wait for that, within the timeout.
    deadline = time.monotonic() + timeout_s
    while True:
        # In a child process: streams.kafka.coordinator (librdkafka issue 5040).
        members = len(
            describe_group(settings.connection, settings.app_id, timeout_s=timeout_s).client_ids
        )
        if not members or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if members:
        raise MigrationError(
            f"group {settings.app_id} has {members} active member(s): stop every worker first",
            code="GROUP_ACTIVE",
        )
    with kafka_errors(f"committed offsets of {settings.app_id}"):
        committed = _committed(settings, range(partitions), timeout_s)
    moved_early = sorted(p for p, o in committed.items() if p >= was and o >= 0)
    if moved_early:
        raise MigrationError(
            f"group {settings.app_id} has offsets in new partitions {moved_early}: "
            "their events were processed without their state; replay the history instead",
            code="SPLIT_STATE",
        )
    everything: dict[int, int | None] = {p: None for p in range(was)}
    state, _ = load_state(_conf(settings), changelog, everything, timeout=timeout_s)
    log(f"read the state of {len(state)} keys from {changelog} ({was} partitions)")
    starts = {p: committed.get(p, -1) for p in range(was)}
    tails, ends = _read_tail(settings, starts, timeout_s)
    processor = processor_for(settings, cache_keys=0)
    outputs: list[OutRecord] = []
    status: dict[bytes | None, OutRecord] = {}
    tail_events = findings = 0
    for p in sorted(tails):
        records = tails[p]
        tail_events += len(records)
        for i in range(0, len(records), _CHUNK):
            outcome = processor.process_batch(records[i : i + _CHUNK], state.get)
            for key, _part, blob in outcome.states:
                state[key] = blob
            for recs in outcome.records.values():
                outputs.extend(recs)
            for statuses in (outcome.status or {}).values():
                for srec in statuses:
                    # The latest status of a key is the one to write.
                    status[srec.key] = encoded(srec)
            findings += len(outcome.findings)
    log(f"processed {tail_events} uncommitted events of the old partitions ({findings} findings)")
    backup_dir.mkdir(parents=True, exist_ok=True)
    backup = backup_dir / f"{changelog}.{was}-to-{partitions}.{int(time.time())}.jsonl"
    with backup.open("w", encoding="utf-8") as fh:
        for key, value in state.items():
            b64 = base64.b64encode
            fh.write(json.dumps({"key": b64(key).decode(), "value": b64(value).decode()}) + "\n")
    log(f"state backup: {backup}")
    try:
        with kafka_errors(f"migrating {changelog}"):
            topics.recreate(changelog, partitions, timeout_s, action=f"migrating {changelog}")
            producer = Producer(
                _conf(
                    settings,
                    **{
                        "transactional.id": f"{settings.app_id}-migrate",
                        # findings and status: placed like the faust worker's (aiokafka) producer
                        "partitioner": "murmur2_random",
                        "transaction.timeout.ms": int(timeout_s * 1000),
                    },
                )
            )
            producer.init_transactions(timeout_s)
            producer.begin_transaction()
            for rec in [*outputs, *status.values()]:
                _produce(producer, rec.topic, rec.key, rec.value, rec.partition, rec.headers)
            for key, value in state.items():
                _produce(producer, changelog, key, value, place(key, partitions), ())
            group = Consumer(_conf(settings, **{"group.id": settings.app_id}))
            try:
                meta = group.consumer_group_metadata()
            finally:
                group.close()
            offsets = [TopicPartition(settings.events_topic, p, ends[p]) for p in range(was)]
            producer.send_offsets_to_transaction(offsets, meta, timeout_s)
            producer.commit_transaction(timeout_s)
    except BrokerError as err:
        raise MigrationError(f"{err} (the state is in {backup})", code=err.code) from None
    return MigrateReport(changelog, was, partitions, len(state), tail_events, findings, backup)


def _produce(
    producer: Any,
    topic: str,
    key: bytes | None,
    value: bytes,
    partition: int | None,
    headers: tuple[tuple[str, bytes], ...],
) -> None:
    kwargs: dict[str, Any] = {"key": key, "value": value, "headers": list(headers)}
    if partition is not None:
        kwargs["partition"] = partition
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:
            producer.poll(0.1)
