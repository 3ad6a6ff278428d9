"""Smoke tests through the real broker: the Kafka guarantees fencewatch relies on."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer

pytestmark = pytest.mark.kafka

_DEADLINE_S = 60.0  # a bound on waiting for messages, not a timing assertion


def _consume(bootstrap: str, topic: str, count: int, *, isolation: str) -> list[Message]:
    """Read ``count`` messages from the start of ``topic`` (fails if they never come)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"smoke-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.subscribe([topic])
    out: list[Message] = []
    deadline = time.monotonic() + _DEADLINE_S
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(msg.error())
            out.append(msg)
    finally:
        consumer.close()
    return out


def _drain_more(bootstrap: str, topic: str, seen: int, *, isolation: str) -> list[Message]:
    """Everything a consumer sees up to the end of each partition (end = high watermark)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"smoke-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    consumer.subscribe([topic])
    out: list[Message] = []
    eof: set[int] = set()
    partitions: int | None = None
    deadline = time.monotonic() + _DEADLINE_S
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if partitions is None and consumer.assignment():
                partitions = len(consumer.assignment())
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(msg.error())
                eof.add(msg.partition())
                if partitions is not None and len(eof) >= partitions and len(out) >= seen:
                    break
                continue
            out.append(msg)
    finally:
        consumer.close()
    return out


def test_keyed_messages_keep_their_order_per_key(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """Messages with the same key land on one partition and are consumed in produce order."""
    topic = unique_topic(partitions=3)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    keys = [f"workflow-{i}" for i in range(6)]
    per_key = 40
    for seq in range(per_key):
        for key in keys:
            producer.produce(topic, key=key.encode(), value=str(seq).encode())
    assert producer.flush(30) == 0

    got = _consume(kafka_bootstrap, topic, len(keys) * per_key, isolation="read_committed")

    assert len(got) == len(keys) * per_key
    values: dict[str, list[int]] = defaultdict(list)
    partitions: dict[str, set[int]] = defaultdict(set)
    for msg in got:
        key = msg.key().decode()
        values[key].append(int(msg.value()))
        partitions[key].add(msg.partition())
    assert set(values) == set(keys)
    for key in keys:
        assert values[key] == list(range(per_key)), key
        assert len(partitions[key]) == 1, key
    # With 6 keys on 3 partitions, more than one partition is in use, so the
    # order above is per key, not an artefact of a single partition.
    assert len(set().union(*partitions.values())) > 1


def test_read_committed_sees_committed_but_not_aborted_transactions(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """A read_committed consumer gets committed transactional messages and never aborted ones."""
    topic = unique_topic(partitions=2)
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"smoke-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, key=b"k", value=f"committed-{i}".encode())
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, key=b"k", value=f"aborted-{i}".encode())
    producer.flush(30)  # the aborted records really reach the log
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=b"committed-3")
    producer.commit_transaction(30)

    committed = _drain_more(kafka_bootstrap, topic, 4, isolation="read_committed")
    uncommitted = _drain_more(kafka_bootstrap, topic, 7, isolation="read_uncommitted")

    assert [m.value() for m in committed] == [f"committed-{i}".encode() for i in range(4)]
    # The aborted records are in the log: only isolation hides them.
    assert sorted(m.value() for m in uncommitted if m.value().startswith(b"aborted")) == [
        b"aborted-0",
        b"aborted-1",
        b"aborted-2",
    ]


def test_second_producer_with_same_transactional_id_fences_the_first(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """init_transactions by a new producer fences the old one: its next commit fails _FENCED."""
    topic = unique_topic(partitions=1)
    txn_id = f"smoke-fence-{uuid.uuid4().hex}"
    old = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": txn_id})
    old.init_transactions(30)
    old.begin_transaction()
    old.produce(topic, key=b"k", value=b"old-1")
    old.commit_transaction(30)

    new = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": txn_id})
    new.init_transactions(30)

    with pytest.raises(KafkaException) as raised:
        old.begin_transaction()
        old.produce(topic, key=b"k", value=b"old-2")
        old.commit_transaction(30)
    error = raised.value.args[0]
    assert error.code() == KafkaError._FENCED
    assert error.fatal()

    new.begin_transaction()
    new.produce(topic, key=b"k", value=b"new-1")
    new.commit_transaction(30)
    seen = _drain_more(kafka_bootstrap, topic, 2, isolation="read_committed")
    assert [m.value() for m in seen] == [b"old-1", b"new-1"]


def test_aiokafka_produces_consumes_and_commits_transactions(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """aiokafka 0.14 (under faust) works against this broker, transactions included."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = unique_topic(partitions=2)

    async def scenario() -> list[tuple[bytes, bytes]]:
        plain = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await plain.start()
        try:
            await plain.send_and_wait(topic, b"plain", key=b"k")
        finally:
            await plain.stop()
        txn = AIOKafkaProducer(
            bootstrap_servers=kafka_bootstrap, transactional_id=f"smoke-aio-{uuid.uuid4().hex}"
        )
        await txn.start()
        try:
            async with txn.transaction():
                await txn.send_and_wait(topic, b"committed", key=b"k")
            await txn.begin_transaction()
            await txn.send_and_wait(topic, b"aborted", key=b"k")
            await txn.abort_transaction()
            async with txn.transaction():
                await txn.send_and_wait(topic, b"after-abort", key=b"k")
        finally:
            await txn.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=kafka_bootstrap,
            group_id=f"smoke-aio-{uuid.uuid4().hex}",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            isolation_level="read_committed",
        )
        await consumer.start()
        got: list[tuple[bytes, bytes]] = []
        try:

            async def read() -> None:
                async for msg in consumer:
                    got.append((msg.key, msg.value))
                    if len(got) == 3:
                        return

            await asyncio.wait_for(read(), _DEADLINE_S)
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(scenario())
    assert got == [(b"k", b"plain"), (b"k", b"committed"), (b"k", b"after-abort")]
