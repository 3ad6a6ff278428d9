"""The demos' Kafka side: publish evidence, learn when the processor has
committed all of it, read the findings back (the findings consumer's
:meth:`~streams.findings.consumer.FindingsConsumer.latest`), audit the events
topic (:func:`streams.audit.topic.audit_topic`, as ``fencewatch audit
--topic`` does), clean up.

"Done" is exact rather than guessed: the live processor commits its
consumer offsets in the same Kafka transaction as the findings those events
produced, so once the group's committed offsets reach the end of the events
topic, every finding is committed too and a ``read_committed`` read of the
findings topic is complete.

The Kafka clients are :mod:`streams.kafka`'s; they raise fencewatch's errors.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson

from streams.core.findings import Finding
from streams.errors import BrokerError, ProcessorStalled
from streams.kafka.connection import KafkaConnection

__all__ = [
    "ProcessorStalled",
    "audit_topic",
    "jsonl_records",
    "latest_findings",
    "publish",
    "record_count",
    "wait_committed",
]

_TIMEOUT_S = 10.0


def jsonl_records(path: Path) -> list[tuple[bytes | None, bytes]]:
    """(key, value) per non-blank line of a JSON Lines file; the key is the
    line's ``workflow_key`` when it has one (else none: the processor will
    dead-letter what is not an event)."""
    out: list[tuple[bytes | None, bytes]] = []
    for line in path.read_bytes().splitlines():
        if not line.strip():
            continue
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError:
            doc = None
        wkey = doc.get("workflow_key") if isinstance(doc, dict) else None
        out.append((wkey.encode() if isinstance(wkey, str) else None, line.strip()))
    return out


def publish(
    connection: KafkaConnection, topic: str, records: Iterable[tuple[bytes | None, bytes]]
) -> int:
    """Produce ``records`` in order with an idempotent producer (acks=all) and
    wait for every acknowledgement; returns the count."""
    from streams.kafka.clients import Producer

    failures: list[str] = []

    def delivered(err: BrokerError | None) -> None:
        if err is not None and len(failures) < 20:
            failures.append(f"{err.code}: {err}")

    producer = Producer(connection)
    n = 0
    for key, value in records:
        while True:
            try:
                producer.produce(topic, value, key=key, on_delivery=delivered)
                break
            except BufferError:  # local queue full: let deliveries drain it
                producer.poll(0.1)
        n += 1
    left = producer.flush(30)
    if failures or left:
        raise BrokerError(f"publishing to {topic}: {left} unacknowledged; {'; '.join(failures)}")
    return n


def wait_committed(
    connection: KafkaConnection,
    group: str,
    topic: str,
    timeout: float,
    *,
    alive: Callable[[], str | None] = lambda: None,
) -> dict[int, int]:
    """Wait until ``group`` has committed every record of ``topic`` that exists
    now; returns the end offsets. Raises :class:`ProcessorStalled` after
    ``timeout`` seconds, or as soon as ``alive()`` returns a reason."""
    from streams.kafka.clients import committed_offsets, end_offsets

    end = end_offsets(connection, topic)
    wanted = {p: o for p, o in end.items() if o > 0}
    deadline = time.monotonic() + timeout
    committed: dict[int, int] = {}
    while True:
        committed = committed_offsets(connection, group, topic, wanted)
        if all(committed.get(p, -1) >= o for p, o in wanted.items()):
            return end
        dead = alive()
        if dead is not None:
            raise ProcessorStalled(dead)
        if time.monotonic() >= deadline:
            raise ProcessorStalled(
                f"the processor committed {committed} of {wanted} (partition: offset) "
                f"within {timeout:g} s"
            )
        time.sleep(0.1)


def latest_findings(connection: KafkaConnection, topic: str) -> tuple[list[Finding], int]:
    """The latest revision of each finding on ``topic`` (read_committed, to the
    current end: :meth:`FindingsConsumer.latest`), and the number of records
    read. A record that is not a finding is an error."""
    from streams.findings.consumer import FindingsConsumer, FindingsSettings

    with FindingsConsumer(FindingsSettings(connection, topic)) as consumer:
        latest = consumer.latest()
        stats = consumer.stats
    if stats.not_findings:
        raise BrokerError(
            f"{topic}: {stats.not_findings} records are not findings ({'; '.join(stats.errors)})"
        )
    return latest, stats.records


def record_count(connection: KafkaConnection, topic: str) -> int:
    """Committed records on ``topic`` (e.g. the dead-letter topic)."""
    from streams.kafka.reader import iter_topic

    return sum(1 for _ in iter_topic(connection, topic, timeout=_TIMEOUT_S))


def audit_topic(connection: KafkaConnection, topic: str) -> dict[str, dict[str, Any]]:
    """What ``fencewatch audit --topic`` finds on ``topic`` (the same library
    call): latest revision per finding id."""
    from streams.audit.topic import audit_topic

    return audit_topic(connection, topic, timeout=_TIMEOUT_S).latest()
