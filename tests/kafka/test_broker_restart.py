"""The local broker survives clean restarts and kill -9 with its data, port and transactions."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer

from streams.kafka.admin import TopicAdmin, TopicSpec
from streams.kafka.connection import KafkaConnection

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

_DEADLINE_S = 60.0  # a bound on waiting, not a timing assertion


def _read(bootstrap: str, topic: str, group: str, count: int) -> list[bytes]:
    """Read ``count`` committed messages as ``group`` and commit its offsets."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    got: list[Message] = []
    deadline = time.monotonic() + _DEADLINE_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            got.append(msg)
        if got:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return [m.value() for m in got]


def _produce_txn(bootstrap: str, txn_id: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(60)
    producer.begin_transaction()
    for v in values:
        producer.produce(topic, key=b"k", value=v)
    producer.commit_transaction(60)


def test_restart_and_kill9_keep_data_offsets_port_and_transactions(restartable_kafka: Any) -> None:
    """After a clean restart and after kill -9, committed data and group offsets remain,
    the address is unchanged, and a transactional producer can carry on."""
    broker = restartable_kafka
    bootstrap = broker.bootstrap
    topic = f"restart-{uuid.uuid4().hex[:10]}"
    group = f"restart-{uuid.uuid4().hex[:10]}"
    txn_id = f"restart-{uuid.uuid4().hex[:10]}"
    TopicAdmin(KafkaConnection(bootstrap)).ensure([TopicSpec(topic, 2)])
    _produce_txn(bootstrap, txn_id, topic, [b"a", b"b"])
    assert _read(bootstrap, topic, group, 2) == [b"a", b"b"]

    assert broker.restart() == bootstrap
    _produce_txn(bootstrap, txn_id, topic, [b"c"])
    # The group resumes after its committed offset: only the new message.
    assert _read(bootstrap, topic, group, 1) == [b"c"]

    broker.kill9()
    assert broker.start() == bootstrap
    _produce_txn(bootstrap, txn_id, topic, [b"d"])
    assert _read(bootstrap, topic, group, 1) == [b"d"]
    everything = _read(bootstrap, topic, f"{group}-fresh", 4)
    assert everything == [b"a", b"b", b"c", b"d"]


def test_old_producer_is_fenced_across_a_restart(restartable_kafka: Any) -> None:
    """Producer epochs persist in the transaction log: a restart does not un-fence anyone."""
    broker = restartable_kafka
    bootstrap = broker.bootstrap
    topic = f"restart-fence-{uuid.uuid4().hex[:10]}"
    txn_id = f"restart-fence-{uuid.uuid4().hex[:10]}"
    TopicAdmin(KafkaConnection(bootstrap)).ensure([TopicSpec(topic, 1)])
    old = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    old.init_transactions(60)
    _produce_txn(bootstrap, txn_id, topic, [b"new"])  # a newer instance fences `old`

    broker.restart()

    with pytest.raises(KafkaException) as raised:
        old.begin_transaction()
        old.produce(topic, key=b"k", value=b"stale")
        old.commit_transaction(60)
    assert raised.value.args[0].code() == KafkaError._FENCED


def test_a_cluster_id_that_starts_with_a_dash_formats_and_starts(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first start whose cluster id begins with '-' formats the storage and serves that id
    (the format tool's parser took such an id for an option: 1 first start in 64 failed)."""
    from confluent_kafka.admin import AdminClient

    from tests.conftest import LocalKafka

    cluster_id = "-ECXZY9KSsqUoBEYeF61UA"
    monkeypatch.setenv("FENCEWATCH_KAFKA_CLUSTER_ID", cluster_id)
    broker = LocalKafka(tmp_path / "kafka")
    bootstrap = broker.start()
    try:
        meta = (tmp_path / "kafka" / "data" / "meta.properties").read_text()
        assert f"cluster.id={cluster_id}" in meta.splitlines()
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until answered
        assert admin.describe_cluster().result(timeout=_DEADLINE_S).cluster_id == cluster_id
    finally:
        broker.stop()
