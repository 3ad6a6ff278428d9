"""The coordinator requests' child process (streams/kafka/coordinator.py):
its answers on a real broker, a crash contained as one error, and no other
module of the product making those requests in its own process (issue 42)."""

from __future__ import annotations

import ast
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from streams.errors import BrokerError
from streams.kafka import coordinator
from streams.kafka.connection import KafkaConnection

ROOT = Path(__file__).resolve().parents[2]
#: AdminClient methods whose request goes to a group coordinator.
COORDINATOR_CALLS = {
    "list_consumer_group_offsets",
    "describe_consumer_groups",
    "alter_consumer_group_offsets",
    "delete_consumer_groups",
}


def test_only_the_child_module_makes_coordinator_admin_requests() -> None:
    """No module of streams/ but streams/kafka/coordinator.py calls them."""
    found = []
    for path in sorted((ROOT / "streams").rglob("*.py")):
        if path == ROOT / "streams" / "kafka" / "coordinator.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in COORDINATOR_CALLS:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.attr}")
    assert found == []


def test_a_crashed_child_is_one_broker_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child that dies of SIGSEGV raises BrokerError CRASHED naming the signal."""
    monkeypatch.setattr(
        coordinator,
        "CHILD_ARGV",
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"],
    )
    with pytest.raises(BrokerError) as err:
        coordinator.describe_group(KafkaConnection("127.0.0.1:9"), "g", timeout_s=1)
    assert err.value.code == coordinator.CRASHED
    assert "SIGSEGV" in str(err.value)


def test_an_unreachable_broker_is_a_typed_error() -> None:
    """Nothing listening: the child answers with the typed, retriable error."""
    with pytest.raises(BrokerError) as err:
        coordinator.describe_group(
            KafkaConnection("127.0.0.1:9", connect_timeout=1), "g", timeout_s=2
        )
    assert err.value.code != coordinator.CRASHED


@pytest.mark.kafka
def test_offsets_and_members_from_a_real_broker(kafka_bootstrap: str) -> None:
    """Committed offsets with their metadata, members by client id, in one child."""
    topic, group = f"coord-{uuid.uuid4().hex[:8]}", f"coord-g-{uuid.uuid4().hex[:8]}"
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": group,
            "client.id": "worker-one",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        for _ in range(60):
            consumer.poll(0.5)
            if consumer.assignment():
                break
        consumer.commit(
            offsets=[TopicPartition(topic, 1, 42, metadata="fencewatch-txn:w")], asynchronous=False
        )
        offsets, group_now = coordinator.committed_and_members(
            KafkaConnection(kafka_bootstrap), group, topic, [0, 1], timeout_s=10
        )
    finally:
        consumer.close()
    assert offsets == {
        0: coordinator.CommittedOffset(-1001, None),
        1: coordinator.CommittedOffset(42, "fencewatch-txn:w"),
    }
    assert group_now.client_ids == ("worker-one",)
    assert group_now.protocol == "range"
