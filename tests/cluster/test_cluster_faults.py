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
