"""librdkafka's AdminClient kills its whole process when a consumer group's
coordinator broker dies under a coordinator request (librdkafka issues 5040,
3663 and 5397): reproduced here in a child process, so the suite survives it;
and the product's path for those requests (:mod:`streams.kafka.coordinator`,
a child per request) survives the same fault in this process (issue 42)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from streams.errors import BrokerError
from streams.kafka import coordinator
from streams.kafka.connection import KafkaConnection
from tests.cluster.conftest import LocalCluster

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

#: What the takeover fence did in-process before issue 42: committed offsets
#: asked through an AdminClient, here from four threads until told to stop.
_HAMMER = """
import sys, threading, time
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
bootstrap, group, topic, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
end = time.monotonic() + seconds
def ask():
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
    return admin.list_consumer_group_offsets([request], request_timeout=3)[group].result(5)
ask()
print("asking", flush=True)
def loop():
    while time.monotonic() < end:
        try:
            ask()
        except Exception:
            pass
threads = [threading.Thread(target=loop) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print("survived", flush=True)
"""


def _group_with_offsets(cluster: LocalCluster) -> tuple[str, str]:
    """A new topic (3 replicas) and a group that committed offset 7 of its
    partition 0 with metadata, without members."""
    topic, group = f"coord-{uuid.uuid4().hex[:8]}", f"coord-g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(60)
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        consumer.commit(
            offsets=[TopicPartition(topic, 0, 7, metadata="fencewatch-txn:w1")], asynchronous=False
        )
    finally:
        consumer.close()
    return topic, group


def _kill_and_restart_coordinator(cluster: LocalCluster, conn: KafkaConnection, group: str) -> int:
    node = coordinator.describe_group(conn, group, timeout_s=10).coordinator
    assert node is not None
    cluster.broker(node, "kill")
    time.sleep(8)  # the admin requests meet the dead broker, then its successor
    cluster.broker(node, "start")
    return node


@pytest.mark.timeout(600)
def test_an_admin_coordinator_request_crashes_its_process_when_the_coordinator_dies(
    kafka_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The crash reproduced in a child: AdminClient.list_consumer_group_offsets
    while the coordinator's broker is killed and restarted kills the process."""
    kafka_cluster.ensure_all_up()
    conn = KafkaConnection(kafka_cluster.bootstrap)
    topic, group = _group_with_offsets(kafka_cluster)
    log = tmp_path / "hammer.log"
    deaths: list[int] = []
    try:
        for _attempt in range(2):  # 3 of 3 died in the first round here
            with open(log, "wb") as out:
                child = subprocess.Popen(
                    [sys.executable, "-c", _HAMMER, kafka_cluster.bootstrap, group, topic, "45"],
                    stdout=subprocess.PIPE,
                    stderr=out,
                )
                assert child.stdout is not None
                assert child.stdout.readline() == b"asking\n", log.read_text()
                _kill_and_restart_coordinator(kafka_cluster, conn, group)
                code = child.wait(120)
            if code < 0:
                deaths.append(code)
                break
    finally:
        kafka_cluster.ensure_all_up()
    assert deaths, (
        "the AdminClient survived the coordinator's death twice: librdkafka may have fixed "
        "issues 5040/3663 (see streams/kafka/coordinator.py before dropping the child). "
        + log.read_text()[-2000:]
    )
    assert -deaths[0] in (signal.SIGABRT, signal.SIGSEGV), deaths


@pytest.mark.timeout(600)
def test_the_products_coordinator_requests_survive_the_coordinator_dying(
    kafka_cluster: LocalCluster,
) -> None:
    """streams.kafka.coordinator asked from four threads of this process while
    the coordinator's broker is killed and restarted: every call returns or
    raises BrokerError, and afterwards it answers the committed offset."""
    kafka_cluster.ensure_all_up()
    conn = KafkaConnection(kafka_cluster.bootstrap)
    topic, group = _group_with_offsets(kafka_cluster)
    stop = threading.Event()
    outcomes: dict[str, int] = {}
    unexpected: list[BaseException] = []

    def loop() -> None:
        while not stop.is_set():
            try:
                coordinator.committed_offsets(conn, group, topic, [0], timeout_s=3)
                key = "ok"
            except BrokerError as exc:
                key = exc.code
            except BaseException as exc:  # anything else fails the test
                unexpected.append(exc)
                return
            outcomes[key] = outcomes.get(key, 0) + 1

    threads = [threading.Thread(target=loop) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        _kill_and_restart_coordinator(kafka_cluster, conn, group)
        time.sleep(10)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        kafka_cluster.ensure_all_up()
    assert not unexpected, unexpected
    assert outcomes.get("ok", 0) > 0, outcomes
    after = coordinator.committed_offsets(conn, group, topic, [0], timeout_s=30)
    assert after[0] == coordinator.CommittedOffset(7, "fencewatch-txn:w1")
