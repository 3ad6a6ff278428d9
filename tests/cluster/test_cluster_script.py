"""``scripts/kafka-local start --brokers 3``: a replicated KRaft cluster whose
nodes can be killed and brought back on their data, with the settings Kafka's
guarantees need (replicated internal topics, min ISR 2, no unclean election)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.cluster.conftest import LocalCluster

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

_DEADLINE_S = 120.0  # a bound on waiting, not a timing assertion


def _admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def _leader(cluster: LocalCluster, topic: str, partition: int = 0) -> int:
    """The node leading ``topic``/``partition`` (waits while there is none)."""
    admin = _admin(cluster)
    deadline = time.monotonic() + _DEADLINE_S
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=10)
        part = meta.topics[topic].partitions.get(partition)
        if part is not None and part.leader >= 0:
            return int(part.leader)
        time.sleep(0.2)
    raise AssertionError(f"{topic}/{partition} has no leader")


def _isr(cluster: LocalCluster, topic: str, partition: int = 0) -> list[int]:
    meta = _admin(cluster).list_topics(topic, timeout=10)
    return sorted(meta.topics[topic].partitions[partition].isrs)


def _wait_isr(cluster: LocalCluster, topic: str, want: list[int]) -> None:
    deadline = time.monotonic() + _DEADLINE_S
    while _isr(cluster, topic) != want:
        if time.monotonic() >= deadline:
            raise AssertionError(f"{topic} ISR {_isr(cluster, topic)}, wanted {want}")
        time.sleep(0.5)


def _produce(cluster: LocalCluster, topic: str, values: list[bytes]) -> None:
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True}
    )
    errors: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    for v in values:
        producer.produce(topic, key=b"k", value=v, on_delivery=on_delivery)
    assert producer.flush(60) == 0
    assert errors == []


def _read_all(cluster: LocalCluster, topic: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"cluster-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + _DEADLINE_S
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            out.append(msg.value())
    finally:
        consumer.close()
    return out


def test_three_nodes_answer_and_internal_topics_are_replicated_three_ways(
    kafka_cluster: LocalCluster,
) -> None:
    """The cluster has three brokers; after a transaction and a group commit,
    __transaction_state and __consumer_offsets have 3 replicas and min ISR 2,
    and unclean leader election is off."""
    topic = f"cluster-internal-{uuid.uuid4().hex[:8]}"
    admin = _admin(kafka_cluster)
    assert len(admin.list_topics(timeout=30).brokers) == 3
    admin.create_topics([NewTopic(topic, 1)])[topic].result(60)
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap, "transactional.id": topic})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=b"v")
    producer.commit_transaction(60)
    assert _read_all(kafka_cluster, topic, 1) == [b"v"]
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_cluster.bootstrap,
            "group.id": topic,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    while (msg := consumer.poll(1.0)) is None:
        pass
    consumer.commit(msg, asynchronous=False)
    consumer.close()
    meta = admin.list_topics(timeout=30)
    for internal in ("__transaction_state", "__consumer_offsets"):
        parts = meta.topics[internal].partitions.values()
        assert parts and all(len(p.replicas) == 3 for p in parts), internal
    resources = [
        ConfigResource(ConfigResource.Type.TOPIC, name)
        for name in ("__transaction_state", "__consumer_offsets", topic)
    ]
    for res, fut in admin.describe_configs(resources).items():
        cfg = fut.result(30)
        assert cfg["min.insync.replicas"].value == "2", res
        assert cfg["unclean.leader.election.enable"].value == "false", res


def test_a_killed_leader_fails_over_and_comes_back_on_its_data(
    kafka_cluster: LocalCluster,
) -> None:
    """SIGKILL of a partition's leader: acks=all writes go on through the new
    leader, and `broker N start` brings the node back into the ISR with every
    record, the bootstrap list unchanged."""
    topic = f"cluster-kill-{uuid.uuid4().hex[:8]}"
    admin = _admin(kafka_cluster)
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(60)
    _produce(kafka_cluster, topic, [b"before-%d" % i for i in range(50)])
    leader = _leader(kafka_cluster, topic)
    kafka_cluster.broker(leader, "kill")
    try:
        assert not kafka_cluster.is_running(leader)
        _produce(kafka_cluster, topic, [b"during-%d" % i for i in range(50)])
        assert _leader(kafka_cluster, topic) != leader
    finally:
        kafka_cluster.broker(leader, "start")
    _wait_isr(kafka_cluster, topic, [1, 2, 3])
    got = _read_all(kafka_cluster, topic, 100)
    assert got == [b"before-%d" % i for i in range(50)] + [b"during-%d" % i for i in range(50)]
    status = kafka_cluster.run("status").splitlines()[-1]
    assert f"running=3 bootstrap={kafka_cluster.bootstrap}" in status


def test_broker_commands_refuse_a_node_that_does_not_exist(kafka_cluster: LocalCluster) -> None:
    """`broker 4 kill` on a three-node cluster fails with one line naming N."""
    with pytest.raises(AssertionError, match="N must be 1 to 3, got: 4"):
        kafka_cluster.broker(4, "kill")
