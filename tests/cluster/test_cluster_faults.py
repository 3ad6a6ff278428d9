"""The live processor on the three-broker cluster under broker faults
(issue 22): the leaders of its partitions SIGKILLed mid-stream, and a
rolling restart of every node while events are produced. Each run checks
the findings are exactly the audit's, every revision once, the DLQ empty and
the worker still up."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from streams.kafka import coordinator
from streams.kafka.connection import KafkaConnection
from tests.cluster.conftest import LocalCluster
from tests.faults.test_broker_restart_midstream import (
    no_duplicates_and_audit,
    topic_factory,
    trickle,
)
from tests.live.conftest import ENGINES, LiveHarness

pytestmark = [pytest.mark.kafka, pytest.mark.faults]


def _leader(cluster: LocalCluster, topic: str, partition: int = 0) -> int:
    """The node leading ``topic``/``partition`` now (waits while there is none)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        part = admin.list_topics(topic, timeout=10).topics[topic].partitions.get(partition)
        if part is not None and part.leader >= 0:
            return int(part.leader)
        time.sleep(0.2)
    raise AssertionError(f"{topic}/{partition} has no leader")


def _check_changelog_replicated(cluster: LocalCluster, changelog: str) -> None:
    """`run --replication 3` made its state changelog with 3 replicas, min ISR 2."""
    from confluent_kafka.admin import ConfigResource, ConfigSource

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    parts = admin.list_topics(changelog, timeout=30).topics[changelog].partitions.values()
    assert parts and all(len(p.replicas) == 3 for p in parts)
    res = ConfigResource(ConfigResource.Type.TOPIC, changelog)
    entry = admin.describe_configs([res])[res].result(30)["min.insync.replicas"]
    assert (entry.value, entry.source) == ("2", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)


def _harness(cluster: LocalCluster, tmp_path: Path, engine: str) -> LiveHarness:
    # Topics with the cluster's defaults: 3 replicas, min ISR 2.
    return LiveHarness(cluster.bootstrap, topic_factory(cluster.bootstrap), tmp_path, 3, engine)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("engine", ENGINES)
def test_leaders_of_events_findings_and_transaction_state_killed_twice(
    kafka_cluster: LocalCluster, tmp_path: Path, engine: str
) -> None:
    """SIGKILL the leader of an events partition, then of a findings partition,
    then of a transaction-state partition, each mid-stream and brought back:
    the worker stays up and the findings are exactly the audit's."""
    kafka_cluster.ensure_all_up()
    h = _harness(kafka_cluster, tmp_path, engine)
    try:
        # ~100 events/s for about three minutes: every kill lands mid-stream.
        events = h.scenario_events(n_keys=800, epochs=4, seed=23)
        w = h.start(extra={"FENCEWATCH_SESSION_TIMEOUT": "30", "FENCEWATCH_REPLICATION": "3"})
        w.wait_ready(timeout=180)
        _check_changelog_replicated(kafka_cluster, f"{h.app_id}-owner-state-changelog")
        feeder = threading.Thread(target=trickle, args=(h, events))
        feeder.start()
        targets = [
            (h.events, 0),
            (h.findings, 0),
            ("__transaction_state", 0),
            (h.events, 1),
            (h.findings, 1),
            ("__transaction_state", 1),
        ]
        for i, (topic, partition) in enumerate(targets, start=1):
            w.wait_processed(i * len(events) // 10, timeout=300)
            node = _leader(kafka_cluster, topic, partition)
            kafka_cluster.broker(node, "kill")
            kafka_cluster.broker(node, "start")
        feeder.join()
        h.wait_all_committed(timeout=600)
        assert w.proc.poll() is None, f"worker exited: {w.tail()}"
        latest = no_duplicates_and_audit(h)
        assert len(latest) > 100
        assert h.read(h.dlq) == []
    finally:
        h.close()
        kafka_cluster.ensure_all_up()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("engine", ENGINES)
def test_rolling_restart_of_all_three_nodes_while_producing(
    kafka_cluster: LocalCluster, tmp_path: Path, engine: str
) -> None:
    """Each node stopped (SIGTERM) and started in turn while events flow: the
    worker stays up and the findings are exactly the audit's."""
    kafka_cluster.ensure_all_up()
    h = _harness(kafka_cluster, tmp_path, engine)
    try:
        events = h.scenario_events(n_keys=500, epochs=4, seed=29)
        # --replication 3, as docs/operate.md asks of a cluster: with the
        # default 1, the changelog partitions of the stopped node have no
        # leader and the coordinator drops the markers of the transactions
        # that end meanwhile ("Couldn't find leader endpoint ... can be
        # skipped"), leaving them open for good; on rdkafka the restore after
        # a failed commit then waited on one for minutes (docs/live.md).
        w = h.start(extra={"FENCEWATCH_SESSION_TIMEOUT": "30", "FENCEWATCH_REPLICATION": "3"})
        w.wait_ready(timeout=180)
        _check_changelog_replicated(kafka_cluster, f"{h.app_id}-owner-state-changelog")
        feeder = threading.Thread(target=trickle, args=(h, events))
        feeder.start()
        for node in (1, 2, 3):
            w.wait_processed(node * len(events) // 8, timeout=300)
            kafka_cluster.broker(node, "stop")
            kafka_cluster.broker(node, "start")
        feeder.join()
        h.wait_all_committed(timeout=600)
        assert w.proc.poll() is None, f"worker exited: {w.tail()}"
        latest = no_duplicates_and_audit(h)
        assert len(latest) > 100
        assert h.read(h.dlq) == []
    finally:
        h.close()
        kafka_cluster.ensure_all_up()


def _partition_view(cluster: LocalCluster, topic: str, partition: int) -> tuple[int, list[int]]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    part = admin.list_topics(topic, timeout=10).topics[topic].partitions[partition]
    return int(part.leader), sorted(part.isrs)


def _wait_view(
    cluster: LocalCluster, topic: str, ok: Callable[[int, list[int]], bool], what: str
) -> None:
    deadline = time.monotonic() + 180
    view = (-1, [])
    while time.monotonic() < deadline:
        try:
            view = _partition_view(cluster, topic, 0)
        except Exception:  # metadata briefly unavailable during the election
            time.sleep(0.5)
            continue
        if ok(*view):
            return
        time.sleep(0.5)
    raise AssertionError(f"{topic}/0 never {what}: leader, ISR = {view}")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("engine", ENGINES)
def test_isolated_leader_is_fenced_and_rejoins_after_healing(
    kafka_cluster: LocalCluster, tmp_path: Path, engine: str
) -> None:
    """The leader of an events partition is cut off from the other nodes and the
    clients (`kafka-local isolate N`) mid-stream until the cluster has fenced it
    (another leader, out of the ISR), then healed: it rejoins the ISR, the
    worker stays up, and the findings are exactly the audit's."""
    kafka_cluster.ensure_all_up()
    h = _harness(kafka_cluster, tmp_path, engine)
    try:
        events = h.scenario_events(n_keys=400, epochs=4, seed=31)
        # --replication 3 as in the rolling restart: a single-replica changelog
        # partition on the isolated node loses its leader, and its transaction
        # markers are dropped (a rdkafka run waited on one for good).
        w = h.start(extra={"FENCEWATCH_SESSION_TIMEOUT": "30", "FENCEWATCH_REPLICATION": "3"})
        w.wait_ready(timeout=180)
        _check_changelog_replicated(kafka_cluster, f"{h.app_id}-owner-state-changelog")
        feeder = threading.Thread(target=trickle, args=(h, events))
        feeder.start()
        w.wait_processed(len(events) // 5, timeout=300)
        node = _leader(kafka_cluster, h.events, 0)
        kafka_cluster.run("isolate", str(node))
        try:
            _wait_view(
                kafka_cluster,
                h.events,
                lambda leader, isr: leader not in (-1, node) and node not in isr,
                f"fenced node {node}",
            )
        finally:
            kafka_cluster.run("heal", str(node))
        _wait_view(kafka_cluster, h.events, lambda _l, isr: isr == [1, 2, 3], "rejoined")
        feeder.join()
        h.wait_all_committed(timeout=600)
        assert w.proc.poll() is None, f"worker exited: {w.tail()}"
        latest = no_duplicates_and_audit(h)
        assert len(latest) > 100
        assert h.read(h.dlq) == []
    finally:
        h.close()
        kafka_cluster.ensure_all_up()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("engine", ENGINES)
def test_group_coordinator_killed_while_a_worker_joins(
    kafka_cluster: LocalCluster, tmp_path: Path, engine: str
) -> None:
    """The node coordinating the group is SIGKILLed while a second worker joins
    (the group mid-reassignment), then brought back: both workers stay up,
    split the partitions, and the findings are exactly the audit's."""
    from tests.cluster.nemesis import coordinator_node

    kafka_cluster.ensure_all_up()
    h = _harness(kafka_cluster, tmp_path, engine)
    extra = {"FENCEWATCH_SESSION_TIMEOUT": "30", "FENCEWATCH_REPLICATION": "3"}
    try:
        events = h.scenario_events(n_keys=300, epochs=4, seed=43)
        w1 = h.start("w1", extra=extra)
        w1.wait_ready(timeout=180)
        feeder = threading.Thread(target=trickle, args=(h, events))
        feeder.start()
        w1.wait_processed(len(events) // 5, timeout=300)
        node, _ = coordinator_node(kafka_cluster, h.app_id)
        # The computed coordinator (what the soak aims at) is the one the
        # broker names, asked through the product's crash-proof path.
        described = coordinator.describe_group(
            KafkaConnection(kafka_cluster.bootstrap), h.app_id, timeout_s=30
        )
        assert described.coordinator == node
        w2 = h.start("w2", extra=extra)
        # The reassignment is under way once w1 no longer holds every
        # partition (w2's join made the group rebalance, and w1 gave up some
        # or all of them): the coordinator dies then, before w2 is settled.
        deadline = time.monotonic() + 180
        while sorted((w1.health() or {}).get("partitions", [])) == [0, 1, 2]:
            assert w2.proc.poll() is None, f"w2 exited: {w2.tail()}"
            assert time.monotonic() < deadline, f"w2 never began to join: {w2.tail()}"
            time.sleep(0.05)
        kafka_cluster.broker(node, "kill")
        kafka_cluster.broker(node, "start")

        def split() -> bool:
            held_1 = set((w1.health() or {}).get("partitions", []))
            held_2 = set((w2.health() or {}).get("partitions", []))
            return bool(held_1) and bool(held_2) and held_1 | held_2 == {0, 1, 2}

        deadline = time.monotonic() + 300
        while not split():
            assert w1.proc.poll() is None, f"w1 exited: {w1.tail()}"
            assert w2.proc.poll() is None, f"w2 exited: {w2.tail()}"
            assert time.monotonic() < deadline, f"never split: {w1.tail()}\n{w2.tail()}"
            time.sleep(0.2)
        feeder.join()
        h.wait_all_committed(timeout=600)
        assert w1.proc.poll() is None, f"w1 exited: {w1.tail()}"
        assert w2.proc.poll() is None, f"w2 exited: {w2.tail()}"
        latest = no_duplicates_and_audit(h)
        assert len(latest) > 100
        assert h.read(h.dlq) == []
        for w in (w1, w2):
            log = w.log_path.read_text("utf-8", "replace")
            assert "Traceback" not in log, log[-4000:]
    finally:
        h.close()
        kafka_cluster.ensure_all_up()
